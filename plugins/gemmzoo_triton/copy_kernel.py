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

BLOCK_R = 16
BLOCK_C = 256


@triton.jit
def copy_kernel(
    src, dst, rows, cols, dst_rows, dst_cols,
    stride_sr, stride_sc, stride_dr,
    BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr, DST_ALIGN: tl.constexpr,
):
    """dst[r, c] = src[r, c] inside the source's extent, 0 elsewhere up to (dst_rows, dst_cols)."""
    stride_dr = tl.multiple_of(stride_dr, DST_ALIGN)
    c = tl.program_id(0) * BLOCK_C + tl.arange(0, BLOCK_C)
    r = tl.program_id(1) * BLOCK_R + tl.arange(0, BLOCK_R)
    inside = (r[:, None] < rows) & (c[None, :] < cols)
    values = tl.load(src + r[:, None] * stride_sr + c[None, :] * stride_sc, mask=inside, other=0.0)
    written = (r[:, None] < dst_rows) & (c[None, :] < dst_cols)
    tl.store(dst + r[:, None] * stride_dr + c[None, :], values, mask=written)


def grid(dst_rows: int, dst_cols: int) -> tuple[int, int]:
    """The launch grid for a destination extent: column blocks first, then bands of rows."""
    return triton.cdiv(dst_cols, BLOCK_C), triton.cdiv(dst_rows, BLOCK_R)


def alignment(destination: Any) -> int:
    """The ``DST_ALIGN`` a destination's row stride is a multiple of (16 bytes' worth, or 1)."""
    units = max(1, 16 // destination.element_size())
    return units if destination.stride(0) % units == 0 else 1


def copy(source: Any, destination: Any) -> None:
    """``destination[:rows, :cols] = source`` and zeros in the rest of ``destination``, for 2-D
    tensors where ``destination`` is at least as large and its columns are adjacent."""
    rows, cols = source.shape
    dst_rows, dst_cols = destination.shape
    copy_kernel[grid(dst_rows, dst_cols)](
        source, destination, rows, cols, dst_rows, dst_cols,
        source.stride(0), source.stride(1), destination.stride(0),
        BLOCK_R=BLOCK_R, BLOCK_C=BLOCK_C, DST_ALIGN=alignment(destination),
    )
