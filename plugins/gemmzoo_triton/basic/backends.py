"""The three Triton backends. Each ``matmul`` is a wrapper in the tutorial's shape: (1) check the
operands, (2) allocate C, (3) launch the kernel. ``prepare`` splits the same work in two: the
checks and every per-problem decision (grid, strides, constexprs, the chosen config) once, and a
``run`` that allocates C and launches. The kernel modules are imported inside these methods, so
neither triton nor torch loads before a backend is used.
"""

# ruff: noqa: N806 - M, N, K as the tutorial writes them

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gemmzoo import TF32Array
from gemmzoo_triton.common import ACTIVATIONS, TritonBackend


class TritonNaiveBackend(TritonBackend):
    """``triton-naive``: one program per 32x32 block of C, one rank-1 update per k, no ``tl.dot``.

    Readable, not fast: the baseline the tiled kernels are measured against. Its tf32 mode rounds
    the operands to TF32 in the kernel and multiplies them in fp32, as the tensor cores would.
    """

    name = "triton-naive"
    selectable = False  # a baseline to compare against: best_backend considers it only when named

    def prepare(self, a: Any, b: Any) -> Callable[[Any, Any], Any]:
        import torch

        from gemmzoo_triton import naive_kernel as kernel

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
        from gemmzoo_triton import tiled_kernel as kernel

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


class TritonGroupedBackend(TritonBackend):
    """``triton-grouped``: the tutorial's autotuned kernel with grouped program order; TMA on Hopper.

    ``matmul(a, b, activation=None)`` (and ``prepare(a, b, activation=None)``) fuses
    ``"leaky_relu"`` (slope 0.01) or ``"relu"`` into the epilogue, applied to the fp32 accumulator
    before the rounding to C's dtype.

    A problem takes one of four routes (:func:`~gemmzoo_triton.grouped_plan.route`). On a GPU of
    capability 9.0 or later with Triton >= 3.4, float16 and bfloat16 problems of more than 2048^3
    multiply-adds whose A and B are row- or column-major with 16-byte aligned rows run a kernel of
    :mod:`~gemmzoo_triton.grouped_tma_kernel`, which reads A and B through tensor descriptors (the
    one with a program per tile, or the persistent one, as its ``VARIANT`` says). Large 16-bit
    problems whose rows are not aligned (K or N not a multiple of 8, strided views) run the same
    kernel on aligned copies of those operands; a C whose rows would not be aligned is returned
    as a view of a buffer with padded rows (``grouped_plan.C_OUTPUT``). Large float32 problems in
    tf32 run it with A row-major and B column-major, copied into those layouts where they are not.
    Everything else, the interpreter included, runs the tutorial's kernel, which reads A and B
    through pointers.

    Each kernel autotunes once per problem in a process: per shape, dtype and precision, and for
    TMA per transposed operand and C's store. On Triton >= 3.4 the pointer kernel's results are
    also kept in Triton's cache directory across processes; the TMA kernels' are not, because
    Triton does not cache the results of configs with a ``pre_hook``, which they need to set the
    descriptors' block shapes. A prepared plan binds the picked config's launch after its first
    call and then launches the compiled kernel directly. Under the interpreter there is one
    config and no tuning.
    """

    name = "triton-grouped"
    activations = ACTIVATIONS

    def prepare(self, a: Any, b: Any, activation: str | None = None) -> Callable[[Any, Any], Any]:
        """The plan for ``activation(a @ b)``; see :class:`~gemmzoo_triton.grouped_plan.GroupedPlan`."""
        from gemmzoo_triton.grouped_plan import GroupedPlan

        M, N, K = self.check_operands(a, b)
        if activation is not None and activation not in ACTIVATIONS:
            raise self.input_error(
                "matmul",
                f"unknown activation {activation!r}; known: {', '.join(ACTIVATIONS)} (or None)",
                A=a.shape, B=b.shape,
            )
        x, y, precision = self.operands(a, b)
        if M * N == 0 or K == 0:  # every activation offered maps 0 to 0
            return self.empty_plan(a, x, y)
        return GroupedPlan(x, y, precision, activation, isinstance(a, TF32Array))

    def matmul(self, a: Any, b: Any, activation: str | None = None) -> Any:
        if activation is None:
            return self.remembered_plan(a, b)(a, b)
        return self.prepare(a, b, activation)(a, b)
