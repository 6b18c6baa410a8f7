"""NumPy on the CPU: BLAS for float32 and float64, float16 and float8_e4m3fn computed through float32."""

from __future__ import annotations

import functools
from collections.abc import Callable

import numpy as np

from gemmzoo import Backend
from gemmzoo.contract.fp8 import BFLOAT16, E4M3, e4m3_to_float32, to_e4m3
from gemmzoo.problems.class_math import (
    batched_problem,
    expand_scale,
    group_bounds,
    offsets_problem,
    scaled_problem,
)

_NUMPY_DTYPES = {"float16": np.float16, "float32": np.float32, "float64": np.float64}


class NumpyBackend(Backend):
    """``numpy.matmul`` on the host.

    NumPy's own float16 matmul skips BLAS and is very slow, so float16 operands are widened to
    float32, multiplied by BLAS (fp32 accumulation) and the result rounded back to float16.

    ``float8_e4m3fn`` is the CPU reference of the fp8 product: operands are ml_dtypes E4M3 arrays
    (``from_numpy`` rounds with :func:`gemmzoo.contract.fp8.to_e4m3`: saturating to ±448, Inf to NaN),
    widened exactly to float32, multiplied by BLAS (every product is exact in fp32; the sums
    accumulate in fp32), and C is rounded once to an ml_dtypes bfloat16 array.

    It is the CPU reference of every problem class: ``bmm`` is ``numpy.matmul``'s broadcasting
    product (through the same launchers); ``scaled_mm`` dequantizes each E4M3 operand in float32
    (values times their scales) and multiplies by fp32 BLAS; ``grouped_mm`` multiplies each
    group's rows by its own B.
    """

    name = "numpy"
    requires = ("numpy",)
    prior_routes = ({"device": "cpu", "library": "numpy"},)
    device = "cpu"
    dtypes = frozenset({*_NUMPY_DTYPES, "float8_e4m3fn"})
    classes = frozenset({"gemm", "batched", "scaled", "grouped"})

    @property
    def library_product(self) -> str | None:
        """``"numpy"``: the product is ``numpy.matmul`` (float32 and float64); ``None`` for a
        subclass with a product of its own."""
        return "numpy" if type(self).matmul is NumpyBackend.matmul else None

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
        # two matrices of one declared dtype whose K agree: their launcher (check_operands says the rest)
        if type(a) is np.ndarray and type(b) is np.ndarray and a.ndim == 2 and b.ndim == 2 \
                and a.shape[1] == b.shape[0] and b.dtype == a.dtype:
            launch = self._launchers.get(a.dtype)
            if launch is not None:
                return launch
        self.check_operands(a, b)
        return _LAUNCHERS[a.dtype]

    @functools.cached_property
    def _launchers(self) -> dict[np.dtype, Callable[[np.ndarray, np.ndarray], np.ndarray]]:
        """The launchers of the declared dtypes, by NumPy dtype."""
        dtypes = {**{name: np.dtype(t) for name, t in _NUMPY_DTYPES.items()}, "float8_e4m3fn": E4M3}
        return {dtypes[name]: _LAUNCHERS[dtypes[name]] for name in self.dtypes if name in dtypes}


    def bmm(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Broadcast batched product: ``numpy.matmul`` through the dtype's launcher."""
        batch, problem = batched_problem(np.shape(a), np.shape(b))
        dtype = getattr(a, "dtype", None)
        if batch is None or dtype != getattr(b, "dtype", None) or dtype not in _LAUNCHERS:
            why = problem or f"A is {getattr(a, 'dtype', '?')} and B is {getattr(b, 'dtype', '?')}; " \
                "both must have one declared dtype"
            raise self.input_error("bmm", why, A=np.shape(a), B=np.shape(b))
        return _LAUNCHERS[dtype](a, b)

    def scaled_mm(self, a: np.ndarray, b: np.ndarray, scale_a: np.ndarray, scale_b: np.ndarray,
                  out_dtype: str) -> np.ndarray:
        """Dequantized in float32 (E4M3 values times their scales), fp32 BLAS, C in ``out_dtype``."""
        sa, sb = np.asarray(scale_a, np.float32), np.asarray(scale_b, np.float32)
        scaling, problem = scaled_problem(np.shape(a), np.shape(b), sa.shape, sb.shape)

        def fail(why: str) -> Exception:
            return self.input_error("scaled_mm", why, A=np.shape(a), B=np.shape(b),
                                    scale_a=sa.shape, scale_b=sb.shape)

        if scaling is None:
            raise fail(problem)
        if a.dtype != E4M3 or b.dtype != E4M3:
            raise fail(f"A is {a.dtype} and B is {b.dtype}; both must be float8_e4m3fn")
        if out_dtype not in _SCALED_OUT:
            raise fail(f"out_dtype must be one of {', '.join(_SCALED_OUT)}, not {out_dtype!r}")
        (m, k), n = a.shape, b.shape[1]
        a32 = e4m3_to_float32(a) * expand_scale(sa, scaling, m, k, "A").astype(np.float32)
        b32 = e4m3_to_float32(b) * expand_scale(sb, scaling, k, n, "B").astype(np.float32)
        return np.matmul(a32, b32).astype(_SCALED_OUT[out_dtype])

    def grouped_mm(self, a: np.ndarray, b: np.ndarray, offsets: np.ndarray) -> np.ndarray:
        """Each group's rows of A times its own B (rows past the last offset are zero)."""
        ends = np.asarray(offsets).reshape(-1)

        def fail(why: str) -> Exception:
            return self.input_error("grouped_mm", why, A=np.shape(a), B=np.shape(b), offsets=ends.shape)

        if np.ndim(a) != 2 or np.ndim(b) != 3:
            raise fail("A must be 2-D (total M×K) and B 3-D (G×K×N)")
        if a.shape[1] != b.shape[1]:
            raise fail(f"inner dimensions differ (A has K={a.shape[1]}, B has K={b.shape[1]})")
        if a.dtype != b.dtype or a.dtype not in _LAUNCHERS:
            raise fail(f"A is {a.dtype} and B is {b.dtype}; both must have one declared dtype")
        if not np.issubdtype(ends.dtype, np.integer):
            raise fail(f"offsets must be integers, not {ends.dtype}")
        problem = offsets_problem(ends.tolist(), b.shape[0], a.shape[0])
        if problem is not None:
            raise fail(problem)
        launch = _LAUNCHERS[a.dtype]
        out_dtype = BFLOAT16 if a.dtype == E4M3 else a.dtype
        c = np.zeros((a.shape[0], b.shape[2]), dtype=out_dtype)
        for g, (start, stop) in enumerate(group_bounds(ends.tolist())):
            if stop > start:
                c[start:stop] = launch(a[start:stop], b[g])
        return c


def _half_matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """float16 through float32 BLAS, rounded back to float16."""
    return np.matmul(a.astype(np.float32), b.astype(np.float32)).astype(np.float16)


def _fp8_matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """E4M3 operands widened exactly to float32, fp32 BLAS, C rounded once to bfloat16."""
    return np.matmul(a.astype(np.float32), b.astype(np.float32)).astype(BFLOAT16)


#: The NumPy dtype of each output dtype a scaled product may be asked for.
_SCALED_OUT = {"bfloat16": BFLOAT16, "float16": np.dtype(np.float16), "float32": np.dtype(np.float32)}

#: The launcher of each declared dtype, by NumPy dtype.
_LAUNCHERS: dict[np.dtype, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    np.dtype(np.float32): np.matmul,
    np.dtype(np.float64): np.matmul,
    np.dtype(np.float16): _half_matmul,
    E4M3: _fp8_matmul,
}
