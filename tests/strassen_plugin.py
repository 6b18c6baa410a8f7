"""A gemmzoo plugin with a one-level Strassen backend: fast, and accurate only normwise.

Used by the tests in process and, copied into an installed-looking distribution, as a real
plugin. As written it does not declare its accuracy class (so it claims componentwise accuracy,
wrongly); the honest variant adds ``accuracy = "normwise"``.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

import gemmzoo
from gemmzoo_numpy import NumpyBackend


class StrassenBackend(NumpyBackend):
    """One level of Strassen's algorithm over NumPy's matmul, float32 and float64.

    Odd or empty sizes, and operands holding NaN or Inf (whose propagation the block sums would
    change), take NumPy's classical product instead.
    """

    name = "strassen-one-level"
    dtypes = frozenset({"float32", "float64"})

    def matmul(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        m, n, k = self.check_operands(a, b)
        if min(m, n, k) < 2 or m % 2 or n % 2 or k % 2 or not (np.isfinite(a).all() and np.isfinite(b).all()):
            return np.matmul(a, b)
        h, w, d = m // 2, n // 2, k // 2
        a11, a12, a21, a22 = a[:h, :d], a[:h, d:], a[h:, :d], a[h:, d:]
        b11, b12, b21, b22 = b[:d, :w], b[:d, w:], b[d:, :w], b[d:, w:]
        m1 = (a11 + a22) @ (b11 + b22)
        m2 = (a21 + a22) @ b11
        m3 = a11 @ (b12 - b22)
        m4 = a22 @ (b21 - b11)
        m5 = (a11 + a12) @ b22
        m6 = (a21 - a11) @ (b11 + b12)
        m7 = (a12 - a22) @ (b21 + b22)
        c = np.empty((m, n), dtype=a.dtype)
        c[:h, :w] = m1 + m4 - m5 + m7
        c[:h, w:] = m3 + m5
        c[h:, :w] = m2 + m4
        c[h:, w:] = m1 - m2 + m3 + m6
        return c


@gemmzoo.hookimpl
def gemmzoo_register_backends(register: Callable[[object], None]) -> None:
    register(StrassenBackend())
