"""triton-fp8's Hopper kernel: fp8 tiles fetched by the tensor memory accelerator, C stored by it.

A is read through a descriptor over itself (row-major, K contiguous) and B through a descriptor
over its transpose (B column-major, so Bᵀ is row-major with K contiguous): both K-major, the only
layout Hopper's fp8 MMA instructions take from shared memory. Tiles past a matrix's edge load as
zeros and store clipped, so nothing is masked. C is rounded once to bfloat16.

Promotion (``PROMOTE``, see :data:`gemmzoo_triton.fp8_kernel.PROMOTE_EVERY`): with 0, each K
tile's product is summed by the tensor cores into a fresh zero (their reduced-precision sum, over
BLOCK_SIZE_K products) and added to the fp32 accumulator with an ordinary fp32 add, cuBLAS's
``use_fast_accum=False`` numerics. A positive value asks Triton for the same through
``max_num_imprecise_acc`` instead: Triton then keeps the partial sum and the accumulator alive
across the whole MMA sequence, which at a 128x256 tile needs more registers than a thread has
(it spills; the fresh-zero form does not). A negative value never promotes (Triton's default on
Hopper: faster, and out of gemmzoo's float8_e4m3fn bound).

Register budget: a warpgroup holds its share of the fp32 accumulator (64 registers a thread per
64x128 of C) and, while a K tile's product is being added, the same again for the fresh partial
sum. ``SPLIT_N`` 2 computes a BLOCK_SIZE_M x BLOCK_SIZE_N tile of C as two halves side by side,
each its own dot on the same A tile: the A tile is loaded once and only half the partial sum is
live at a time, so 128x256 tiles fit in registers with promotion.

The kernel is persistent: NUM_PROGRAMS programs (at most one per SM, fewer for small problems)
walk C's tiles in grouped order (:func:`gemmzoo_triton.grouped_tma_kernel.tile_position`), and with
``FLATTEN`` the tile loop and the K loop are pipelined as one, so that the loads of a program's
next tile overlap the epilogue of its last. With NUM_PROGRAMS at least the number of tiles it is
the one-tile-per-program kernel.

The backend takes this kernel where :func:`gemmzoo_triton.fp8_backend.tma_fp8_eligible` allows;
imported only then.
"""

# ruff: noqa: N803, N806 - named as in the tutorial: M, N, K and upper-case constexprs

from __future__ import annotations

from typing import Any

import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

from gemmzoo_triton.fp8_kernel import PROMOTE_EVERY
from gemmzoo_triton.grouped_kernel import _autotune_options, _config, launch_tuned, prune_configs
from gemmzoo_triton.grouped_tma_kernel import num_sms, tile_position


def set_block_shapes(nargs: dict[str, Any]) -> None:
    """Each config's ``pre_hook``: give the descriptors the block shapes of the config about to run."""
    bm, bn, bk = (nargs[f"BLOCK_SIZE_{d}"] for d in "MNK")
    part = bn // nargs["SPLIT_N"]
    nargs["a_desc"].block_shape = [bm, bk]
    nargs["b_desc"].block_shape = [part, bk]
    nargs["c_desc"].block_shape = [bm, part]


def _tma_config(bm: int, bn: int, bk: int, stages: int, warps: int, split: int = 1,
                flatten: bool = True) -> triton.Config:
    config = _config(bm, bn, bk, stages, warps, pre_hook=set_block_shapes)
    config.kwargs.update({"SPLIT_N": split, "FLATTEN": flatten})
    return config


#: Configs for Hopper's fp8 tensor cores, K tiles of 128 (one 128-byte row of each operand per
#: stage, the widest swizzle). 128x256 tiles in two halves first: the least traffic per product
#: that still fits the promoted sums in registers. Three stages of a 128x256x128 pair of tiles take
#: 144 KiB of shared memory, C's bf16 staging tile 32-64 KiB more: four would not fit in 227 KiB.
#: prune_configs drops those wider or taller than a problem and those past shared memory.
HOPPER_FP8_TMA_CONFIGS = [
    _tma_config(128, 256, 128, 3, 8, split=2),
    _tma_config(128, 256, 128, 3, 8, split=2, flatten=False),
    _tma_config(256, 128, 128, 3, 8),
    _tma_config(128, 128, 128, 4, 8),
    _tma_config(128, 128, 128, 4, 4),
    _tma_config(64, 128, 128, 4, 4),
]


