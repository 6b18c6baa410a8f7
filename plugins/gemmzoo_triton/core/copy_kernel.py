"""A 2-D copy into a buffer with 16-byte aligned rows, optionally zero-padded past the source.

Used by triton-grouped's aligned route (copies of A and B for TMA, no padding needed: TMA reads
zeros past a descriptor's extent) and by torch-padded (copies whose padding must hold zeros,
because cuBLAS reads it). One program per BLOCK_R x BLOCK_C block of the destination; the source
may have any strides (rows that start at odd addresses, strided views), the destination's rows
are contiguous and start at multiples of ``DST_ALIGN`` elements, so its stores are wide.
Consecutive programs take consecutive blocks of one band of rows, so the programs running at
any moment read and write neighbouring memory. Imported only when a copy runs: ``triton.jit``
reads TRITON_INTERPRET when a kernel is decorated.
"""

# ruff: noqa: N803 - upper-case constexprs, as in the other kernels

from __future__ import annotations

from typing import Any

import triton
import triton.language as tl

from gemmzoo_triton.core.padding import units

BLOCK_R = 8
BLOCK_C = 128


@triton.jit
def _copy_block(
    src, dst, rows, cols, dst_rows, dst_cols, stride_sr, stride_sc, stride_dr, block,
    BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr, DST_ALIGN: tl.constexpr,
):
    """Block ``block`` of the destination (column blocks first, then bands of rows): the source's
    values inside its extent, zeros elsewhere up to (dst_rows, dst_cols)."""
    stride_dr = tl.multiple_of(stride_dr, DST_ALIGN)
    column_blocks = tl.cdiv(dst_cols, BLOCK_C)
    c = (block % column_blocks) * BLOCK_C + tl.arange(0, BLOCK_C)
    r = (block // column_blocks) * BLOCK_R + tl.arange(0, BLOCK_R)
    inside = (r[:, None] < rows) & (c[None, :] < cols)
    values = tl.load(src + r[:, None] * stride_sr + c[None, :] * stride_sc, mask=inside, other=0.0)
    written = (r[:, None] < dst_rows) & (c[None, :] < dst_cols)
    tl.store(dst + r[:, None] * stride_dr + c[None, :], values, mask=written)


@triton.jit
def copy_kernel(
    src, dst, rows, cols, dst_rows, dst_cols,
    stride_sr, stride_sc, stride_dr,
    BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr, DST_ALIGN: tl.constexpr,
):
    """One copy: program ``i`` writes the destination's block ``i``."""
    _copy_block(src, dst, rows, cols, dst_rows, dst_cols, stride_sr, stride_sc, stride_dr,
                tl.program_id(0), BLOCK_R, BLOCK_C, DST_ALIGN)


@triton.jit
def copy_pair_kernel(
    src_a, dst_a, rows_a, cols_a, dst_rows_a, dst_cols_a, stride_sr_a, stride_sc_a, stride_dr_a,
    src_b, dst_b, rows_b, cols_b, dst_rows_b, dst_cols_b, stride_sr_b, stride_sc_b, stride_dr_b,
    blocks_a,
    BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr, DST_ALIGN: tl.constexpr,
):
    """Two copies in one launch (one launch's host time instead of two): the first ``blocks_a``
    programs write the first destination, the others the second."""
    block = tl.program_id(0)
    if block < blocks_a:
        _copy_block(src_a, dst_a, rows_a, cols_a, dst_rows_a, dst_cols_a, stride_sr_a, stride_sc_a,
                    stride_dr_a, block, BLOCK_R, BLOCK_C, DST_ALIGN)
    else:
        _copy_block(src_b, dst_b, rows_b, cols_b, dst_rows_b, dst_cols_b, stride_sr_b, stride_sc_b,
                    stride_dr_b, block - blocks_a, BLOCK_R, BLOCK_C, DST_ALIGN)


def blocks(dst_rows: int, dst_cols: int) -> int:
    """The programs that write a destination of this extent."""
    return triton.cdiv(dst_cols, BLOCK_C) * triton.cdiv(dst_rows, BLOCK_R)


def arguments(source: Any, destination: Any) -> tuple[Any, ...]:
    """One copy's run-time arguments: ``destination[:rows, :cols] = source``, zeros past it."""
    return (source, destination, *source.shape, *destination.shape, *source.stride(), destination.stride(0))


def constexprs(dst_align: int) -> dict[str, int]:
    """The copy kernels' constexprs for destinations whose row stride is a multiple of ``dst_align``."""
    return {"BLOCK_R": BLOCK_R, "BLOCK_C": BLOCK_C, "DST_ALIGN": dst_align}


def alignment(destination: Any) -> int:
    """The ``DST_ALIGN`` a destination's row stride is a multiple of (16 bytes' worth, or 1)."""
    unit = units(destination.element_size())
    return unit if destination.stride(0) % unit == 0 else 1


def copy(source: Any, destination: Any) -> None:
    """``destination[:rows, :cols] = source`` and zeros in the rest of ``destination``, for 2-D
    tensors where ``destination`` is at least as large and its columns are adjacent."""
    copy_kernel[(blocks(*destination.shape),)](
        *arguments(source, destination), **constexprs(alignment(destination)))


def copy_pair(source_a: Any, destination_a: Any, source_b: Any, destination_b: Any) -> None:
    """:func:`copy` of two pairs in one launch; the destinations share a dtype and row alignment."""
    blocks_a = blocks(*destination_a.shape)
    copy_pair_kernel[(blocks_a + blocks(*destination_b.shape),)](
        *arguments(source_a, destination_a), *arguments(source_b, destination_b), blocks_a,
        **constexprs(alignment(destination_a)))
