"""triton-fp8's Hopper kernel: fp8 tiles fetched by the tensor memory accelerator, C stored by it.

A is read through a descriptor over itself (row-major, K contiguous) and B through a descriptor
over its transpose (B column-major, so Bᵀ is row-major with K contiguous): both K-major, the only
layout Hopper's fp8 MMA instructions take from shared memory. Tiles past a matrix's edge load as
zeros and store clipped, so nothing is masked. C is rounded once to bfloat16.

Promotion (``PROMOTE``, see :data:`gemmzoo_triton.fp8.pointer_kernel.PROMOTE_EVERY`): with 0, each K
tile's product is summed by the tensor cores into a fresh zero (their reduced-precision sum, over
BLOCK_SIZE_K products) and added to the fp32 accumulator with an ordinary fp32 add, cuBLAS's
``use_fast_accum=False`` numerics (docs/results/2026-11-23-fp8.md compares the bits with
``torch._scaled_mm``). A positive value asks Triton for promotion every that many products through
``max_num_imprecise_acc``. Triton's default on Hopper, no promotion at all, is not offered: its
sums fall outside gemmzoo's float8_e4m3fn bound.

Register budget: a warpgroup holds its share of the fp32 accumulator (64 registers a thread per
64x128 of C) and, while a K tile's product is being added, the same again for the fresh partial
sum. ``SPLIT_M`` or ``SPLIT_N`` 2 computes a BLOCK_SIZE_M x BLOCK_SIZE_N tile of C as two halves,
each its own dot sharing the other operand's tile (loaded once): only half the partial sum is live
at a time, so 128x256 tiles, or 128x128 ones in one warpgroup, fit in registers with promotion.
Halves of M keep the MMA instructions as wide as the tile (m64n128 for 128x128 in 4 warps); halves
of N narrow them.

The kernel is persistent: the grid's programs (PROGRAMS_PER_SM per SM, fewer for small problems)
walk C's tiles in grouped order (:func:`gemmzoo_triton.grouped.pointer_kernel.tile_position`), and with
``FLATTEN`` the tile loop and the K loop are pipelined as one, so that the loads of a program's
next tile overlap the epilogue of its last. With one program per tile it is the classic kernel.

Why two programs per SM: Triton runs a program's warps in lockstep (the pipeline's barriers), and
its wgmma pipeliner waits for a dot whose result the loop uses before going on; so while a
program adds a K tile's partial sums into the accumulator, its tensor cores idle, a large share
of the time at one program per SM. A second program on the same SM, at its own point of the
K loop, keeps them busy meanwhile, as a second consumer warpgroup does in cuBLAS. With 128x128
tiles in halves of M, 4 warps and three stages (112 KiB of shared memory), two fit an SM, and the
promoted kernel ran as fast as the unpromoted one (docs/results/2026-11-23-h100-fp8-tma.md).

The backend takes this kernel where :func:`gemmzoo_triton.fp8.backend.tma_fp8_eligible` allows
and :mod:`~gemmzoo_triton.fp8.gluon_kernel` (warp-specialized, faster) does not take the problem:
M or N under 128, a GPU other than Hopper, a Triton without Gluon; imported only then.
"""

# ruff: noqa: N803, N806 - named as in the tutorial: M, N, K and upper-case constexprs

from __future__ import annotations

from typing import Any

import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

from gemmzoo_triton.core.autotune import autotuned, launch_tuned, make_config
from gemmzoo_triton.core.descriptors import reusing
from gemmzoo_triton.core.hopper import num_sms
from gemmzoo_triton.core.tile_order import tile_position
from gemmzoo_triton.fp8.pointer_kernel import PROMOTE_EVERY


def set_block_shapes(nargs: dict[str, Any]) -> None:
    """Each config's ``pre_hook``: give the descriptors the block shapes of the config about to run."""
    bm, bn, bk = (nargs[f"BLOCK_SIZE_{d}"] for d in "MNK")
    part_m, part_n = bm // nargs["SPLIT_M"], bn // nargs["SPLIT_N"]
    nargs["a_desc"].block_shape = [part_m, bk]
    nargs["b_desc"].block_shape = [part_n, bk]
    nargs["c_desc"].block_shape = [part_m, part_n]


