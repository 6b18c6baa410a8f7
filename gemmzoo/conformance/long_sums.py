"""Operands of the ``same-sign`` conformance case: a long sum of terms of one sign.

Every term of every C element is non-negative. The first term is about 1 to 4 (``A[:, 0]`` and
``B[0, :]`` in [1, 2)); the other K - 1 are each below the accumulator's unit roundoff relative to
it (both operands in [0, sqrt(u_acc))). A loop that adds the terms one after the other, k
ascending, in an accumulator of the right precision, rounds every later term the same way: it
makes the error a long sum of one sign makes once its partial sum has outgrown its terms (with
terms of equal size that happens as K nears ``1/u_acc``, 1.7·10⁷ in fp32), already at a K that CI
can afford. The bound of :mod:`gemmzoo.conformance.bounds` must hold for such a loop, and for
every other summation order.
"""

from __future__ import annotations

import math

import numpy as np

from gemmzoo.contract.dtypes import dtype_info


def same_sign_operands(m: int, n: int, k: int, dtype: str,
                       rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Float64 A (m×k) and B (k×n) for the ``same-sign`` case of ``dtype`` (see the module)."""
    small = math.sqrt(dtype_info(dtype).accumulate_roundoff)
    a = rng.random((m, k)) * small
    b = rng.random((k, n)) * small
    if k:
        a[:, 0] = 1.0 + rng.random(m)
        b[0, :] = 1.0 + rng.random(n)
    return a, b
