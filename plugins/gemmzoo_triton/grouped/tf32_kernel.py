"""triton-grouped's Gluon kernel for float32 in tf32 on Hopper: A row-major, B either way.

Hopper's tf32 warpgroup MMA reads an operand from shared memory only K-major, and only its left
operand may come from registers. A row-major A is K-major, a row-major B is not; so each tile is
computed transposed, Cᵀ = Bᵀ·Aᵀ: B's K tile goes from its slot into registers (any layout will
do there) as the left operand, and A's slot, read as Aᵀ, is the K-major right one. B may be
column-major as well (its slot is then already Bᵀ). A column-major A stays on the Triton TMA
kernel (:mod:`~gemmzoo_triton.grouped.plan` copies it).

The loading warp, slots and tile order are the other Gluon kernels' (:mod:`gluon_parts`); one
program per SM walks C's 256x128 tiles. C is stored straight from the accumulator, its
transpose undone by the addressing, with masked stores: no staging tile, so shared memory holds
four 48 KiB slots.

K steps go in pairs, each with registers of its own: an MMA still in flight reads the registers
of its left operand, so the next step's tile must not be loaded into the same ones (with one set
for every step, products came out wrong on Hopper). The loading warp rounds the K steps up to
even; a step past K loads zeros, which add nothing.

Needs what the other Gluon kernels need (Triton 3.6 or later, capability 9.0); CI compiles it
for sm_90a without a GPU.
"""

# ruff: noqa: N803, N806 - named as in the tutorials: M, N, K and upper-case constexprs

from __future__ import annotations

from typing import Any

import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier, warpgroup_mma, warpgroup_mma_wait

from gemmzoo_triton.core.gluon_parts import (
    GluonConfig,
    load_slots,
    my_tile_count,
    over,
    release,
    tile_origin,
)

#: C's tile is 256 rows (the MMA's N) by 128 columns (two warpgroups of 64); K tiles of 32 (128
#: bytes of fp32, one swizzle width); C is stored from registers, not staged.
CONFIG = GluonConfig(block_m=256, block_n=128, block_k=32, stages=4, operand_bytes=4, staged_c_bytes=0)


@gluon.jit
def _load(a_desc, b_desc, a_slots, b_slots, ready, empty, M, N, K, STAGES: gl.constexpr,
          GROUP_M: gl.constexpr, B_T: gl.constexpr):
    """The loading warp: an even number of K tiles for each of this program's tiles of C."""
    BLOCK_M: gl.constexpr = a_desc.block_type.shape[0]
    BLOCK_K: gl.constexpr = a_desc.block_type.shape[1]
    BLOCK_N: gl.constexpr = b_desc.block_type.shape[0] if B_T else b_desc.block_type.shape[1]
    num_pid_m, num_pid_n, my_tiles = my_tile_count(M, N, BLOCK_M, BLOCK_N)
    load_slots(a_desc, b_desc, a_slots, b_slots, ready, empty, num_pid_m, num_pid_n,
               2 * gl.cdiv(K, 2 * BLOCK_K), my_tiles, STAGES, GROUP_M, False, B_T)


