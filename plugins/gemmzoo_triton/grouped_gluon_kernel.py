"""triton-grouped's Gluon kernel for Hopper: fp16 and bf16, warp-specialized, persistent.

The TMA route's kernel in Gluon, the same shape as triton-fp8's
(:mod:`~gemmzoo_triton.fp8_gluon_kernel`) without its promotion: one loading warp fills
``STAGES`` shared-memory slots through the tensor memory accelerator
(:func:`~gemmzoo_triton.gluon_parts.load_slots`), and 8 MMA warps (two warpgroups, 64 rows of the
tile each) chain warpgroup MMAs into one fp32 accumulator, keeping one MMA in flight: after
issuing K tile k they wait for tile k-1 and hand its slot back. One program per SM walks C's
tiles in grouped order; C is rounded once to the operands' dtype, staged in shared memory and
stored by the TMA, which clips the edges (tiles past A's or B's edges load as zeros).

Any of the four layouts is read in place: the descriptors are over A or Aᵀ and B or Bᵀ,
whichever is row-major, and the MMA reads a transposed view of the slot where needed (16-bit
MMAs take either major-ness from shared memory).

Tiles: 128x256 (the accumulator is 128 registers a thread; three 48 KiB slots and a 64 KiB
staging tile) or 128x128 (64 registers; six 32 KiB slots); TMA boxes are powers of two, which
rules out widths between. :func:`pick_config` weighs how much of the GPU each one's last wave of
tiles leaves idle against its speed.

Needs ``triton.experimental.gluon`` with Hopper's ``warpgroup_mma`` and ``warp_specialize``
(Triton 3.6 and later) and a GPU of capability 9.0; no interpreter (CI compiles it for sm_90a
without a GPU). Imported only where :mod:`~gemmzoo_triton.grouped_plan` takes it.
"""

# ruff: noqa: N803, N806 - named as in the tutorials: M, N, K and upper-case constexprs

from __future__ import annotations

from typing import Any

import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import tma, warpgroup_mma, warpgroup_mma_wait

from gemmzoo_triton import gluon_parts
from gemmzoo_triton.gluon_parts import (
    GluonConfig,
    allocate_pipeline,
    load_slots,
    my_tile_count,
    release,
    slot_operands,
    store_tile,
)

#: The tiles, each with as many slots as the H100's 227 KiB a block hold, and the throughput of
#: a program on it relative to WIDE's, per element of C per K step (narrower tiles read each
#: shared-memory byte for less MMA work): estimates for :func:`pick_config` from 4096x14336x4096
#: fp16 on the H100 (docs/results/2026-11-23-grouped-gluon.md), not a table of shapes.
WIDE = GluonConfig(block_m=128, block_n=256, block_k=64, stages=3, operand_bytes=2)
SQUARE = GluonConfig(block_m=128, block_n=128, block_k=64, stages=6, operand_bytes=2)
RATES = ((WIDE, 1.0), (SQUARE, 0.9))


def pick_config(M: int, N: int, sms: int, shared_memory: int) -> GluonConfig | None:
    """The tile for an M x N product on ``sms`` SMs: the one with the least modelled time, where
    a program's time is its tiles (the busiest SM's count, ``ceil(tiles / sms)``) times its tile
    area over its rate. None when none fits ``shared_memory`` or M, N are under 128."""
    if min(M, N) < 128:
        return None
    best, best_time = None, float("inf")
    for config, rate in RATES:
        if config.shared_bytes() > shared_memory:
            continue
        tiles = triton.cdiv(M, config.block_m) * triton.cdiv(N, config.block_n)
        time = triton.cdiv(tiles, sms) * config.block_m * config.block_n / rate
        if time < best_time:
            best, best_time = config, time
    return best


@gluon.jit
def _multiply(a_slots, b_slots, ready, empty, c_desc, c_stage, num_pid_m, num_pid_n, k_steps,
              my_tiles, STAGES: gl.constexpr, GROUP_M: gl.constexpr, A_T: gl.constexpr,
              B_T: gl.constexpr, num_warps: gl.constexpr):
    """The MMA warps: each tile's K steps chained into one accumulator, then its epilogue."""
    BLOCK_M: gl.constexpr = c_desc.block_type.shape[0]
    BLOCK_N: gl.constexpr = c_desc.block_type.shape[1]
    mma_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[num_warps, 1], instr_shape=[16, BLOCK_N, 16])
    step = 0
    for local_tile in range(my_tiles):
        accumulator = gl.zeros((BLOCK_M, BLOCK_N), dtype=gl.float32, layout=mma_layout)
        a, b = slot_operands(step, a_slots, b_slots, ready, STAGES, A_T, B_T)
        accumulator = warpgroup_mma(a, b, accumulator, is_async=True)
        accumulator = warpgroup_mma_wait(num_outstanding=1, deps=(accumulator,))
        step += 1
        for _ in range(1, k_steps):
            a, b = slot_operands(step, a_slots, b_slots, ready, STAGES, A_T, B_T)
            accumulator = warpgroup_mma(a, b, accumulator, is_async=True)
            # one MMA left in flight: the one before it is done, and so is its slot
            accumulator = warpgroup_mma_wait(num_outstanding=1, deps=(accumulator,))
            release(step - 1, empty, STAGES)
            step += 1
        accumulator = warpgroup_mma_wait(num_outstanding=0, deps=(accumulator,))
        release(step - 1, empty, STAGES)
        store_tile(accumulator, local_tile, c_desc, c_stage, num_pid_m, num_pid_n, GROUP_M)
    tma.store_wait(pendings=0)


@gluon.jit
def grouped_gluon_kernel(a_desc, b_desc, c_desc, M, N, K, STAGES: gl.constexpr, GROUP_M: gl.constexpr,
                         A_T: gl.constexpr, B_T: gl.constexpr, num_warps: gl.constexpr):
    """C = A @ B (fp16 or bf16, fp32 accumulation): ``num_warps`` MMA warps and one loading warp.
    ``A_T``/``B_T``: ``a_desc``/``b_desc`` is over Aᵀ/Bᵀ (that operand is column-major)."""
    BLOCK_K: gl.constexpr = a_desc.block_type.shape[0] if A_T else a_desc.block_type.shape[1]
    a_slots, b_slots, c_stage, ready, empty = allocate_pipeline(a_desc, b_desc, c_desc, STAGES)
    BLOCK_M: gl.constexpr = c_desc.block_type.shape[0]
    BLOCK_N: gl.constexpr = c_desc.block_type.shape[1]
    num_pid_m, num_pid_n, my_tiles = my_tile_count(M, N, BLOCK_M, BLOCK_N)
    k_steps = gl.cdiv(K, BLOCK_K)
    gl.warp_specialize(
        [(_multiply, (a_slots, b_slots, ready, empty, c_desc, c_stage, num_pid_m, num_pid_n,
                      k_steps, my_tiles, STAGES, GROUP_M, A_T, B_T, num_warps)),
         (load_slots, (a_desc, b_desc, a_slots, b_slots, ready, empty, num_pid_m, num_pid_n,
                       k_steps, my_tiles, STAGES, GROUP_M, A_T, B_T))],
        [1], [24])


def bind(M: int, N: int, K: int, a_t: bool, b_t: bool, sms: int, config: GluonConfig) -> Any:
    """``run(x, y, c)`` for every problem of this shape and layout, bound once
    (:func:`~gemmzoo_triton.gluon_parts.bind`)."""
    return gluon_parts.bind(grouped_gluon_kernel, M, N, K, a_t, b_t, sms, config, A_T=a_t, B_T=b_t)
