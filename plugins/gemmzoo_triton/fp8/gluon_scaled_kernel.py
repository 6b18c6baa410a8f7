"""triton-fp8's scaled products in Gluon (Hopper): the warp-specialized kernel of
:mod:`~gemmzoo_triton.fp8.gluon_kernel` with the scales on the way.

The schedule, the loading warp and the promotion are that kernel's: each 128-deep K tile's
product starts from zero before the previous one is waited for and added in fp32, so the adds
run while the tensor cores compute. The scales:

- block-wise (1×128 blocks of A, 128×128 of B, DeepSeek-V3's): the tiles are 128×128×128, so a K
  tile's product meets one scale per row of A and one scale of B; the add becomes
  ``accumulator + product · scale``, in the same place. A's scales go to the kernel transposed,
  ``(K/128)×M``, and the loading warp brings each K tile's scales for the tile's rows by TMA into
  the slot that holds the tile's operands (``row_desc`` of
  :func:`~gemmzoo_triton.core.gluon_parts.load_steps`): the MMA warps read them from shared memory
  after the wait they make for the operands anyway, and before they hand the slot back. B's one
  scale a K tile is loaded from global memory when the tile's product starts. (With A's scales
  loaded from global memory by the MMA warps as well, the multiply of the scales waited for those
  loads among the adds, and the kernel was 8-10% slower: docs/results/2026-11-28-blockwise-scales-tma.md.)
  The scales in the slots take the room of a sixth slot: block-wise runs with five. The
  multiply-add is written as inline PTX (one ``fma.rn.f32`` an element): formed by the compiler
  from ``accumulator + product * scale``, the products carried round the loop no longer shared
  registers with the MMAs writing them, and ptxas serialised every MMA (its warning C7514) and
  spilled;
- row-wise and tensor-wise: in the epilogue, before the one rounding to C's dtype.

Gluon has no interpreter: CI compiles this kernel for sm_90a (tests/gluon_build.py); the GPU tests
and the conformance cases run it. Imported only where :func:`gemmzoo_triton.fp8.backend.gluon_scaled_config`
allows.
"""

# ruff: noqa: N803, N806 - named as in the tutorials: M, N, K and upper-case constexprs

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import tma, warpgroup_mma_wait
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

from gemmzoo_triton.core import gluon_parts
from gemmzoo_triton.core.descriptors import reusing
from gemmzoo_triton.core.gluon_parts import (
    GluonConfig,
    allocate_pipeline,
    load_slots,
    my_tile_count,
    release,
    store_tile,
    tile_origin,
)
from gemmzoo_triton.core.padding import padded
from gemmzoo_triton.fp8.gluon_kernel import DEFAULT_CONFIG, MIN_STAGES, _start_product, _tile_sum

#: Scaling codes of the kernel's ``SCALING`` (those of :mod:`~gemmzoo_triton.fp8.scaled_kernel`).
TENSORWISE, ROWWISE, BLOCKWISE = 0, 1, 2
_CODES = {"tensorwise": TENSORWISE, "rowwise": ROWWISE, "blockwise": BLOCKWISE}

#: A's block-wise scales in shared memory: one row of fp32 a slot, as TMA writes it (no swizzle).
_SCALE_ROW_LAYOUT = gl.NVMMASharedLayout(swizzle_byte_width=0, element_bitwidth=32, rank=2)


def config_for(shared_memory: int, out_bytes: int, scaling: str) -> GluonConfig | None:
    """The fp8 kernel's 128×128×128 config with C staged in ``out_bytes`` a value (block-wise:
    each slot with its K tile's A scales too) and as many slots as ``shared_memory`` bytes hold;
    None below the fp8 kernel's fewest."""
    scales = DEFAULT_CONFIG.block_m * 4 if scaling == "blockwise" else 0
    for stages in range(DEFAULT_CONFIG.stages, MIN_STAGES - 1, -1):
        config = replace(DEFAULT_CONFIG, stages=stages, staged_c_bytes=out_bytes, slot_extra_bytes=scales)
        if config.shared_bytes() <= shared_memory:
            return config
    return None