def _tma_config(bm: int, bn: int, stages: int, warps: int, split_m: int = 1, split_n: int = 1,
                per_sm: int = 1, maxnreg: int | None = None, flatten: bool = True) -> triton.Config:
    config = make_config(bm, bn, 128, stages, warps, pre_hook=set_block_shapes)
    config.kwargs.update(
        {"SPLIT_M": split_m, "SPLIT_N": split_n, "FLATTEN": flatten, "PROGRAMS_PER_SM": per_sm}
    )
    config.maxnreg = maxnreg
    return config


#: Configs for Hopper's fp8 tensor cores, all with K tiles of 128 (one 128-byte row of each
#: operand per stage, the widest swizzle, and the promotion interval cuBLAS uses). Two programs per
#: SM of 128x128 tiles in halves (see the module's docstring; halves of M were the fastest promoted
#: config on large products: docs/results/2026-11-23-h100-fp8-tma.md); one program of a 128x256 or
#: 256x128 tile in halves (three stages: 144 KiB, C's staging tile 32 KiB more); 128x128 whole,
#: the fastest of these without promotion; 64x128 for narrow problems. prune_configs drops those
#: wider or taller than a problem and those past shared memory.
HOPPER_FP8_TMA_CONFIGS = [
    _tma_config(128, 128, 3, 4, split_m=2, per_sm=2),
    _tma_config(128, 128, 3, 8, split_n=2, per_sm=2, maxnreg=128),
    _tma_config(128, 256, 3, 8, split_n=2),
    _tma_config(256, 128, 3, 8, split_m=2),
    _tma_config(128, 128, 4, 8),
    _tma_config(64, 128, 4, 4, per_sm=2),
]


@triton.jit
def promoted_dot(a, b, accumulator, PROMOTE: tl.constexpr):
    """``accumulator + a @ b`` in fp32, the tensor cores' partial sums promoted as PROMOTE says."""
    if PROMOTE == 0:  # a fresh zero per K tile, then one fp32 add (cuBLAS's numerics)
        return accumulator + tl.dot(a, b)
    else:
        return tl.dot(a, b, accumulator, max_num_imprecise_acc=PROMOTE)


@autotuned(configs=HOPPER_FP8_TMA_CONFIGS, key=["M", "N", "K", "PROMOTE"])
@triton.jit
def fp8_tma_matmul_kernel(
    a_desc, b_desc, c_desc,
    M, N, K,
    PROMOTE: tl.constexpr,
    BLOCK_SIZE_M: tl.constexpr,
    BLOCK_SIZE_N: tl.constexpr,
    BLOCK_SIZE_K: tl.constexpr,
    GROUP_SIZE_M: tl.constexpr,
    SPLIT_M: tl.constexpr,
    SPLIT_N: tl.constexpr,
    FLATTEN: tl.constexpr,
    PROGRAMS_PER_SM: tl.constexpr,
):
    """C (bf16) = A @ B (fp8 E4M3) for tiles ``program_id, program_id + num_programs, ...`` of C.

    PROGRAMS_PER_SM is the launch's: how many programs the grid has per SM (0: one per tile).
    """
    PART_M: tl.constexpr = BLOCK_SIZE_M // SPLIT_M
    PART_N: tl.constexpr = BLOCK_SIZE_N // SPLIT_N
    num_pid_m = tl.cdiv(M, BLOCK_SIZE_M)
    num_pid_n = tl.cdiv(N, BLOCK_SIZE_N)
    # The epilogue finds its tile from a counter of its own, as Triton's persistent tutorial does:
    # a value used both before the K loop and in the epilogue trips up the flattened pipeline.
    programs = tl.num_programs(axis=0)
    epilogue_tile = tl.program_id(axis=0) - programs
    for tile_id in tl.range(tl.program_id(axis=0), num_pid_m * num_pid_n, programs, flatten=FLATTEN):
        pid_m, pid_n = tile_position(tile_id, num_pid_m, num_pid_n, GROUP_SIZE_M)
        off_m, off_n = pid_m * BLOCK_SIZE_M, pid_n * BLOCK_SIZE_N
        first = tl.zeros((PART_M, PART_N), dtype=tl.float32)
        second = tl.zeros((PART_M, PART_N), dtype=tl.float32)
        for off_k in range(0, K, BLOCK_SIZE_K):
            a = a_desc.load([off_m, off_k])
            b = b_desc.load([off_n, off_k]).T
            first = promoted_dot(a, b, first, PROMOTE)
            if SPLIT_N == 2:
                second = promoted_dot(a, b_desc.load([off_n + PART_N, off_k]).T, second, PROMOTE)
            elif SPLIT_M == 2:
                second = promoted_dot(a_desc.load([off_m + PART_M, off_k]), b, second, PROMOTE)
        epilogue_tile += programs
        pid_m, pid_n = tile_position(epilogue_tile, num_pid_m, num_pid_n, GROUP_SIZE_M)
        off_m, off_n = pid_m * BLOCK_SIZE_M, pid_n * BLOCK_SIZE_N
        c_desc.store([off_m, off_n], first.to(tl.bfloat16))
        if SPLIT_N == 2:
            c_desc.store([off_m, off_n + PART_N], second.to(tl.bfloat16))
        elif SPLIT_M == 2:
            c_desc.store([off_m + PART_M, off_n], second.to(tl.bfloat16))


