"""triton-naive's kernel: each program owns a block of C and adds one rank-1 update per step of k.

The baseline a course shows first: no K tiles staged through shared memory and no ``tl.dot``.
Each step loads one column of A and one row of B and does BLOCK_M x BLOCK_N multiply-adds into an
fp32 accumulator. Imported only when the backend runs: ``triton.jit`` reads TRITON_INTERPRET
when a kernel is decorated.
"""

# ruff: noqa: N803 - kernel arguments are named as in the tutorial: M, N, K and upper-case constexprs

from __future__ import annotations

import triton
import triton.language as tl

BLOCK_M = 32
BLOCK_N = 32


@triton.jit
def round_to_tf32(x):
    """``x`` rounded to TF32 (10 mantissa bits, to nearest, ties away from zero); NaN unchanged.

    Without ``tl.dot`` there are no tensor cores to do it, so the tf32 mode rounds the operands
    here and multiplies them in fp32, where the product of two TF32 values is exact.
    """
    bits = x.to(tl.uint32, bitcast=True)
    rounded = ((bits + 0x1000) >> 13) << 13
    return tl.where(x == x, rounded.to(tl.float32, bitcast=True), x)


@triton.jit
def naive_matmul_kernel(
    a_ptr, b_ptr, c_ptr,
    M, N, K,
    stride_am, stride_ak,
    stride_bk, stride_bn,
    stride_cm, stride_cn,
    TF32: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    """C[rows, cols] = sum over k of A[rows, k] * B[k, cols], one k at a time."""
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    row_ok = rows < M
    col_ok = cols < N

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, K):
        a = tl.load(a_ptr + rows * stride_am + k * stride_ak, mask=row_ok, other=0.0).to(tl.float32)
        b = tl.load(b_ptr + k * stride_bk + cols * stride_bn, mask=col_ok, other=0.0).to(tl.float32)
        if TF32:
            a = round_to_tf32(a)
            b = round_to_tf32(b)
        acc += a[:, None] * b[None, :]  # a rank-1 update of the whole block

    c_ptrs = c_ptr + rows[:, None] * stride_cm + cols[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=row_ok[:, None] & col_ok[None, :])
