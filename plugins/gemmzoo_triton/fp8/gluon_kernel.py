"""triton-fp8's Gluon kernel for Hopper: warp-specialized, with promotion that overlaps the MMAs.

Triton's ``tl.dot`` pipeliner waits for a dot whose result the loop uses before it issues the
next one, so in :mod:`~gemmzoo_triton.fp8.tma_kernel` the tensor cores idle while a K tile's
partial sums are added into the fp32 accumulator. Gluon, Triton's lower-level language, lets the
kernel issue Hopper's warpgroup MMAs and its own barriers:

- each K tile's product starts from zero (``use_acc=False``) *before* the previous tile's
  product is waited for and added, so the fp32 add of tile k runs while the tensor cores compute
  tile k+1 (cuBLAS's ``use_fast_accum=False`` numerics: every K tile of 128 summed by the tensor
  cores from zero, then one fp32 add per tile, in K order);
- the loads run in a warp of their own (``gl.warp_specialize``): it fills ``STAGES`` shared-memory
  slots through the tensor memory accelerator as fast as the MMA warps hand slots back, with one
  barrier per slot each way (``ready``: the copy has landed; ``empty``: the MMAs reading it are
  done). With the loads issued from the MMA warps instead, the barriers Triton places around each
  copy held both warpgroups in lockstep with the loads, and the kernel ran well below cuBLAS
  (docs/results/2026-11-23-fp8-gluon.md); the loading warp, the hand-back and the epilogue are
  :mod:`~gemmzoo_triton.core.gluon_parts`, shared with triton-grouped's kernel;
- persistent: one program per SM walks C's tiles in grouped order, and the next tile's first
  product starts before a tile's epilogue (C rounded once to bfloat16, staged in shared memory,
  stored by the TMA, which clips the edges; tiles past A's or B's edges load as zeros);
- 8 MMA warps (two warpgroups, 64 rows of the 128x128 tile each) holding the accumulator and two
  products (3 x 64 registers a thread); the loading warp keeps 24.

Gluon is experimental: the kernel needs ``triton.experimental.gluon`` with Hopper's
``warpgroup_mma`` and ``warp_specialize`` (Triton 3.6 and later; the few names that changed
since are looked up in :mod:`~gemmzoo_triton.core.gluon_parts`) and a GPU of capability 9.0. It has
no interpreter: CI compiles it for sm_90a without a GPU (tests/test_gluon_kernels.py), the GPU
tests run it. Imported only where :func:`gemmzoo_triton.fp8.backend.gluon_fp8_config` allows.
"""

# ruff: noqa: N803, N806 - named as in the tutorials: M, N, K and upper-case constexprs

from __future__ import annotations

from dataclasses import replace
from typing import Any

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import tma, warpgroup_mma, warpgroup_mma_wait

from gemmzoo_triton.core import gluon_parts
from gemmzoo_triton.core.gluon_parts import (
    GluonConfig,
    allocate_pipeline,
    load_slots,
    my_tile_count,
    release,
    slot_operands,
    store_tile,
)

#: The default: 128x128 tiles in two warpgroups (the accumulator and two products fit a thread's
#: registers), six 32 KiB slots (229 KB with C's staging tile; Hopper gives a block 227 KiB),
#: grouped tile order. :func:`config_for` takes fewer slots where a GPU has less shared memory.
DEFAULT_CONFIG = GluonConfig(block_m=128, block_n=128, block_k=128, stages=6, operand_bytes=1)

#: Fewest slots the kernel is run with (fewer were slower: docs/results/2026-11-23-fp8-gluon.md).
MIN_STAGES = 4


def config_for(shared_memory: int) -> GluonConfig | None:
    """:data:`DEFAULT_CONFIG` with as many slots (up to its own) as ``shared_memory`` bytes a
    block may use hold; None below :data:`MIN_STAGES`."""
    for stages in range(DEFAULT_CONFIG.stages, MIN_STAGES - 1, -1):
        config = replace(DEFAULT_CONFIG, stages=stages)
        if config.shared_bytes() <= shared_memory:
            return config
    return None


@gluon.jit
def _start_product(step, into, a_slots, b_slots, ready, STAGES: gl.constexpr):
    """Wait for load step ``step`` and start its tile's product from zero (async), in the
    registers of ``into`` (a finished product whose value is no longer needed)."""
    a, b = slot_operands(step, a_slots, b_slots, ready, STAGES, False, True)
    return warpgroup_mma(a, b, into, use_acc=False, is_async=True)