@gluon.jit
def _block_scales(step, kk, sa_slots, sb_block, stride_sbk, mma_layout: gl.constexpr, STAGES: gl.constexpr):
    """Load step ``step``'s scales (K tile ``kk``) as a column: the A scales of the tile's rows,
    from the step's slot (landed: its product was started after waiting for it), times the B scale."""
    row_scales = sa_slots.index(step % STAGES).permute((1, 0)).load(mma_layout)
    return row_scales * gl.load(sb_block + kk * stride_sbk)


@gluon.jit
def _added(accumulator, product, scale):
    """``accumulator + product · scale`` in one fused multiply-add, written as inline PTX (see
    the module docstring for why the compiler must not form it itself)."""
    return gl.inline_asm_elementwise("fma.rn.f32 $0, $1, $2, $3;", "=r,r,r,r", [product, scale, accumulator],
                                     dtype=gl.float32, is_pure=True, pack=1)


@gluon.jit
def _block_scaled_sum(running, first, second, step, k_steps, off_n, sa_slots, sb_ptr, stride_sbk, stride_sbn,
                      a_slots, b_slots, ready, empty, mma_layout: gl.constexpr, STAGES: gl.constexpr):
    """:func:`~gemmzoo_triton.fp8.gluon_kernel._tile_sum` with each product times its K tile's
    block scales as it joins the accumulator (the scales read before the slot goes back)."""
    BLOCK_M: gl.constexpr = a_slots.type.shape[1]
    BLOCK_N: gl.constexpr = b_slots.type.shape[1]
    accumulator = gl.zeros((BLOCK_M, BLOCK_N), dtype=gl.float32, layout=mma_layout)
    sb_block = sb_ptr + (off_n // 128) * stride_sbn
    scale_first = _block_scales(step - 1, 0, sa_slots, sb_block, stride_sbk, mma_layout, STAGES)
    kk = 0
    for _ in range((k_steps - 1) // 2):
        running_second = _start_product(step, second, a_slots, b_slots, ready, STAGES)
        scale_second = _block_scales(step, kk + 1, sa_slots, sb_block, stride_sbk, mma_layout, STAGES)
        step += 1
        first = warpgroup_mma_wait(num_outstanding=1, deps=(running,))
        release(step - 2, empty, STAGES)
        accumulator = _added(accumulator, first, scale_first)
        running = _start_product(step, first, a_slots, b_slots, ready, STAGES)
        scale_first = _block_scales(step, kk + 2, sa_slots, sb_block, stride_sbk, mma_layout, STAGES)
        step += 1
        second = warpgroup_mma_wait(num_outstanding=1, deps=(running_second,))
        release(step - 2, empty, STAGES)
        accumulator = _added(accumulator, second, scale_second)
        kk += 2
    if (k_steps - 1) % 2 == 1:
        running_second = _start_product(step, second, a_slots, b_slots, ready, STAGES)
        scale_second = _block_scales(step, kk + 1, sa_slots, sb_block, stride_sbk, mma_layout, STAGES)
        step += 1
        first = warpgroup_mma_wait(num_outstanding=1, deps=(running,))
        release(step - 2, empty, STAGES)
        accumulator = _added(accumulator, first, scale_first)
        second = warpgroup_mma_wait(num_outstanding=0, deps=(running_second,))
        accumulator = _added(accumulator, second, scale_second)
    else:
        first = warpgroup_mma_wait(num_outstanding=0, deps=(running,))
        accumulator = _added(accumulator, first, scale_first)
    release(step - 1, empty, STAGES)
    return accumulator, first, second, step


@gluon.jit
def _epilogue_scaled(accumulator, sa_ptr, sb_ptr, off_m, off_n, M, N, SCALING: gl.constexpr,
                     mma_layout: gl.constexpr):
    """The accumulator times the row-wise or tensor-wise scales (block-wise: as it is)."""
    BLOCK_M: gl.constexpr = accumulator.type.shape[0]
    BLOCK_N: gl.constexpr = accumulator.type.shape[1]
    if SCALING == 1:
        rows = off_m + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, mma_layout))
        cols = off_n + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, mma_layout))
        row_scales = gl.load(sa_ptr + rows, mask=rows < M, other=0.0)
        col_scales = gl.load(sb_ptr + cols, mask=cols < N, other=0.0)
        accumulator = accumulator * row_scales[:, None] * col_scales[None, :]
    elif SCALING == 0:
        accumulator = accumulator * (gl.load(sa_ptr) * gl.load(sb_ptr))
    return accumulator


