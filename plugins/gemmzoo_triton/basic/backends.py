"""``triton-naive`` and ``triton-tiled``, the teaching kernels. Each ``matmul`` is a wrapper in the
tutorial's shape: (1) check the operands, (2) allocate C, (3) launch the kernel. ``prepare`` splits
the same work in two: the checks and every per-problem decision (grid, strides, constexprs) once,
and a ``run`` that allocates C and launches. The kernel modules are imported inside these methods, so
neither triton nor torch loads before a backend is used.
"""

# ruff: noqa: N806 - M, N, K as the tutorial writes them

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gemmzoo_triton.core.backend import TritonBackend


class TritonNaiveBackend(TritonBackend):
    """``triton-naive``: one program per 32x32 block of C, one rank-1 update per k, no ``tl.dot``.

    Readable, not fast: the baseline the tiled kernels are measured against. Its tf32 mode rounds
    the operands to TF32 in the kernel and multiplies them in fp32, as the tensor cores would.
    """

    name = "triton-naive"
    selectable = False  # a baseline to compare against: best_backend considers it only when named

    def prepare(self, a: Any, b: Any) -> Callable[[Any, Any], Any]:
        import torch

        from gemmzoo_triton.basic import naive_kernel as kernel

        M, N, _ = self.check_operands(a, b)
        x, y, precision = self.operands(a, b)
        constexprs = {
            "TF32": precision == "tf32" and x.dtype == torch.float32,
            "BLOCK_M": kernel.BLOCK_M,
            "BLOCK_N": kernel.BLOCK_N,
        }
        grid = (-(-M // kernel.BLOCK_M), -(-N // kernel.BLOCK_N))  # one program per block of C
        return self.plan(a, x, y, kernel.naive_matmul_kernel, grid, constexprs)

    def matmul(self, a: Any, b: Any) -> Any:
        return self.remembered_plan(a, b)(a, b)


class TritonTiledBackend(TritonBackend):
    """``triton-tiled``: the course notebook's kernel, 64x64 tiles of C, K in steps of 32, ``tl.dot``."""

    name = "triton-tiled"

    def prepare(self, a: Any, b: Any) -> Callable[[Any, Any], Any]:
        from gemmzoo_triton.basic import tiled_kernel as kernel

        M, N, _ = self.check_operands(a, b)
        x, y, precision = self.operands(a, b)
        constexprs = {
            "PRECISION": precision,
            "TILE_M": kernel.TILE_M,
            "TILE_N": kernel.TILE_N,
            "TILE_K": kernel.TILE_K,
        }
        grid = (-(-M // kernel.TILE_M), -(-N // kernel.TILE_N))  # one program per output tile
        return self.plan(a, x, y, kernel.tiled_matmul_kernel, grid, constexprs)

    def matmul(self, a: Any, b: Any) -> Any:
        return self.remembered_plan(a, b)(a, b)