@gluon.jit
def _tile_sum(running, first, second, step, k_steps, a_slots, b_slots, ready, empty,
              mma_layout: gl.constexpr, STAGES: gl.constexpr):
    """The fp32 sum of one tile's K products, the first of which (``running``, in ``first``'s
    registers, load step ``step - 1``) is already started; returns it, both register sets free
    again and the next load step.

    Two register sets take the products in turn, so that no product is moved while an MMA may
    still write it (ptxas then serialises every MMA of the kernel): the K loop is unrolled by
    two, and each product starts in the registers of the one finished before it. Waiting until
    one MMA group is left in flight means the product before it is done: its slot goes back to
    the loader and it is added while the next product runs.
    """
    BLOCK_M: gl.constexpr = a_slots.type.shape[1]
    BLOCK_N: gl.constexpr = b_slots.type.shape[1]
    accumulator = gl.zeros((BLOCK_M, BLOCK_N), dtype=gl.float32, layout=mma_layout)
    for _ in range((k_steps - 1) // 2):
        running_second = _start_product(step, second, a_slots, b_slots, ready, STAGES)
        step += 1
        first = warpgroup_mma_wait(num_outstanding=1, deps=(running,))
        release(step - 2, empty, STAGES)
        accumulator = accumulator + first
        running = _start_product(step, first, a_slots, b_slots, ready, STAGES)
        step += 1
        second = warpgroup_mma_wait(num_outstanding=1, deps=(running_second,))
        release(step - 2, empty, STAGES)
        accumulator = accumulator + second
    if (k_steps - 1) % 2 == 1:
        running_second = _start_product(step, second, a_slots, b_slots, ready, STAGES)
        step += 1
        first = warpgroup_mma_wait(num_outstanding=1, deps=(running,))
        release(step - 2, empty, STAGES)
        accumulator = accumulator + first
        second = warpgroup_mma_wait(num_outstanding=0, deps=(running_second,))
        accumulator = accumulator + second
    else:
        first = warpgroup_mma_wait(num_outstanding=0, deps=(running,))
        accumulator = accumulator + first
    release(step - 1, empty, STAGES)
    return accumulator, first, second, step


@gluon.jit
def _multiply(a_slots, b_slots, ready, empty, c_desc, c_stage, num_pid_m, num_pid_n, k_steps,
              my_tiles, STAGES: gl.constexpr, GROUP_M: gl.constexpr, num_warps: gl.constexpr):
    """The MMA warps: each tile's products and their promotion, then its epilogue; every tile but
    the last starts the next tile's first product before its epilogue, so that the tensor cores
    run while C is rounded and stored."""
    BLOCK_M: gl.constexpr = a_slots.type.shape[1]
    BLOCK_N: gl.constexpr = b_slots.type.shape[1]
    mma_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[num_warps, 1], instr_shape=[16, BLOCK_N, 32])
    first = gl.zeros((BLOCK_M, BLOCK_N), dtype=gl.float32, layout=mma_layout)
    second = gl.zeros((BLOCK_M, BLOCK_N), dtype=gl.float32, layout=mma_layout)
    running = _start_product(0, first, a_slots, b_slots, ready, STAGES)
    step = 1
    for local_tile in range(my_tiles - 1):
        accumulator, first, second, step = _tile_sum(
            running, first, second, step, k_steps, a_slots, b_slots, ready, empty, mma_layout, STAGES)
        running = _start_product(step, first, a_slots, b_slots, ready, STAGES)
        step += 1
        store_tile(accumulator, local_tile, c_desc, c_stage, num_pid_m, num_pid_n, GROUP_M)
    accumulator, first, second, step = _tile_sum(
        running, first, second, step, k_steps, a_slots, b_slots, ready, empty, mma_layout, STAGES)
    store_tile(accumulator, my_tiles - 1, c_desc, c_stage, num_pid_m, num_pid_n, GROUP_M)
    tma.store_wait(pendings=0)


@gluon.jit
def fp8_gluon_kernel(a_desc, b_desc, c_desc, M, N, K, STAGES: gl.constexpr, GROUP_M: gl.constexpr,
                     num_warps: gl.constexpr):
    """C (bf16) = A @ B (fp8 E4M3; ``b_desc`` over Bᵀ), partial sums promoted once per K tile:
    ``num_warps`` MMA warps and one loading warp (its 24 registers leave the rest to them)."""
    a_slots, b_slots, c_stage, ready, empty = allocate_pipeline(a_desc, b_desc, c_desc, STAGES)
    BLOCK_M: gl.constexpr = a_desc.block_type.shape[0]
    BLOCK_N: gl.constexpr = b_desc.block_type.shape[0]
    num_pid_m, num_pid_n, my_tiles = my_tile_count(M, N, BLOCK_M, BLOCK_N)
    k_steps = gl.cdiv(K, a_desc.block_type.shape[1])
    gl.warp_specialize(
        [(_multiply, (a_slots, b_slots, ready, empty, c_desc, c_stage, num_pid_m, num_pid_n,
                      k_steps, my_tiles, STAGES, GROUP_M, num_warps)),
         (load_slots, (a_desc, b_desc, a_slots, b_slots, ready, empty, num_pid_m, num_pid_n,
                       k_steps, my_tiles, STAGES, GROUP_M, False, True))],
        [1], [24])


def bind(M: int, N: int, K: int, sms: int, config: GluonConfig = DEFAULT_CONFIG, device: Any = None) -> Any:
    """``run(x, y, c)``: :func:`launch` for every problem of this shape, bound once
    (:func:`~gemmzoo_triton.core.gluon_parts.bind`; A row-major, B read through its transpose)."""
    return gluon_parts.bind(fp8_gluon_kernel, M, N, K, False, True, sms, config, device=device)


def launch(x: Any, y: Any, c: Any, sms: int, config: GluonConfig = DEFAULT_CONFIG) -> None:
    """Compute ``c = x @ y``: ``x`` row-major, ``y`` column-major, both fp8 E4M3 with rows
    16-byte aligned; ``c`` bf16, contiguous. ``sms``: the device's SM count."""
    M, K = x.shape
    bind(M, y.shape[1], K, sms, config)(x, y, c)
