"""``cupy.matmul`` on a CUDA GPU (cuBLAS underneath).

Precision is set per call on the cuBLAS handle CuPy uses for this thread, and restored after:

- float16 and bfloat16 forbid cuBLAS's reduced-precision (16-bit) split-K reductions, so the sum
  over K is fp32 from end to end (at 4097³ fp16 they put the error 1.5× over the fp32-accumulation
  bound on the H100; see docs/results);
- ``tf32`` is its own mode: ``TF32Array`` operands, TF32 tensor-op math for that call only;
- ``float32`` is IEEE, and is not declared while ``CUPY_TF32`` is set to anything but 0, since CuPy
  then asks cuBLAS for TF32 compute on every fp32 product, whatever the math mode.

bfloat16 needs ``ml_dtypes`` (CuPy's bfloat16 dtype comes from it); without it, it is not declared.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
from collections.abc import Iterator
from typing import Any

import numpy as np

from gemmzoo import Backend, TF32Array

# cuBLAS math modes (cublas_api.h); CuPy exports the same numbers under these names.
_DEFAULT_MATH = 0
_TF32_TENSOR_OP_MATH = 3
_DISALLOW_REDUCED_PRECISION_REDUCTION = 16


def _tf32_forced() -> bool:
    return os.environ.get("CUPY_TF32", "0").strip() not in ("", "0")


def _host_dtype(dtype: str) -> Any:
    if dtype == "bfloat16":
        import ml_dtypes

        return ml_dtypes.bfloat16
    return {"float16": np.float16, "float32": np.float32, "tf32": np.float32, "float64": np.float64}[dtype]


@contextlib.contextmanager
def _math_mode(mode: int) -> Iterator[None]:
    """Set this thread's cuBLAS handle to ``mode`` for the duration, then restore it."""
    from cupy.cuda import cublas, device

    handle = device.get_cublas_handle()
    saved = cublas.getMathMode(handle)
    cublas.setMathMode(handle, mode)
    try:
        yield
    finally:
        cublas.setMathMode(handle, saved)


class CupyBackend(Backend):
    """CuPy arrays on the current CUDA device."""

    name = "cupy"
    device = "cuda"

    @property
    def dtypes(self) -> frozenset[str]:  # type: ignore[override]
        declared = {"float16", "float64"}
        if not _tf32_forced():
            declared |= {"float32", "tf32"}
        if importlib.util.find_spec("ml_dtypes") is not None:
            declared.add("bfloat16")
        return frozenset(declared)

    def unavailable_reason(self) -> str | None:
        if importlib.util.find_spec("cupy") is None:
            return "cupy is not installed (pip install cupy-cuda12x or cupy-cuda13x to match your CUDA)"
        try:
            import cupy

            count = cupy.cuda.runtime.getDeviceCount()
        except Exception as error:  # no driver, no device, or a CUDA mismatch
            return f"no usable CUDA device for cupy: {' '.join(str(error).split())}"
        if count == 0:
            return "no CUDA device visible to cupy"
        return None

    def from_numpy(self, x: np.ndarray, dtype: str) -> Any:
        import cupy

        self.check_dtype(dtype, np.shape(x))
        array = cupy.asarray(np.asarray(x, dtype=_host_dtype(dtype)))
        return TF32Array(array) if dtype == "tf32" else array

    def to_numpy(self, y: Any) -> np.ndarray:
        import cupy

        host = cupy.asnumpy(y.data if isinstance(y, TF32Array) else y)
        return host.astype(np.float32) if host.dtype.itemsize == 2 else host

    def matmul(self, a: Any, b: Any) -> Any:
        import cupy

        self.check_operands(a, b)
        if isinstance(a, TF32Array):
            with _math_mode(_TF32_TENSOR_OP_MATH):
                return TF32Array(cupy.matmul(a.data, b.data))
        mode = _DISALLOW_REDUCED_PRECISION_REDUCTION if a.dtype.itemsize == 2 else _DEFAULT_MATH
        with _math_mode(mode):
            return cupy.matmul(a, b)

    def synchronize(self) -> None:
        import cupy

        cupy.cuda.get_current_stream().synchronize()
