"""Pieces the warp-specialized Gluon kernels share (Hopper): the loading warp, slot hand-back,
tile order and the epilogue.

A kernel built from them runs one program per SM over C's tiles in grouped order, with
``STAGES`` shared-memory slots for A's and B's K tiles and two barriers per slot: ``ready`` (the
TMA copy has landed; the loading warp arms it) and ``empty`` (the MMA warps are done with it;
they arrive on it). The loading warp (:func:`load_slots`) runs ahead of the MMA warps by as many
slots as there are, independently of them.

Operands come through TMA descriptors over A or Aᵀ and B or Bᵀ, whichever is row-major
(``A_T``, ``B_T``: the descriptor is over the transpose), so each of the four layouts is read in
place; the MMA warps take a transposed view of a slot where the instruction wants the other
major-ness (:func:`slot_operands`).

Names that changed after Triton 3.6 are looked up here once: the TMA copies
(``async_copy_global_to_shared`` -> ``async_load``, ``async_copy_shared_to_global`` ->
``async_store``; the old names now raise) and the barrier across a partition's warps
(``thread_barrier`` -> ``barrier``).
"""

# ruff: noqa: N803, N806 - upper-case constexprs, as in the kernels

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import triton

from gemmzoo_triton.core.descriptors import reusing
from gemmzoo_triton.core.env import GLUON_MIN_TRITON, triton_version

if triton_version() < GLUON_MIN_TRITON:
    raise ImportError(f"gemmzoo's Gluon kernels need Triton 3.6 or later; this is {triton.__version__}")

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, mbarrier, tma
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

tma_load = getattr(tma, "async_load", None) or tma.async_copy_global_to_shared
tma_store = getattr(tma, "async_store", None) or tma.async_copy_shared_to_global
warps_barrier = getattr(gl, "thread_barrier", None) or gl.barrier

#: Shared memory counted on top of a kernel's own buffers (Triton 3.6 and 3.9 added 48-212 bytes).
SHARED_ALLOWANCE = 1024


@dataclass(frozen=True)
class GluonConfig:
    """One launch configuration of a kernel built from these pieces."""

    block_m: int
    block_n: int
    block_k: int
    stages: int
    operand_bytes: int  # bytes of an element of A and B
    group_m: int = 8
    num_warps: int = 8  # the MMA warps; the loading warp comes on top
    staged_c_bytes: int = 2  # bytes of an element of C's staging tile (fp16, bf16); 0: not staged
    slot_extra_bytes: int = 0  # bytes a slot holds beyond A's and B's tiles (block-wise scales)

    def shared_bytes(self) -> int:
        """Shared memory the kernel needs: operand slots, C's staging tile, two barriers a slot,
        and :data:`SHARED_ALLOWANCE` for what the compiler adds (alignment, its own scratch)."""
        slot = (self.block_m + self.block_n) * self.block_k * self.operand_bytes + self.slot_extra_bytes
        operands = self.stages * slot
        staging = self.block_m * self.block_n * self.staged_c_bytes
        return operands + staging + 2 * 8 * self.stages + SHARED_ALLOWANCE


@gluon.jit
def allocate_pipeline(a_desc, b_desc, c_desc, STAGES: gl.constexpr):
    """The shared memory of a kernel: STAGES slots for A's and B's tiles, C's staging tile, and
    each slot's ``ready`` and ``empty`` barriers, initialised."""
    # (list concatenation: Gluon's frontend has no starred unpacking)
    a_slots = gl.allocate_shared_memory(a_desc.dtype, [STAGES] + a_desc.block_type.shape, a_desc.layout)  # noqa: RUF005
    b_slots = gl.allocate_shared_memory(b_desc.dtype, [STAGES] + b_desc.block_type.shape, b_desc.layout)  # noqa: RUF005
    c_stage = gl.allocate_shared_memory(c_desc.dtype, c_desc.block_type.shape, c_desc.layout)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=1)
        mbarrier.init(empty.index(i), count=1)
    return a_slots, b_slots, c_stage, ready, empty


@gluon.jit
def my_tile_count(M, N, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr):
    """Tiles of C per row and column, and how many of them this program takes (every
    ``num_programs``-th from its id on)."""
    num_pid_m = gl.cdiv(M, BLOCK_M)
    num_pid_n = gl.cdiv(N, BLOCK_N)
    return num_pid_m, num_pid_n, gl.cdiv(num_pid_m * num_pid_n - gl.program_id(0), gl.num_programs(0))


