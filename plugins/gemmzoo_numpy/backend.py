"""NumPy on the CPU: BLAS for float32 and float64, float16 computed through float32."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from gemmzoo import Backend

_NUMPY_DTYPES = {"float16": np.float16, "float32": np.float32, "float64": np.float64}


class NumpyBackend(Backend):
    """``numpy.matmul`` on the host.

    NumPy's own float16 matmul skips BLAS and is very slow, so float16 operands are widened to
    float32, multiplied by BLAS (fp32 accumulation) and the result rounded back to float16.
    """

    name = "numpy"
    device = "cpu"
    dtypes = frozenset(_NUMPY_DTYPES)

    def from_numpy(self, x: np.ndarray, dtype: str) -> np.ndarray:
        self.check_dtype(dtype, np.shape(x))
        return np.array(x, dtype=_NUMPY_DTYPES[dtype], copy=True)

    def to_numpy(self, y: np.ndarray) -> np.ndarray:
        if y.dtype == np.float16:
            return y.astype(np.float32)
        return np.array(y, copy=True)

    def matmul(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        self.check_operands(a, b)
        if a.dtype == np.float16:
            return _half_matmul(a, b)
        return np.matmul(a, b)

    def prepare(self, a: np.ndarray, b: np.ndarray) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
        """``numpy.matmul`` itself, or its float32 detour for float16: nothing is left per call."""
        if type(self).matmul is not NumpyBackend.matmul:  # a subclass's own product: plan through it
            return super().prepare(a, b)
        self.check_operands(a, b)
        return _half_matmul if a.dtype == np.float16 else np.matmul


def _half_matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """float16 through float32 BLAS, rounded back to float16."""
    return np.matmul(a.astype(np.float32), b.astype(np.float32)).astype(np.float16)
