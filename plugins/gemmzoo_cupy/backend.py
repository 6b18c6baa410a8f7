"""CuPy's matrix product on a CUDA GPU (cuBLAS underneath).

The launch is ``cupy.dot``: for two matrices it is the product ``cupy.matmul`` computes (the same
bits), without the generalized-ufunc wrapper ``cupy.matmul`` goes through first, which adds host
time to every call (docs/results/2026-11-23-hot-path.md). Operands are
checked to be matrices before it is reached, where ``dot`` and ``matmul`` would differ.

Precision is set per call on the cuBLAS handle CuPy uses for this thread, only where it differs,
and restored after:

- float16 and bfloat16 forbid cuBLAS's reduced-precision (16-bit) split-K reductions, so the sum
  over K is fp32 from end to end (with them, misaligned fp16 products exceeded the
  fp32-accumulation bound; see docs/results);
- ``tf32`` is its own mode: ``TF32Array`` operands, TF32 tensor-op math for that call only;
- ``float32`` is IEEE, and is not declared while ``CUPY_TF32`` is set to anything but 0, since CuPy
  then asks cuBLAS for TF32 compute on every fp32 product, whatever the math mode.

bfloat16 needs ``ml_dtypes`` (CuPy's bfloat16 dtype comes from it); without it, it is not declared.
"""

from __future__ import annotations

import functools
import importlib.util
import os
from collections.abc import Callable
from typing import Any

import numpy as np

from gemmzoo import Backend, TF32Array
from gemmzoo.contract.backend import dtype_name

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


def _runner(mode: int, tf32: bool, batched: bool = False) -> Callable[[Any, Any], Any]:
    """``run(a, b)``: ``cupy.dot`` of two matrices (``cupy.matmul``'s broadcasting product when
    ``batched``) with this thread's cuBLAS handle in ``mode`` for the call.

    The handle is per thread, so no lock is needed; it is written only when its mode differs, and
    the caller's mode is restored after the launch.
    """
    import cupy
    from cupy.cuda import cublas, device

    dot, get_handle, get_mode, set_mode = cupy.dot, device.get_cublas_handle, cublas.getMathMode, \
        cublas.setMathMode

    def launch_tf32(a: Any, b: Any) -> Any:
        return TF32Array(dot(a.data, b.data))

    launch = launch_tf32 if tf32 else (cupy.matmul if batched else dot)

    def run(a: Any, b: Any) -> Any:
        handle = get_handle()
        saved = get_mode(handle)
        if saved == mode:
            return launch(a, b)
        set_mode(handle, mode)
        try:
            return launch(a, b)
        finally:
            set_mode(handle, saved)

    return run


class CupyBackend(Backend):
    """CuPy arrays on the current CUDA device; batched products through ``cupy.matmul`` with the
    same cuBLAS math mode per dtype (the ``batched`` class)."""

    name = "cupy"
    requires = ("cupy",)
    prior_routes = ({"device": "cuda", "library": "cupy"},)
    device = "cuda"
    classes = frozenset({"gemm", "batched"})

    def __init__(self) -> None:
        self._runs: dict[Any, Callable[[Any, Any], Any]] = {}

    @functools.cached_property
    def dtypes(self) -> frozenset[str]:  # type: ignore[override]
        """Decided on first use (``CUPY_TF32``, ``ml_dtypes``), then fixed for the process."""
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

    def _run(self, dtype: str) -> Callable[[Any, Any], Any]:
        try:
            return self._runs[dtype]
        except KeyError:
            if dtype == "tf32":
                mode = _TF32_TENSOR_OP_MATH
            elif dtype in ("float16", "bfloat16"):
                mode = _DISALLOW_REDUCED_PRECISION_REDUCTION
            else:
                mode = _DEFAULT_MATH
            run = self._runs[dtype] = _runner(mode, dtype == "tf32")
            if dtype != "tf32":  # kept under NumPy's dtype object too: how matmul looks it up
                self._runs[np.dtype(_host_dtype(dtype))] = run
            return run

    def matmul(self, a: Any, b: Any) -> Any:
        # A dtype met before goes straight to its launcher. CuPy rejects a K that does not match
        # (said again as check_operands says it) but would promote mixed dtypes: checked here.
        try:
            dtype = a.dtype
            run = self._runs.get(dtype) if type(a) is type(b) and b.dtype == dtype else None
            if run is not None and a.ndim == 2 and b.ndim == 2:
                return run(a, b)
        except Exception:
            self.check_operands(a, b)
            raise
        self.check_operands(a, b)
        return self._run(dtype_name(a))(a, b)

    def bmm(self, a: Any, b: Any) -> Any:
        """The batched class: ``cupy.matmul`` (batch dimensions broadcast) in the dtype's math mode."""
        from gemmzoo.problems.class_math import batched_problem

        batch, problem = batched_problem(tuple(a.shape), tuple(b.shape))
        dtype = dtype_name(a)
        if batch is None or type(a) is not type(b) or dtype != dtype_name(b) or dtype not in self.dtypes \
                or dtype == "tf32":
            why = problem or f"A is {dtype} and B is {dtype_name(b)}; both must have one declared dtype " \
                "(not tf32)"
            raise self.input_error("bmm", why, A=tuple(a.shape), B=tuple(b.shape))
        key = ("batched", dtype)
        run = self._runs.get(key)
        if run is None:
            half = dtype in ("float16", "bfloat16")
            mode = _DISALLOW_REDUCED_PRECISION_REDUCTION if half else _DEFAULT_MATH
            run = self._runs[key] = _runner(mode, False, batched=True)
        return run(a, b)

    def prepare(self, a: Any, b: Any) -> Callable[[Any, Any], Any]:
        """The dtype's launcher: the math mode is checked per call and set only when it differs."""
        if type(self).matmul is not CupyBackend.matmul:  # a subclass's own product: plan through it
            return super().prepare(a, b)
        self.check_operands(a, b)
        return self._run(dtype_name(a))

    def synchronize(self) -> None:
        import cupy

        cupy.cuda.get_current_stream().synchronize()