@gluon.jit
def tile_origin(tile, num_pid_m, num_pid_n, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
                GROUP_M: gl.constexpr):
    """The first row and column of tile ``tile`` of C in grouped order (GROUP_M rows of tiles
    at a time, column by column within a group: the operands a group reads stay in L2)."""
    tiles_in_group = GROUP_M * num_pid_n
    first_m = (tile // tiles_in_group) * GROUP_M
    group_rows = min(num_pid_m - first_m, GROUP_M)
    pid_m = first_m + (tile % tiles_in_group) % group_rows
    pid_n = (tile % tiles_in_group) // group_rows
    return pid_m * BLOCK_M, pid_n * BLOCK_N


@gluon.jit
def load_steps(a_desc, b_desc, a_slots, b_slots, ready, empty, off_m, off_n, k_first, k_last, step,
               STAGES: gl.constexpr, A_T: gl.constexpr, B_T: gl.constexpr, row_desc=None, row_slots=None):
    """K tiles ``k_first`` to ``k_last - 1`` of A's and B's tiles at rows ``off_m`` and columns
    ``off_n``, each into the next slot once the MMA warps have handed it back (``empty``);
    ``ready`` tells them it landed. ``step`` counts the loads so far; returns the new count.

    ``row_desc``, where given, is over a (K tiles)×M table of one value per row of A and K tile
    (block-wise scales, transposed): the K tile's values for the tile's rows come with it, into
    ``row_slots`` (one ``[1, BLOCK_M]`` box a slot)."""
    BLOCK_K: gl.constexpr = a_desc.block_type.shape[0] if A_T else a_desc.block_type.shape[1]
    slot_bytes: gl.constexpr = a_desc.block_type.nbytes + b_desc.block_type.nbytes
    for kk in range(k_first, k_last):
        slot = step % STAGES
        # the first pass over the slots waits for nothing (the parity before phase 0)
        mbarrier.wait(empty.index(slot), ((step // STAGES) & 1) ^ 1)
        if row_desc is None:
            mbarrier.expect(ready.index(slot), slot_bytes)
        else:
            mbarrier.expect(ready.index(slot), slot_bytes + row_desc.block_type.nbytes)
            tma_load(row_desc, [kk, off_m], ready.index(slot), row_slots.index(slot))
        off_k = kk * BLOCK_K
        if A_T:
            tma_load(a_desc, [off_k, off_m], ready.index(slot), a_slots.index(slot))
        else:
            tma_load(a_desc, [off_m, off_k], ready.index(slot), a_slots.index(slot))
        if B_T:
            tma_load(b_desc, [off_n, off_k], ready.index(slot), b_slots.index(slot))
        else:
            tma_load(b_desc, [off_k, off_n], ready.index(slot), b_slots.index(slot))
        step += 1
    return step


@gluon.jit
def load_slots(a_desc, b_desc, a_slots, b_slots, ready, empty, num_pid_m, num_pid_n, k_steps,
               my_tiles, STAGES: gl.constexpr, GROUP_M: gl.constexpr, A_T: gl.constexpr,
               B_T: gl.constexpr, row_desc=None, row_slots=None):
    """The loading warp: every K tile of this program's tiles of C, tile after tile
    (:func:`load_steps`, ``row_desc`` and ``row_slots`` as there)."""
    BLOCK_M: gl.constexpr = a_desc.block_type.shape[1] if A_T else a_desc.block_type.shape[0]
    BLOCK_N: gl.constexpr = b_desc.block_type.shape[0] if B_T else b_desc.block_type.shape[1]
    step = 0
    for local_tile in range(my_tiles):
        tile = gl.program_id(0) + local_tile * gl.num_programs(0)
        off_m, off_n = tile_origin(tile, num_pid_m, num_pid_n, BLOCK_M, BLOCK_N, GROUP_M)
        step = load_steps(a_desc, b_desc, a_slots, b_slots, ready, empty, off_m, off_n, 0, k_steps,
                          step, STAGES, A_T, B_T, row_desc, row_slots)


@gluon.jit
def slot_operands(step, a_slots, b_slots, ready, STAGES: gl.constexpr, A_T: gl.constexpr,
                  B_T: gl.constexpr):
    """Wait for load step ``step``'s slot; its A tile (M x K) and B tile (K x N) as the MMA
    takes them (views of the slot, transposed where the descriptor was over the transpose)."""
    slot = step % STAGES
    mbarrier.wait(ready.index(slot), (step // STAGES) & 1)
    a = a_slots.index(slot)
    b = b_slots.index(slot)
    if A_T:
        a = a.permute((1, 0))
    if B_T:
        b = b.permute((1, 0))
    return a, b


@gluon.jit
def release(step, empty, STAGES: gl.constexpr):
    """Hand load step ``step``'s slot back to the loading warp once every MMA warp is done with
    it (each warpgroup waits only for its own MMAs, so the warps meet first)."""
    warps_barrier()
    mbarrier.arrive(empty.index(step % STAGES), count=1)


@gluon.jit
def store_at(accumulator, tile, c_desc, c_stage, num_pid_m, num_pid_n, GROUP_M: gl.constexpr):
    """Round tile ``tile`` of C (grouped order) to C's dtype and start its TMA store (which clips
    the edges)."""
    BLOCK_M: gl.constexpr = c_desc.block_type.shape[0]
    BLOCK_N: gl.constexpr = c_desc.block_type.shape[1]
    off_m, off_n = tile_origin(tile, num_pid_m, num_pid_n, BLOCK_M, BLOCK_N, GROUP_M)
    tma.store_wait(pendings=0)  # the tile before has left the staging buffer
    c_stage.store(accumulator.to(c_desc.dtype))
    fence_async_shared()
    tma_store(c_desc, [off_m, off_n], c_stage)


@gluon.jit
def store_tile(accumulator, local_tile, c_desc, c_stage, num_pid_m, num_pid_n, GROUP_M: gl.constexpr):
    """:func:`store_at` for this program's tile number ``local_tile``."""
    tile = gl.program_id(0) + local_tile * gl.num_programs(0)
    store_at(accumulator, tile, c_desc, c_stage, num_pid_m, num_pid_n, GROUP_M)


# The host side ---------------------------------------------------------------------------------

_GL_DTYPES = {"float16": gl.float16, "bfloat16": gl.bfloat16, "float8_e4m3fn": gl.float8e4nv,
              "float32": gl.float32}


@functools.cache
def _layout(block: tuple[int, int], dtype: str) -> Any:
    """The shared-memory layout of a ``block`` of ``dtype`` (torch's name): a 128-byte swizzle."""
    return gl.NVMMASharedLayout.get_default_for(list(block), _GL_DTYPES[dtype])


def over(view: Any, block: tuple[int, int]) -> Any:
    """A TMA descriptor over a row-major 2-D ``view`` in boxes of ``block``."""
    layout = _layout(block, str(view.dtype).removeprefix("torch."))
    return TensorDescriptor(view, list(view.shape), [view.stride(0), 1], list(block), layout)


Describer = Callable[[Any], Any]


def describers(a_t: bool, b_t: bool, config: GluonConfig) -> tuple[Describer, Describer]:
    """Functions making the TMA descriptors over A (or Aᵀ when ``a_t``) and over B (or Bᵀ when
    ``b_t``), with ``config``'s block shapes."""
    bm, bn, bk = config.block_m, config.block_n, config.block_k
    a_box, b_box = ((bk, bm) if a_t else (bm, bk)), ((bn, bk) if b_t else (bk, bn))
    a_view = reusing(lambda view: over(view, a_box))
    b_view = reusing(lambda view: over(view, b_box))
    if a_t:
        def a_desc(x: Any) -> Any:
            return a_view(x.T)
    else:
        a_desc = a_view
    if b_t:
        def b_desc(y: Any) -> Any:
            return b_view(y.T)
    else:
        b_desc = b_view
    return a_desc, b_desc


def descriptors(x: Any, y: Any, c: Any, a_t: bool, b_t: bool, config: GluonConfig) -> tuple[Any, Any, Any]:
    """TMA descriptors over A (or Aᵀ when ``a_t``), B (or Bᵀ when ``b_t``) and C (row-major), with
    ``config``'s block shapes."""
    a_desc, b_desc = describers(a_t, b_t, config)
    return a_desc(x), b_desc(y), over(c, (config.block_m, config.block_n))


def grid(M: int, N: int, sms: int, config: GluonConfig) -> tuple[int]:
    """One program per SM, at most one per tile of C."""
    tiles = triton.cdiv(M, config.block_m) * triton.cdiv(N, config.block_n)
    return (max(1, min(sms, tiles)),)


def bind(kernel: Any, M: int, N: int, K: int, a_t: bool, b_t: bool, sms: int, config: GluonConfig,
         *, programs: int | None = None, extra: Callable[[], tuple[Any, ...]] | None = None,
         device: Any = None, **constexprs: Any) -> Any:
    """``run(x, y, c)``: ``kernel`` for every problem of this shape and layout, bound once (grid,
    constexprs, compiled kernel); only the descriptors are made per call, since the operands'
    addresses change (a :class:`~gemmzoo_triton.core.launch.DescriptorLaunch`, so that a plan
    can make A's and B's once for buffers it keeps). ``constexprs``: the kernel's own beyond
    STAGES, GROUP_M and num_warps. ``programs``: the grid (default :func:`grid`); ``extra()``:
    run-time arguments the kernel takes after M, N and K, asked for on each call; ``device``: the
    operands' (see :class:`~gemmzoo_triton.core.launch.BoundLaunch`)."""
    from gemmzoo_triton.core.launch import BoundLaunch, DescriptorLaunch

    constexprs = {"STAGES": config.stages, "GROUP_M": config.group_m, "num_warps": config.num_warps,
                  **constexprs}
    launch_grid = grid(M, N, sms, config) if programs is None else (programs,)
    launch_bound = BoundLaunch(kernel, launch_grid, constexprs, pointers=(), device=device)

    c_block = (config.block_m, config.block_n)
    c_desc = reusing(lambda c: over(c, c_block))
    if extra is None:
        def launch(a_desc: Any, b_desc: Any, c: Any) -> None:
            launch_bound(a_desc, b_desc, c_desc(c), M, N, K)
    else:
        def launch(a_desc: Any, b_desc: Any, c: Any) -> None:
            launch_bound(a_desc, b_desc, c_desc(c), M, N, K, *extra())

    return DescriptorLaunch(*describers(a_t, b_t, config), launch)