@triton.jit
def promoted_dot(a, b, accumulator, PROMOTE: tl.constexpr):
    """``accumulator + a @ b`` in fp32, the tensor cores' partial sums promoted as PROMOTE says."""
    if PROMOTE == 0:  # a fresh zero per K tile, then one fp32 add (cuBLAS's numerics)
        return accumulator + tl.dot(a, b)
    elif PROMOTE < 0:  # Triton's default on Hopper: no promotion (measured, not used)
        return tl.dot(a, b, accumulator)
    else:
        return tl.dot(a, b, accumulator, max_num_imprecise_acc=PROMOTE)


@triton.autotune(
    configs=HOPPER_FP8_TMA_CONFIGS,
    key=["M", "N", "K", "PROMOTE"],
    prune_configs_by={"early_config_prune": prune_configs},
    **_autotune_options(),
)
@triton.jit
def fp8_tma_matmul_kernel(
    a_desc, b_desc, c_desc,
    M, N, K,
    PROMOTE: tl.constexpr,
    NUM_PROGRAMS: tl.constexpr,
    BLOCK_SIZE_M: tl.constexpr,
    BLOCK_SIZE_N: tl.constexpr,
    BLOCK_SIZE_K: tl.constexpr,
    GROUP_SIZE_M: tl.constexpr,
    SPLIT_N: tl.constexpr,
    FLATTEN: tl.constexpr,
):
    """C (bf16) = A @ B (fp8 E4M3) for tiles ``program_id, program_id + NUM_PROGRAMS, ...`` of C."""
    PART_N: tl.constexpr = BLOCK_SIZE_N // SPLIT_N
    num_pid_m = tl.cdiv(M, BLOCK_SIZE_M)
    num_pid_n = tl.cdiv(N, BLOCK_SIZE_N)
    # The epilogue finds its tile from a counter of its own, as Triton's persistent tutorial does:
    # a value used both before the K loop and in the epilogue trips up the flattened pipeline.
    epilogue_tile = tl.program_id(axis=0) - NUM_PROGRAMS
    for tile_id in tl.range(tl.program_id(axis=0), num_pid_m * num_pid_n, NUM_PROGRAMS, flatten=FLATTEN):
        pid_m, pid_n = tile_position(tile_id, num_pid_m, num_pid_n, GROUP_SIZE_M)
        off_m, off_n = pid_m * BLOCK_SIZE_M, pid_n * BLOCK_SIZE_N
        left = tl.zeros((BLOCK_SIZE_M, PART_N), dtype=tl.float32)
        right = tl.zeros((BLOCK_SIZE_M, PART_N), dtype=tl.float32)
        for off_k in range(0, K, BLOCK_SIZE_K):
            a = a_desc.load([off_m, off_k])
            left = promoted_dot(a, b_desc.load([off_n, off_k]).T, left, PROMOTE)
            if SPLIT_N == 2:
                right = promoted_dot(a, b_desc.load([off_n + PART_N, off_k]).T, right, PROMOTE)
        epilogue_tile += NUM_PROGRAMS
        pid_m, pid_n = tile_position(epilogue_tile, num_pid_m, num_pid_n, GROUP_SIZE_M)
        off_m, off_n = pid_m * BLOCK_SIZE_M, pid_n * BLOCK_SIZE_N
        c_desc.store([off_m, off_n], left.to(tl.bfloat16))
        if SPLIT_N == 2:
            c_desc.store([off_m, off_n + PART_N], right.to(tl.bfloat16))


def _descriptor(view: Any) -> TensorDescriptor:
    """A descriptor over a row-major 2-D ``view``, its block shape set per config."""
    return TensorDescriptor(view, list(view.shape), list(view.stride()), [1, 1])


def launch(
    x: Any, y: Any, c: Any, promote: int = PROMOTE_EVERY, programs: int | None = None
) -> triton.Config:
    """Compute ``c = x @ y``: ``x`` row-major, ``y`` column-major, both fp8; ``c`` bf16, contiguous.

    ``programs``: how many programs walk C's tiles, by default one per SM of ``x``'s device.
    Returns the config that ran.
    """
    M, K = x.shape
    N = y.shape[1]
    programs = num_sms(x.device) if programs is None else programs
    args = (_descriptor(x), _descriptor(y.T), _descriptor(c), M, N, K)

    def grid(meta: dict[str, Any]) -> tuple[int]:
        tiles = triton.cdiv(M, meta["BLOCK_SIZE_M"]) * triton.cdiv(N, meta["BLOCK_SIZE_N"])
        return (min(programs, tiles),)

    options = {"PROMOTE": promote, "NUM_PROGRAMS": programs}
    return launch_tuned(fp8_tma_matmul_kernel, grid, args, options, (M, N, K, promote, programs))