@gluon.jit
def _tile(running, first, second, step, k_steps, local_tile, num_pid_m, num_pid_n, M, N, sa_slots, sa_ptr,
          sb_ptr, stride_sbk, stride_sbn, a_slots, b_slots, ready, empty, mma_layout: gl.constexpr,
          SCALING: gl.constexpr, STAGES: gl.constexpr, GROUP_M: gl.constexpr):
    """This program's tile ``local_tile``: its scaled sum, as the epilogue wants it."""
    BLOCK_M: gl.constexpr = a_slots.type.shape[1]
    BLOCK_N: gl.constexpr = b_slots.type.shape[1]
    tile = gl.program_id(0) + local_tile * gl.num_programs(0)
    off_m, off_n = tile_origin(tile, num_pid_m, num_pid_n, BLOCK_M, BLOCK_N, GROUP_M)
    if SCALING == 2:
        accumulator, first, second, step = _block_scaled_sum(
            running, first, second, step, k_steps, off_n, sa_slots, sb_ptr, stride_sbk, stride_sbn, a_slots,
            b_slots, ready, empty, mma_layout, STAGES)
    else:
        accumulator, first, second, step = _tile_sum(
            running, first, second, step, k_steps, a_slots, b_slots, ready, empty, mma_layout, STAGES)
    accumulator = _epilogue_scaled(accumulator, sa_ptr, sb_ptr, off_m, off_n, M, N, SCALING, mma_layout)
    return accumulator, first, second, step


@gluon.jit
def _multiply(a_slots, b_slots, ready, empty, c_desc, c_stage, sa_ptr, sb_ptr, M, N, stride_sbk, stride_sbn,
              num_pid_m, num_pid_n, k_steps, my_tiles, SCALING: gl.constexpr, STAGES: gl.constexpr,
              GROUP_M: gl.constexpr, num_warps: gl.constexpr, sa_slots=None):
    """The MMA warps (see :func:`~gemmzoo_triton.fp8.gluon_kernel._multiply`), scales included
    (block-wise, A's in ``sa_slots``)."""
    BLOCK_M: gl.constexpr = a_slots.type.shape[1]
    BLOCK_N: gl.constexpr = b_slots.type.shape[1]
    mma_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[num_warps, 1], instr_shape=[16, BLOCK_N, 32])
    first = gl.zeros((BLOCK_M, BLOCK_N), dtype=gl.float32, layout=mma_layout)
    second = gl.zeros((BLOCK_M, BLOCK_N), dtype=gl.float32, layout=mma_layout)
    running = _start_product(0, first, a_slots, b_slots, ready, STAGES)
    step = 1
    for local_tile in range(my_tiles - 1):
        accumulator, first, second, step = _tile(
            running, first, second, step, k_steps, local_tile, num_pid_m, num_pid_n, M, N, sa_slots, sa_ptr,
            sb_ptr, stride_sbk, stride_sbn, a_slots, b_slots, ready, empty, mma_layout, SCALING, STAGES,
            GROUP_M)
        running = _start_product(step, first, a_slots, b_slots, ready, STAGES)
        step += 1
        store_tile(accumulator, local_tile, c_desc, c_stage, num_pid_m, num_pid_n, GROUP_M)
    accumulator, first, second, step = _tile(
        running, first, second, step, k_steps, my_tiles - 1, num_pid_m, num_pid_n, M, N, sa_slots, sa_ptr,
        sb_ptr, stride_sbk, stride_sbn, a_slots, b_slots, ready, empty, mma_layout, SCALING, STAGES, GROUP_M)
    store_tile(accumulator, my_tiles - 1, c_desc, c_stage, num_pid_m, num_pid_n, GROUP_M)
    tma.store_wait(pendings=0)