@gluon.jit
def _step(step, acc, a_slots, b_slots, ready, STAGES: gl.constexpr, B_T: gl.constexpr,
          operand_layout: gl.constexpr):
    """Wait for load step ``step``'s slot, load Bᵀ's tile into registers and start
    ``acc += Bᵀ·Aᵀ``; returns the MMA's accumulator and the registers it reads."""
    slot = step % STAGES
    mbarrier.wait(ready.index(slot), (step // STAGES) & 1)
    b = b_slots.index(slot)
    if not B_T:
        b = b.permute((1, 0))
    b_t = b.load(operand_layout)
    acc = warpgroup_mma(b_t, a_slots.index(slot).permute((1, 0)), acc, is_async=True)
    return acc, b_t


@gluon.jit
def _multiply(a_slots, b_slots, ready, empty, c, stride_cm, M, N, K, STAGES: gl.constexpr,
              GROUP_M: gl.constexpr, B_T: gl.constexpr, num_warps: gl.constexpr):
    """The MMA warps: each tile's K steps in pairs, one MMA in flight, then C's tile stored."""
    BLOCK_M: gl.constexpr = a_slots.shape[1]
    BLOCK_K: gl.constexpr = a_slots.shape[2]
    BLOCK_N: gl.constexpr = b_slots.shape[1] if B_T else b_slots.shape[2]
    mma_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[num_warps, 1], instr_shape=[16, BLOCK_M, 8])
    operand_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=mma_layout, k_width=1)
    num_pid_m, num_pid_n, my_tiles = my_tile_count(M, N, BLOCK_M, BLOCK_N)
    k_pairs = gl.cdiv(K, 2 * BLOCK_K)
    step = 0
    for local_tile in range(my_tiles):
        acc = gl.zeros((BLOCK_N, BLOCK_M), dtype=gl.float32, layout=mma_layout)
        # the odd step's registers, kept live until the MMA that reads them is waited for
        odd = gl.zeros((BLOCK_N, BLOCK_K), dtype=gl.float32, layout=operand_layout)
        for pair in range(k_pairs):
            acc, even = _step(step, acc, a_slots, b_slots, ready, STAGES, B_T, operand_layout)
            acc, odd = warpgroup_mma_wait(num_outstanding=1, deps=(acc, odd))
            if pair > 0:
                release(step - 1, empty, STAGES)
            acc, odd = _step(step + 1, acc, a_slots, b_slots, ready, STAGES, B_T, operand_layout)
            acc, even = warpgroup_mma_wait(num_outstanding=1, deps=(acc, even))
            release(step, empty, STAGES)
            step += 2
        acc, odd = warpgroup_mma_wait(num_outstanding=0, deps=(acc, odd))
        release(step - 1, empty, STAGES)

        tile = gl.program_id(0) + local_tile * gl.num_programs(0)
        off_m, off_n = tile_origin(tile, num_pid_m, num_pid_n, BLOCK_M, BLOCK_N, GROUP_M)
        rows = off_m + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(0, mma_layout))
        columns = off_n + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, mma_layout))
        at = c + gl.expand_dims(rows, 0) * stride_cm + gl.expand_dims(columns, 1)
        inside = (gl.expand_dims(rows, 0) < M) & (gl.expand_dims(columns, 1) < N)
        gl.store(at, acc, mask=inside)


@gluon.jit
def grouped_tf32_kernel(a_desc, b_desc, c, stride_cm, M, N, K, STAGES: gl.constexpr,
                        GROUP_M: gl.constexpr, B_T: gl.constexpr, num_warps: gl.constexpr):
    """C = A @ B in tf32 (fp32 accumulation; C fp32 with unit column stride): ``num_warps`` MMA
    warps and one loading warp. ``a_desc`` is over row-major A, ``b_desc`` over B, or over Bᵀ
    when ``B_T`` (B column-major)."""
    a_slots = gl.allocate_shared_memory(a_desc.dtype, [STAGES] + a_desc.block_type.shape, a_desc.layout)  # noqa: RUF005
    b_slots = gl.allocate_shared_memory(b_desc.dtype, [STAGES] + b_desc.block_type.shape, b_desc.layout)  # noqa: RUF005
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=1)
        mbarrier.init(empty.index(i), count=1)
    gl.warp_specialize(
        [(_multiply, (a_slots, b_slots, ready, empty, c, stride_cm, M, N, K, STAGES, GROUP_M, B_T,
                      num_warps)),
         (_load, (a_desc, b_desc, a_slots, b_slots, ready, empty, M, N, K, STAGES, GROUP_M, B_T))],
        [1], [24])


# The host side ---------------------------------------------------------------------------------

def descriptors(x: Any, y: Any, b_t: bool, config: GluonConfig = CONFIG) -> tuple[Any, Any]:
    """TMA descriptors over row-major A and over B (or Bᵀ when ``b_t``), fp32."""
    a_desc = over(x, (config.block_m, config.block_k))
    b_desc = over(y.T, (config.block_n, config.block_k)) if b_t else over(y, (config.block_k, config.block_n))
    return a_desc, b_desc


def bind(M: int, N: int, K: int, b_t: bool, sms: int, config: GluonConfig = CONFIG,
         device: Any = None) -> Any:
    """``run(x, y, c)`` for every problem of this shape and B layout: grid and constexprs bound
    once, the descriptors made per call (the operands' addresses change), a
    :class:`~gemmzoo_triton.core.launch.DescriptorLaunch`."""
    from gemmzoo_triton.core.launch import BoundLaunch, DescriptorLaunch

    tiles = triton.cdiv(M, config.block_m) * triton.cdiv(N, config.block_n)
    launch = BoundLaunch(grouped_tf32_kernel, (max(1, min(sms, tiles)),),
                         {"STAGES": config.stages, "GROUP_M": config.group_m, "B_T": b_t,
                          "num_warps": config.num_warps}, pointers=(2,), device=device)

    def launch_on(a_desc: Any, b_desc: Any, c: Any) -> None:
        launch(a_desc, b_desc, c, c.stride(0), M, N, K)

    a_block = (config.block_m, config.block_k)
    b_block = (config.block_n, config.block_k) if b_t else (config.block_k, config.block_n)
    return DescriptorLaunch(lambda x: over(x, a_block), (lambda y: over(y.T, b_block)) if b_t
                            else (lambda y: over(y, b_block)), launch_on)
