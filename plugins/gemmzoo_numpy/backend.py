"""NumPy on the CPU: BLAS for float32 and float64, float16 and float8_e4m3fn computed through float32."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from gemmzoo import Backend
from gemmzoo.fp8 import BFLOAT16, E4M3, e4m3_to_float32, to_e4m3

_NUMPY_DTYPES = {"float16": np.float16, "float32": np.float32, "float64": np.float64}


class NumpyBackend(Backend):
    """``numpy.matmul`` on the host.

    NumPy's own float16 matmul skips BLAS and is very slow, so float16 operands are widened to
    float32, multiplied by BLAS (fp32 accumulation) and the result rounded back to float16.

    ``float8_e4m3fn`` is the CPU reference of the fp8 product: operands are ml_dtypes E4M3 arrays
    (``from_numpy`` rounds with :func:`gemmzoo.fp8.to_e4m3`: saturating to ±448, Inf to NaN),
    widened exactly to float32, multiplied by BLAS (every product is exact in fp32; the sums
    accumulate in fp32), and C is rounded once to an ml_dtypes bfloat16 array.
    """

    name = "numpy"
    requires = ("numpy",)
    prior_routes = ({"device": "cpu", "library": "numpy"},)
    device = "cpu"
    dtypes = frozenset({*_NUMPY_DTYPES, "float8_e4m3fn"})

    def from_numpy(self, x: np.ndarray, dtype: str) -> np.ndarray:
        self.check_dtype(dtype, np.shape(x))
        if dtype == "float8_e4m3fn":
            return to_e4m3(x)
        return np.array(x, dtype=_NUMPY_DTYPES[dtype], copy=True)

    def to_numpy(self, y: np.ndarray) -> np.ndarray:
        if y.dtype == E4M3:
            return e4m3_to_float32(y)
        if y.dtype in (np.float16, BFLOAT16):
            return y.astype(np.float32)
        return np.array(y, copy=True)

    def matmul(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        # Two matrices of one declared dtype go straight to their launcher. np.matmul rejects a K
        # that does not match, and that error is then said as check_operands says it; it would
        # take other array types, other dimensions and mixed dtypes, so those are checked here.
        try:
            dtype = a.dtype
            if type(a) is np.ndarray and type(b) is np.ndarray and b.dtype == dtype \
                    and a.ndim == 2 and b.ndim == 2:
                launch = _LAUNCHERS.get(dtype)
                if launch is not None:
                    return launch(a, b)
        except Exception:
            self.check_operands(a, b)
            raise
        self.check_operands(a, b)
        return _LAUNCHERS[a.dtype](a, b)

    def prepare(self, a: np.ndarray, b: np.ndarray) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
        """``numpy.matmul`` itself, or its float32 detour for float16: nothing is left per call."""
        if type(self).matmul is not NumpyBackend.matmul:  # a subclass's own product: plan through it
            return super().prepare(a, b)
        self.check_operands(a, b)
        return _LAUNCHERS[a.dtype]


def _half_matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """float16 through float32 BLAS, rounded back to float16."""
    return np.matmul(a.astype(np.float32), b.astype(np.float32)).astype(np.float16)


def _fp8_matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """E4M3 operands widened exactly to float32, fp32 BLAS, C rounded once to bfloat16."""
    return np.matmul(a.astype(np.float32), b.astype(np.float32)).astype(BFLOAT16)


#: The launcher of each declared dtype, by NumPy dtype.
_LAUNCHERS: dict[np.dtype, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    np.dtype(np.float32): np.matmul,
    np.dtype(np.float64): np.matmul,
    np.dtype(np.float16): _half_matmul,
    E4M3: _fp8_matmul,
}
