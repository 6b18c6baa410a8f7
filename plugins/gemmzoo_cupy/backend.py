"""``cupy.matmul`` on a CUDA GPU (cuBLAS underneath).

Dtypes: float16 (cuBLAS accumulates in fp32), float32 and float64. Not declared:

- ``tf32``: CuPy's only switches for TF32 are process-wide (the ``CUPY_TF32`` variable, read at
  import, and an internal compute-type setting), so it cannot be a per-call mode here.
- ``float32`` while ``CUPY_TF32`` is set to anything but 0: CuPy would then compute fp32
  products in TF32, which is not the IEEE fp32 that ``float32`` promises.
- ``bfloat16``: CuPy has no bfloat16 dtype of its own.
"""

from __future__ import annotations

import importlib.util
import os
from typing import Any

import numpy as np

from gemmzoo import Backend

_HOST_DTYPES = {"float16": np.float16, "float32": np.float32, "float64": np.float64}


def _tf32_forced() -> bool:
    return os.environ.get("CUPY_TF32", "0").strip() not in ("", "0")


class CupyBackend(Backend):
    """CuPy arrays on the current CUDA device."""

    name = "cupy"
    device = "cuda"

    @property
    def dtypes(self) -> frozenset[str]:  # type: ignore[override]
        if _tf32_forced():
            return frozenset({"float16", "float64"})
        return frozenset(_HOST_DTYPES)

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
        return cupy.asarray(np.asarray(x, dtype=_HOST_DTYPES[dtype]))

    def to_numpy(self, y: Any) -> np.ndarray:
        import cupy

        host = cupy.asnumpy(y)
        return host.astype(np.float32) if host.dtype == np.float16 else host

    def matmul(self, a: Any, b: Any) -> Any:
        import cupy

        self.check_operands(a, b)
        return cupy.matmul(a, b)

    def synchronize(self) -> None:
        import cupy

        cupy.cuda.get_current_stream().synchronize()
