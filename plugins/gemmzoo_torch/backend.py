"""torch.matmul on the CPU and on CUDA (cuBLAS), with TF32 as a per-call mode on CUDA."""

from __future__ import annotations

import contextlib
import importlib.util
from collections.abc import Iterator
from typing import Any

from gemmzoo import Backend, TF32Array
from gemmzoo.torch_tensors import TorchTensors


def torch_missing_reason() -> str | None:
    """Why torch cannot be imported here, or ``None``."""
    if importlib.util.find_spec("torch") is None:
        return "torch is not installed (pip install 'gemmzoo[torch]')"
    return None


@contextlib.contextmanager
def cuda_matmul_precision(tf32: bool) -> Iterator[None]:
    """Set cuBLAS to TF32 (or IEEE fp32) math, with fp32 reductions for 16-bit types, then restore.

    torch's global switches would otherwise leak between calls and between backends; this keeps
    them as the caller had them.
    """
    import torch

    settings = torch.backends.cuda.matmul
    saved = (
        settings.allow_tf32,
        settings.allow_fp16_reduced_precision_reduction,
        settings.allow_bf16_reduced_precision_reduction,
    )
    settings.allow_tf32 = tf32
    settings.allow_fp16_reduced_precision_reduction = False
    settings.allow_bf16_reduced_precision_reduction = False
    try:
        yield
    finally:
        (
            settings.allow_tf32,
            settings.allow_fp16_reduced_precision_reduction,
            settings.allow_bf16_reduced_precision_reduction,
        ) = saved


class TorchCpuBackend(TorchTensors, Backend):
    """``torch.matmul`` on CPU tensors."""

    name = "torch-cpu"
    device = "cpu"
    dtypes = frozenset({"float16", "bfloat16", "float32", "float64"})

    def unavailable_reason(self) -> str | None:
        return torch_missing_reason()

    def matmul(self, a: Any, b: Any) -> Any:
        import torch

        self.check_operands(a, b)
        return torch.matmul(a, b)


class TorchBackend(TorchCpuBackend):
    """``torch.matmul`` on CUDA tensors: cuBLAS. ``float32`` is IEEE; ``tf32`` is its own mode."""

    name = "torch"
    device = "cuda"
    dtypes = frozenset({"float16", "bfloat16", "float32", "tf32", "float64"})

    def unavailable_reason(self) -> str | None:
        missing = torch_missing_reason()
        if missing:
            return missing
        import torch

        if not torch.cuda.is_available():
            build = "a CPU-only build" if torch.version.cuda is None else f"CUDA {torch.version.cuda}"
            return f"no CUDA device visible to torch {torch.__version__} ({build})"
        return None

    def matmul(self, a: Any, b: Any) -> Any:
        import torch

        self.check_operands(a, b)
        tf32 = isinstance(a, TF32Array)
        with cuda_matmul_precision(tf32):
            if tf32:
                return TF32Array(torch.matmul(a.data, b.data))
            return torch.matmul(a, b)

    def synchronize(self) -> None:
        import torch

        torch.cuda.synchronize()
