"""triton-grouped's one-launch kernel for operands whose rows are not 16-byte aligned.

cuBLAS and the pointer kernel are several times slower on such operands (their loads cannot be
vectorised), and a copy into aligned buffers followed by the product costs two launches, whose
host time exceeds the device time of a mid-sized product. This kernel does both in one launch:

1. every program copies its share of A and B into buffers the plan keeps, whose rows are aligned
   and whose sizes are whole tiles, zero past the operands (the zeros are written once, when a
   buffer is made, and never overwritten);
2. the programs wait for each other at a grid-wide barrier (the launch is cooperative, so all of
   them are resident at once: one program per SM at most);
3. each program multiplies tiles of C from the buffers, as Triton's matmul tutorial does, with no
   mask in the K loop (the zeros complete the last block) and masked stores into C.

Under Triton's interpreter the programs run one after the other, so no program could wait for
the rest: the two phases are launched one after the other instead (``COPY`` and ``MULTIPLY``).
"""

# ruff: noqa: N803, N806 - M, N, K and upper-case constexprs, as in the tutorial

from __future__ import annotations

from typing import Any, NamedTuple

import triton
import triton.language as tl

from gemmzoo_triton.core.padding import round_up
from gemmzoo_triton.core.tile_order import tile_position

#: Rows and columns of a block of the copy phase (two are moved at a time): small blocks, two in
#: flight, keep more loads going per program than one large block (docs/results/2026-11-26-copied-route.md).
COPY_BLOCK = {"COPY_R": 8, "COPY_C": 128}


