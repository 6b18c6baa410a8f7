"""``triton-fp8``: float8_e4m3fn GEMM in Triton, fp32 accumulation with promoted partial sums, C in bf16."""

# ruff: noqa: N806 - M, N, K as the tutorial writes them

from __future__ import annotations

import functools
from typing import Any

from gemmzoo_triton.common import TritonBackend, interpreter_mode, triton_unavailable_reason

#: The oldest CUDA capability with fp8 tensor cores (Ada 8.9; Hopper is 9.0).
FP8_MIN_CAPABILITY = (8, 9)


@functools.cache
def _fp8_gpu_reason() -> str | None:
    import torch

    if not hasattr(torch, "float8_e4m3fn"):
        return f"torch {torch.__version__} has no float8_e4m3fn"
    capability = torch.cuda.get_device_capability()
    if capability < FP8_MIN_CAPABILITY:
        name, (major, minor) = torch.cuda.get_device_name(), capability
        return f"{name} (capability {major}.{minor}) has no fp8 tensor cores; needs 8.9 or later"
    return None


class TritonFp8Backend(TritonBackend):
    """``triton-fp8``: :mod:`gemmzoo_triton.fp8_kernel`, the grouped tile kernel on fp8 operands.

    Computes only ``float8_e4m3fn``: A and B hold E4M3 values, C comes back in bfloat16 (the
    contract's per-tensor scale 1). The tensor cores' partial sums are promoted to the fp32
    accumulator every :data:`~gemmzoo_triton.fp8_kernel.PROMOTE_EVERY` products of K, so the sum is
    an fp32 one; Triton's default on Hopper (no promotion) is faster and fails the conformance
    bound. Available on CUDA GPUs of capability 8.9 and later, and on the CPU under Triton's
    interpreter, where the kernel works around the interpreter's E4M3 decoding and bfloat16
    rounding (see :mod:`~gemmzoo_triton.fp8_kernel`). Any layout: the kernel reads A and B through
    their strides.
    """

    name = "triton-fp8"

    @property  # type: ignore[override]
    def dtypes(self) -> frozenset[str]:
        return frozenset({"float8_e4m3fn"})

    def unavailable_reason(self) -> str | None:
        reason = triton_unavailable_reason()
        if reason is not None or interpreter_mode():
            return reason
        return _fp8_gpu_reason()

    def matmul(self, a: Any, b: Any) -> Any:
        import torch

        from gemmzoo_triton import fp8_kernel

        # (1) check the operands
        M, N, K = self.check_operands(a, b)
        x, y, _ = self.operands(a, b)
        # (2) allocate the output: bfloat16, as the contract's float8_e4m3fn says
        c = torch.empty((M, N), device=x.device, dtype=torch.bfloat16)
        # (3) launch; the autotuner picks the config on a problem's first call
        if not self.empty_result(c, K):
            fp8_kernel.launch(x, y, c)
        return c
