"""The three Triton backends. Each ``matmul`` is a wrapper in the tutorial's shape: (1) check the
operands, (2) allocate C, (3) launch the kernel. The kernel modules are imported inside
``matmul``, so neither triton nor torch loads before a backend is used.
"""

# ruff: noqa: N806 - M, N, K as the tutorial writes them

from __future__ import annotations

from typing import Any

from gemmzoo_triton.common import ACTIVATIONS, TritonBackend, tma_eligible


class TritonNaiveBackend(TritonBackend):
    """``triton-naive``: one program per 32x32 block of C, one rank-1 update per k, no ``tl.dot``.

    Readable, not fast: the baseline the tiled kernels are measured against. Its tf32 mode rounds
    the operands to TF32 in the kernel and multiplies them in fp32, as the tensor cores would.
    """

    name = "triton-naive"
    selectable = False  # a baseline to compare against: best_backend considers it only when named

    def matmul(self, a: Any, b: Any) -> Any:
        import torch
        import triton

        from gemmzoo_triton import naive_kernel as kernel

        # (1) check the operands
        M, N, K = self.check_operands(a, b)
        x, y, precision = self.operands(a, b)
        # (2) allocate the output
        c = torch.empty((M, N), device=x.device, dtype=x.dtype)
        # (3) launch: a 2-D grid, one program per block of C
        if not self.empty_result(c, K):
            grid = (triton.cdiv(M, kernel.BLOCK_M), triton.cdiv(N, kernel.BLOCK_N))
            kernel.naive_matmul_kernel[grid](
                x, y, c,
                M, N, K,
                x.stride(0), x.stride(1),
                y.stride(0), y.stride(1),
                c.stride(0), c.stride(1),
                TF32=precision == "tf32" and x.dtype == torch.float32,
                BLOCK_M=kernel.BLOCK_M,
                BLOCK_N=kernel.BLOCK_N,
            )
        return self.result(c, a)


class TritonTiledBackend(TritonBackend):
    """``triton-tiled``: the course notebook's kernel, 64x64 tiles of C, K in steps of 32, ``tl.dot``."""

    name = "triton-tiled"

    def matmul(self, a: Any, b: Any) -> Any:
        import torch
        import triton

        from gemmzoo_triton import tiled_kernel as kernel

        # (1) check the operands
        M, N, K = self.check_operands(a, b)
        x, y, precision = self.operands(a, b)
        # (2) allocate the output
        c = torch.empty((M, N), device=x.device, dtype=x.dtype)
        # (3) launch: a 2-D grid, one program per output tile
        if not self.empty_result(c, K):
            grid = (triton.cdiv(M, kernel.TILE_M), triton.cdiv(N, kernel.TILE_N))
            kernel.tiled_matmul_kernel[grid](
                x, y, c,
                M, N, K,
                x.stride(0), x.stride(1),
                y.stride(0), y.stride(1),
                c.stride(0), c.stride(1),
                PRECISION=precision,
                TILE_M=kernel.TILE_M,
                TILE_N=kernel.TILE_N,
                TILE_K=kernel.TILE_K,
            )
        return self.result(c, a)


class TritonGroupedBackend(TritonBackend):
    """``triton-grouped``: the tutorial's autotuned kernel with grouped program order; TMA on Hopper.

    ``matmul(a, b, activation=None)`` fuses ``"leaky_relu"`` (slope 0.01) or ``"relu"`` into the
    epilogue, applied to the fp32 accumulator before the rounding to C's dtype.

    Two kinds of kernel compute the product. Where :func:`~gemmzoo_triton.common.tma_eligible`
    allows (a CUDA GPU of capability 9.0 or later, Triton >= 3.4, more than 2048^3 multiply-adds,
    float16 or bfloat16 operands that are row- or column-major with 16-byte aligned rows, and C's
    rows 16-byte aligned), a kernel of
    :mod:`~gemmzoo_triton.grouped_tma_kernel` reads A and B through tensor descriptors: the
    one with a program per tile, or the persistent one, as its ``VARIANT`` says. Everywhere else, the
    interpreter included, the tutorial's kernel reads them through pointers.

    Each kernel autotunes once per problem in a process: per shape, dtype and precision, and for
    TMA per transposed operand. On Triton >= 3.4 the pointer kernel's results are also kept in
    Triton's cache directory across processes; the TMA kernels' are not, because Triton does not
    cache the results of configs with a ``pre_hook``, which they need to set the descriptors'
    block shapes. Later calls launch the picked config directly. Under the interpreter there is
    one config and no tuning.
    """

    name = "triton-grouped"
    activations = ACTIVATIONS

    def matmul(self, a: Any, b: Any, activation: str | None = None) -> Any:
        import torch

        from gemmzoo_triton import grouped_kernel as kernel

        # (1) check the operands and the activation
        M, N, K = self.check_operands(a, b)
        if activation is not None and activation not in ACTIVATIONS:
            raise self.input_error(
                "matmul",
                f"unknown activation {activation!r}; known: {', '.join(ACTIVATIONS)} (or None)",
                A=a.shape, B=b.shape,
            )
        x, y, precision = self.operands(a, b)
        # (2) allocate the output
        c = torch.empty((M, N), device=x.device, dtype=x.dtype)
        # (3) launch: TMA loads where the GPU and the operands allow them, pointer loads otherwise;
        # the autotuner picks the config, and with it the grid, on a problem's first call
        if not self.empty_result(c, K):  # every activation offered maps 0 to 0
            if tma_eligible(x, y, c, precision):
                from gemmzoo_triton import grouped_tma_kernel

                grouped_tma_kernel.launch(x, y, c, precision, activation)
            else:
                kernel.launch(x, y, c, precision, activation)
        return self.result(c, a)