@triton.jit
def _load_block(src, rows, cols, stride_r, stride_c, block, COPY_R: tl.constexpr, COPY_C: tl.constexpr):
    """Block ``block`` of a copy (column blocks first, then bands of rows): its values (zeros past
    the source), its rows and columns, and which of them lie inside the source."""
    column_blocks = tl.cdiv(cols, COPY_C)
    c = (block % column_blocks) * COPY_C + tl.arange(0, COPY_C)
    r = (block // column_blocks) * COPY_R + tl.arange(0, COPY_R)
    inside = (r[:, None] < rows) & (c[None, :] < cols)
    return tl.load(src + r[:, None] * stride_r + c[None, :] * stride_c, mask=inside, other=0.0), r, c, inside


@triton.jit
def _copy_blocks(src, dst, rows, cols, stride_r, stride_c, stride_d, blocks, first, step,
                 COPY_R: tl.constexpr, COPY_C: tl.constexpr, DST_ALIGN: tl.constexpr):
    """Copy blocks ``first``, ``first + step``, ... of a source into ``dst`` (rows ``stride_d``
    apart), two at a time: both loads are in flight before either store. A block number past the
    last one lies below the source's rows, so its mask is empty."""
    stride_d = tl.multiple_of(stride_d, DST_ALIGN)
    for block in range(first, blocks, 2 * step):
        v0, r0, c0, in0 = _load_block(src, rows, cols, stride_r, stride_c, block, COPY_R, COPY_C)
        v1, r1, c1, in1 = _load_block(src, rows, cols, stride_r, stride_c, block + step, COPY_R, COPY_C)
        tl.store(dst + r0[:, None] * stride_d + c0[None, :], v0, mask=in0)
        tl.store(dst + r1[:, None] * stride_d + c1[None, :], v1, mask=in1)


@triton.jit
def grid_barrier(sync):
    """Wait until every program of the launch has arrived. ``sync`` holds (arrived, generation),
    both zero before the first launch; the last program to arrive resets the count and moves the
    generation on, which releases the others and leaves ``sync`` ready for the next launch."""
    tl.debug_barrier()  # every thread's stores of this program come before its arrival
    generation = tl.atomic_add(sync + 1, 0, sem="acquire")
    arrived = tl.atomic_add(sync, 1, sem="acq_rel")
    if arrived == tl.num_programs(0) - 1:
        tl.atomic_xchg(sync, 0, sem="relaxed")
        tl.atomic_add(sync + 1, 1, sem="release")
    else:
        # spin on plain loads (an atomic each time would queue behind every other program's),
        # then one acquire, after which the other programs' copies are visible
        while tl.load(sync + 1, volatile=True) == generation:
            pass
        tl.atomic_add(sync + 1, 0, sem="acquire")
    tl.debug_barrier()


@triton.jit
def copied_matmul_kernel(
    a, b, c, a_buf, b_buf, sync,
    M, N, K_PADDED,
    rows_a, cols_a, stride_sa_r, stride_sa_c, stride_da, blocks_a,
    rows_b, cols_b, stride_sb_r, stride_sb_c, stride_db, blocks_b,
    stride_xm, stride_xk, stride_yk, stride_yn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    COPY_R: tl.constexpr, COPY_C: tl.constexpr, DST_ALIGN: tl.constexpr,
    COPY: tl.constexpr, MULTIPLY: tl.constexpr, WAIT: tl.constexpr,
):
    """C = A @ B through the buffers (see the module's docstring). The copies are described as
    stored (rows of the source along which it is contiguous); the buffers as A and B."""
    pid = tl.program_id(0)
    programs = tl.num_programs(0)
    if COPY:
        _copy_blocks(a, a_buf, rows_a, cols_a, stride_sa_r, stride_sa_c, stride_da, blocks_a, pid, programs,
                     COPY_R, COPY_C, DST_ALIGN)
        _copy_blocks(b, b_buf, rows_b, cols_b, stride_sb_r, stride_sb_c, stride_db, blocks_b, pid, programs,
                     COPY_R, COPY_C, DST_ALIGN)
    if WAIT:
        grid_barrier(sync)
    if MULTIPLY:
        tiles_m = tl.cdiv(M, BLOCK_M)
        tiles_n = tl.cdiv(N, BLOCK_N)
        for tile in range(pid, tiles_m * tiles_n, programs):
            pid_m, pid_n = tile_position(tile, tiles_m, tiles_n, GROUP_M)
            offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
            offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
            offs_k = tl.arange(0, BLOCK_K)
            x_ptrs = a_buf + offs_m[:, None] * stride_xm + offs_k[None, :] * stride_xk
            y_ptrs = b_buf + offs_k[:, None] * stride_yk + offs_n[None, :] * stride_yn
            accumulator = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
            for _ in range(0, K_PADDED, BLOCK_K):
                accumulator = tl.dot(tl.load(x_ptrs), tl.load(y_ptrs), accumulator)
                x_ptrs += BLOCK_K * stride_xk
                y_ptrs += BLOCK_K * stride_yk
            c_ptrs = c + offs_m[:, None] * N + offs_n[None, :]
            tl.store(c_ptrs, accumulator.to(c.dtype.element_ty),
                     mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


class Config(NamedTuple):
    """A tile shape and launch options of :func:`copied_matmul_kernel`."""

    block_m: int
    block_n: int
    block_k: int
    num_warps: int
    num_stages: int


#: The tile shapes :func:`pick_config` chooses among, smaller first: 64x128 tiles where they cover
#: C in as few waves as 128x128 ones (more programs share the work), 128x128 where they need fewer
#: (docs/results/2026-11-26-copied-route.md).
CONFIGS = (
    Config(64, 128, 64, 4, 4),
    Config(128, 128, 64, 8, 4),
)
#: Under the interpreter: small tiles (it runs every program on the CPU).
INTERPRETER_CONFIG = Config(32, 32, 32, 4, 1)


def pick_config(M: int, N: int, sms: int) -> Config:
    """The tile shape that covers C in the fewest waves of ``sms`` programs, the smaller one where
    two take as many (its programs share the work more evenly)."""
    def waves(config: Config) -> int:
        return triton.cdiv(triton.cdiv(M, config.block_m) * triton.cdiv(N, config.block_n), sms)

    return min(CONFIGS, key=waves)


class Buffers(NamedTuple):
    """Where one operand is copied: its layout in a zeroed buffer of whole tiles."""

    column_major: bool
    rows: int  # the stored rows (K for a column-major A, M for a row-major one...)
    cols: int
    row_stride: int  # of the buffer
    numel: int


def operand_buffer(x: Any, rows_unit: int, cols_unit: int) -> Buffers:
    """The buffer layout of operand ``x`` (rows_unit, cols_unit: the tile lengths of its two
    logical dimensions): kept in ``x``'s own layout, so that the copy walks ``x`` along its
    contiguous dimension, with both dimensions rounded up to whole tiles."""
    column_major = x.stride(0) == 1 and x.stride(1) != 1
    logical_rows, logical_cols = round_up(x.shape[0], rows_unit), round_up(x.shape[1], cols_unit)
    if column_major:
        return Buffers(True, x.shape[1], x.shape[0], logical_rows, logical_cols * logical_rows)
    return Buffers(False, x.shape[0], x.shape[1], logical_cols, logical_rows * logical_cols)


class _Copy(NamedTuple):
    """One operand's copy as the kernel takes it: stored rows and columns, the source's strides
    along them, the buffer's row stride, and the copy blocks."""

    rows: int
    cols: int
    stride_r: int
    stride_c: int
    row_stride: int
    blocks: int


def _copy_of(x: Any, layout: Buffers) -> _Copy:
    stride_r, stride_c = x.stride()[::-1] if layout.column_major else x.stride()
    blocks = triton.cdiv(layout.rows, COPY_BLOCK["COPY_R"]) * triton.cdiv(layout.cols, COPY_BLOCK["COPY_C"])
    return _Copy(layout.rows, layout.cols, stride_r, stride_c, layout.row_stride, blocks)


def _gemm_strides(layout: Buffers) -> tuple[int, int]:
    """The buffer's strides along the operand's (rows, columns)."""
    return (1, layout.row_stride) if layout.column_major else (layout.row_stride, 1)


def bind(x: Any, y: Any, sms: int, interpret: bool, config: Config | None = None) -> Any:
    """``run(x, y, c)``: C = x @ y through this kernel, for every pair of operands with the shapes
    and strides of ``x`` and ``y`` (float16 or bfloat16 on one CUDA device, or CPU tensors under
    the interpreter) and a contiguous C; the buffers are kept per thread and CUDA stream
    (:class:`~gemmzoo_triton.core.stream_buffers.StreamBuffers`). ``config``: the tile shape, by
    default :func:`pick_config`'s."""
    import torch

    from gemmzoo_triton.core.launch import BoundLaunch
    from gemmzoo_triton.core.padding import units
    from gemmzoo_triton.core.stream_buffers import StreamBuffers

    M, K = x.shape
    N = y.shape[1]
    if config is None:
        config = INTERPRETER_CONFIG if interpret else pick_config(M, N, sms)
    a_layout = operand_buffer(x, config.block_m, config.block_k)
    b_layout = operand_buffer(y, config.block_k, config.block_n)
    copy_a, copy_b = _copy_of(x, a_layout), _copy_of(y, b_layout)
    k_padded = round_up(K, config.block_k)
    b_offset = round_up(a_layout.numel, 64)
    dtype, device = x.dtype, x.device

    def make(flat: Any) -> tuple[Any, Any, Any]:
        flat.zero_()  # the padding stays zero: the copies write inside the operands' extent only
        sync = torch.zeros(2, dtype=torch.int32, device=device)
        return flat[: a_layout.numel], flat[b_offset: b_offset + b_layout.numel], sync

    buffers = StreamBuffers(b_offset + b_layout.numel, dtype, device, make)
    tiles = triton.cdiv(M, config.block_m) * triton.cdiv(N, config.block_n)
    # at least a program per tile, and enough for the copies to spread; never more than one an SM
    programs = max(1, min(sms, max(tiles, (copy_a.blocks + copy_b.blocks) // 4)))
    constexprs = {"BLOCK_M": config.block_m, "BLOCK_N": config.block_n, "BLOCK_K": config.block_k,
                  "GROUP_M": 8, **COPY_BLOCK, "DST_ALIGN": units(x.element_size()),
                  "num_warps": config.num_warps, "num_stages": config.num_stages}
    sizes = (M, N, k_padded,
             copy_a.rows, copy_a.cols, copy_a.stride_r, copy_a.stride_c, copy_a.row_stride, copy_a.blocks,
             copy_b.rows, copy_b.cols, copy_b.stride_r, copy_b.stride_c, copy_b.row_stride, copy_b.blocks,
             *_gemm_strides(a_layout), *_gemm_strides(b_layout))
    pointers = (0, 1, 2)  # the kept buffers come from the allocator: always aligned
    if interpret:
        copy, multiply = (
            BoundLaunch(copied_matmul_kernel, (programs,),
                        {**constexprs, "COPY": phase == 0, "MULTIPLY": phase == 1, "WAIT": False}, pointers)
            for phase in (0, 1))

        def run_phases(x: Any, y: Any, c: Any) -> None:
            a_buf, b_buf, sync = buffers.get()
            copy(x, y, c, a_buf, b_buf, sync, *sizes)
            multiply(x, y, c, a_buf, b_buf, sync, *sizes)

        return run_phases

    launch = BoundLaunch(copied_matmul_kernel, (programs,),
                         {**constexprs, "COPY": True, "MULTIPLY": True, "WAIT": True,
                          "launch_cooperative_grid": True}, pointers)

    def run(x: Any, y: Any, c: Any) -> None:
        (a_buf, b_buf, sync), stream = buffers.get_on()
        launch.on_stream(stream, x, y, c, a_buf, b_buf, sync, *sizes)

    return run