def _descriptor(view: Any) -> TensorDescriptor:
    """A descriptor over a row-major 2-D ``view``, its block shape set per config."""
    return TensorDescriptor(view, list(view.shape), list(view.stride()), [1, 1])


def grid_for(M: int, N: int, sms: int) -> Any:
    """The launch grid, a function of the config: PROGRAMS_PER_SM programs per SM, at most one
    per tile of C (one per tile with PROGRAMS_PER_SM 0)."""

    def grid(meta: dict[str, Any]) -> tuple[int]:
        tiles = triton.cdiv(M, meta["BLOCK_SIZE_M"]) * triton.cdiv(N, meta["BLOCK_SIZE_N"])
        per_sm = meta["PROGRAMS_PER_SM"]
        return (min(per_sm * sms, tiles) if per_sm > 0 else tiles,)

    return grid


def launch(x: Any, y: Any, c: Any, promote: int = PROMOTE_EVERY, mode: str = "quick") -> triton.Config:
    """Compute ``c = x @ y``: ``x`` row-major, ``y`` column-major, both fp8; ``c`` bf16, contiguous.

    Tuned in ``mode`` (see :mod:`~gemmzoo_triton.core.autotune`). Returns the config that ran.
    """
    M, K = x.shape
    N = y.shape[1]
    sms = num_sms(x.device)
    args = (_descriptor(x), _descriptor(y.T), _descriptor(c), M, N, K)
    return launch_tuned(fp8_tma_matmul_kernel, grid_for(M, N, sms), args, {"PROMOTE": promote},
                        (M, N, K, promote, sms), mode)


def picked(x: Any, y: Any, promote: int, mode: str = "quick") -> triton.Config | None:
    """The config :func:`launch` in ``mode`` launches for a problem like ``x @ y``, or None before
    it is tuned (:func:`~gemmzoo_triton.core.autotune.picked`)."""
    from gemmzoo_triton.core import autotune

    M, K = x.shape
    return autotune.picked(fp8_tma_matmul_kernel, (M, y.shape[1], K, promote, num_sms(x.device)), mode)


def bind(M: int, N: int, K: int, promote: int, config: triton.Config, sms: int, device: Any = None) -> Any:
    """:func:`launch` with ``config`` bound for every M x N x K problem on a GPU of ``sms`` SMs:
    the returned ``run(x, y, c)`` makes the descriptors with the config's block shapes (the
    operands' addresses change from call to call) and launches the compiled kernel."""
    from gemmzoo_triton.core import triton_internals
    from gemmzoo_triton.core.launch import BoundLaunch

    blocks = config.all_kwargs()
    bk = blocks["BLOCK_SIZE_K"]
    part_m = blocks["BLOCK_SIZE_M"] // blocks["SPLIT_M"]
    part_n = blocks["BLOCK_SIZE_N"] // blocks["SPLIT_N"]
    kernel = triton_internals.jit_function(fp8_tma_matmul_kernel)
    grid = grid_for(M, N, sms)(blocks)
    launch_bound = BoundLaunch(kernel, grid, {"PROMOTE": promote, **blocks}, pointers=(), device=device)

    a_desc = reusing(lambda x: TensorDescriptor(x, [M, K], [x.stride(0), 1], [part_m, bk]))
    b_desc = reusing(lambda b: TensorDescriptor(b, [N, K], [b.stride(0), 1], [part_n, bk]))
    c_desc = reusing(lambda c: TensorDescriptor(c, [M, N], [c.stride(0), 1], [part_m, part_n]))

    def run(x: Any, y: Any, c: Any) -> None:
        launch_bound(a_desc(x), b_desc(y.T), c_desc(c), M, N, K)

    return run