@gluon.jit
def fp8_scaled_gluon_kernel(a_desc, b_desc, c_desc, sa_desc, M, N, K, sa_ptr, sb_ptr, stride_sbk, stride_sbn,
                            SCALING: gl.constexpr, STAGES: gl.constexpr, GROUP_M: gl.constexpr,
                            num_warps: gl.constexpr):
    """C = (A·scale_a)(B·scale_b) (fp8 E4M3; ``b_desc`` over Bᵀ; C bf16, fp16 or fp32):
    ``num_warps`` MMA warps and one loading warp. Block-wise, ``sa_desc`` is over A's scales
    transposed (and ``sa_ptr`` unused); else None, and ``sa_ptr`` points at A's scales."""
    a_slots, b_slots, c_stage, ready, empty = allocate_pipeline(a_desc, b_desc, c_desc, STAGES)
    BLOCK_M: gl.constexpr = a_desc.block_type.shape[0]
    BLOCK_N: gl.constexpr = b_desc.block_type.shape[0]
    num_pid_m, num_pid_n, my_tiles = my_tile_count(M, N, BLOCK_M, BLOCK_N)
    k_steps = gl.cdiv(K, a_desc.block_type.shape[1])
    # two calls, not one on argument tuples built up: Gluon's frontend neither concatenates the
    # tuples it hands warp_specialize nor takes None among them
    if SCALING == 2:
        sa_slots = gl.allocate_shared_memory(gl.float32, [STAGES, 1, BLOCK_M], sa_desc.layout)
        gl.warp_specialize(
            [(_multiply, (a_slots, b_slots, ready, empty, c_desc, c_stage, sa_ptr, sb_ptr, M, N, stride_sbk,
                          stride_sbn, num_pid_m, num_pid_n, k_steps, my_tiles, SCALING, STAGES, GROUP_M,
                          num_warps, sa_slots)),
             (load_slots, (a_desc, b_desc, a_slots, b_slots, ready, empty, num_pid_m, num_pid_n,
                           k_steps, my_tiles, STAGES, GROUP_M, False, True, sa_desc, sa_slots))],
            [1], [24])
    else:
        gl.warp_specialize(
            [(_multiply, (a_slots, b_slots, ready, empty, c_desc, c_stage, sa_ptr, sb_ptr, M, N, stride_sbk,
                          stride_sbn, num_pid_m, num_pid_n, k_steps, my_tiles, SCALING, STAGES, GROUP_M,
                          num_warps)),
             (load_slots, (a_desc, b_desc, a_slots, b_slots, ready, empty, num_pid_m, num_pid_n,
                           k_steps, my_tiles, STAGES, GROUP_M, False, True))],
            [1], [24])


def _scale_table(scale_a: Any, M: int) -> Any:
    """A's block-wise scales transposed, ``(K/128)×M``, rows padded to 16 bytes for TMA: a copy, or
    none where the caller's scales are laid out so already. The columns past M are never read:
    the descriptor (:func:`_table_describer`) ends at M, and TMA reads zeros past it."""
    import torch

    by_row = scale_a.reshape(M, -1)
    row = padded(M, 4)
    table = by_row.t().contiguous() if row == M else None
    if table is None or table.data_ptr() % 16:
        table = torch.empty((by_row.shape[1], row), dtype=torch.float32, device=scale_a.device)
        table[:, :M].copy_(by_row.t())
    return table


def _table_describer(M: int, block_m: int) -> Callable[[Any], Any]:
    """``describe(table)``: a TMA descriptor over a :func:`_scale_table` of M rows of A, in boxes
    of one K tile's scales for ``block_m`` rows (made once, then copied for each new table)."""
    return reusing(lambda table: TensorDescriptor(table, [table.shape[0], M], [table.stride(0), 1],
                                                  [1, block_m], _SCALE_ROW_LAYOUT))


