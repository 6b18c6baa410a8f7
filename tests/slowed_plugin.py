"""A gemmzoo plugin made slower on purpose, to check that ``gemmzoo compare`` sees a regression.

``slowed-numpy`` (CPU) and ``slowed-torch`` (CUDA) are the bundled ``numpy`` and ``torch``
backends doing extra work: after the product, they multiply the first ``EXTRA`` share of A's rows
by B again and throw that away, ``EXTRA`` being read from ``GEMMZOO_TEST_EXTRA_WORK`` at each call
(0 by default). With 0.25 a call does 1.25x the multiply-adds: 20% slower in throughput. The
result is the product itself, so the backend conforms.

Used by the tests in process and, copied into an installed-looking distribution, as a real plugin.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from typing import Any

import gemmzoo
from gemmzoo_numpy import NumpyBackend
from gemmzoo_torch import TorchBackend

VARIABLE = "GEMMZOO_TEST_EXTRA_WORK"


def extra_share() -> float:
    """The share of A's rows multiplied again (``GEMMZOO_TEST_EXTRA_WORK``)."""
    return float(os.environ.get(VARIABLE) or 0.0)


class _Slowed:
    """Mixed in before a bundled backend: the product, then the wasted share."""

    def matmul(self, a: Any, b: Any) -> Any:
        c = super().matmul(a, b)  # type: ignore[misc]
        rows = math.ceil(extra_share() * a.shape[0])
        if rows:
            super().matmul(a[:rows], b)  # type: ignore[misc]
        return c

    def prepare(self, a: Any, b: Any) -> Callable[[Any, Any], Any]:
        """No fast path that would skip the extra work (bad operands refused as matmul does)."""
        self.check_operands(a, b)  # type: ignore[attr-defined]
        return self.matmul


class SlowedNumpy(_Slowed, NumpyBackend):
    """``numpy``, doing the extra work."""

    name = "slowed-numpy"
    dtypes = frozenset({"float32", "float64"})


class SlowedTorch(_Slowed, TorchBackend):
    """``torch`` (cuBLAS), doing the extra work."""

    name = "slowed-torch"

    @property  # type: ignore[override]
    def dtypes(self) -> frozenset[str]:
        return frozenset({"float16", "bfloat16", "float32"})


@gemmzoo.hookimpl
def gemmzoo_register_backends(register: Callable[[object], None]) -> None:
    register(SlowedNumpy())
    register(SlowedTorch())
