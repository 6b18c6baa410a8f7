"""A 2-D copy into a buffer with 16-byte aligned rows: the aligned route's copies of A and B.

One program per BLOCK_R x BLOCK_C block; the source may have any strides (rows that start at odd
addresses, strided views), the destination's rows are contiguous and 16-byte aligned, so its
stores are wide. Imported only when the aligned route runs: ``triton.jit`` reads TRITON_INTERPRET
when a kernel is decorated.
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
    src, dst, rows, cols,
    stride_sr, stride_sc, stride_dr,
    BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr,
):
    """dst[r, c] = src[r, c] for the block (program_id(0), program_id(1)); dst's columns adjacent."""
    r = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    c = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    mask = (r[:, None] < rows) & (c[None, :] < cols)
    values = tl.load(src + r[:, None] * stride_sr + c[None, :] * stride_sc, mask=mask)
    tl.store(dst + r[:, None] * stride_dr + c[None, :], values, mask=mask)


def copy(source: Any, destination: Any) -> None:
    """``destination.copy_(source)`` for 2-D tensors of one shape, ``destination``'s columns adjacent."""
    rows, cols = source.shape
    grid = (triton.cdiv(rows, BLOCK_R), triton.cdiv(cols, BLOCK_C))
    copy_kernel[grid](
        source, destination, rows, cols,
        source.stride(0), source.stride(1), destination.stride(0),
        BLOCK_R=BLOCK_R, BLOCK_C=BLOCK_C,
    )