def _scale_arguments(scaling: str, M: int, N: int, block_m: int) -> Callable[[Any, Any], tuple[Any, ...]]:
    """``scales(scale_a, scale_b)``: the kernel's scale arguments, as it reads them (``sa_desc``,
    ``sa_ptr``, ``sb_ptr``, ``stride_sbk``, ``stride_sbn``) for float32 scales shaped as
    :func:`gemmzoo.problems.classes.scale_shapes` says."""
    if scaling == "blockwise":
        describe = _table_describer(M, block_m)

        def blockwise(scale_a: Any, scale_b: Any) -> tuple[Any, ...]:
            table = _scale_table(scale_a, M)
            sb = scale_b.reshape(-1, scale_b.shape[-1])
            return describe(table), table, sb, sb.stride(0), sb.stride(1)

        return blockwise
    if scaling == "rowwise":
        def rowwise(scale_a: Any, scale_b: Any) -> tuple[Any, ...]:
            return None, scale_a.reshape(M).contiguous(), scale_b.reshape(N).contiguous(), 0, 0

        return rowwise
    return lambda scale_a, scale_b: (None, scale_a.reshape(1), scale_b.reshape(1), 0, 0)


def arguments(x: Any, y: Any, scale_a: Any, scale_b: Any, scaling: str, c: Any,
              config: GluonConfig) -> tuple[Any, ...]:
    """The kernel's run-time arguments for ``c = (x·scale_a)(y·scale_b)`` (see :func:`launch`):
    descriptors over A, Bᵀ, C and (block-wise) A's scales, the sizes, the scales, B's strides."""
    M, K = x.shape
    N = y.shape[1]
    a_desc, b_desc, c_desc = gluon_parts.descriptors(x, y, c, False, True, config)
    sa_desc, *scales = _scale_arguments(scaling, M, N, config.block_m)(scale_a, scale_b)
    return a_desc, b_desc, c_desc, sa_desc, M, N, K, *scales


def bind(M: int, N: int, K: int, scaling: str, sms: int, config: GluonConfig,
         device: Any = None) -> Callable[[Any, Any, Any, Any, Any], None]:
    """``run(x, y, scale_a, scale_b, c)``: :func:`launch` for every problem of these sizes and
    ``scaling``, bound once (grid, constexprs, the compiled kernel:
    :class:`~gemmzoo_triton.core.launch.BoundLaunch`); a call makes the descriptors (copies of the
    first ones) and the scales as the kernel reads them, and launches. ``device``: the operands'."""
    from gemmzoo_triton.core.launch import BoundLaunch

    constexprs = {"SCALING": _CODES[scaling], "STAGES": config.stages, "GROUP_M": config.group_m,
                  "num_warps": config.num_warps}
    launch_bound = BoundLaunch(fp8_scaled_gluon_kernel, gluon_parts.grid(M, N, sms, config), constexprs,
                               pointers=(7, 8), device=device)
    a_desc, b_desc = gluon_parts.describers(False, True, config)
    c_desc = reusing(lambda c: gluon_parts.over(c, (config.block_m, config.block_n)))
    scales = _scale_arguments(scaling, M, N, config.block_m)

    def run(x: Any, y: Any, scale_a: Any, scale_b: Any, c: Any) -> None:
        sa_desc, sa, sb, stride_sbk, stride_sbn = scales(scale_a, scale_b)
        launch_bound(a_desc(x), b_desc(y), c_desc(c), sa_desc, M, N, K, sa, sb, stride_sbk, stride_sbn)

    return run


def launch(x: Any, y: Any, scale_a: Any, scale_b: Any, scaling: str, c: Any, sms: int,
           config: GluonConfig) -> None:
    """``c = (x·scale_a)(y·scale_b)``: ``x`` M×K row-major, ``y`` K×N column-major, both fp8
    E4M3 with 16-byte aligned rows, float32 scales shaped as :func:`gemmzoo.problems.classes.scale_shapes`
    says, ``c`` contiguous with 16-byte rows; ``config`` from :func:`config_for` for ``scaling``."""
    M, N = x.shape[0], y.shape[1]
    fp8_scaled_gluon_kernel[gluon_parts.grid(M, N, sms, config)](
        *arguments(x, y, scale_a, scale_b, scaling, c, config), SCALING=_CODES[scaling],
        STAGES=config.stages, GROUP_M=config.group_m, num_warps=config.num_warps)
