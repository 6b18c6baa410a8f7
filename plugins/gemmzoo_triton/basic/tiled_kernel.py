"""triton-tiled's kernel: the course notebook's tiled matmul.

A 2-D grid with one program per TILE_M x TILE_N tile of C; the program walks K in TILE_K steps,
loading masked tiles of A and B and adding their ``tl.dot`` into an fp32 accumulator. Imported
only when the backend runs: ``triton.jit`` reads TRITON_INTERPRET when a kernel is decorated.
"""

# ruff: noqa: N803 - kernel arguments are named as in the tutorial: M, N, K and upper-case constexprs

from __future__ import annotations

import triton
import triton.language as tl

TILE_M = 64
TILE_N = 64
TILE_K = 32


@triton.jit
def tiled_matmul_kernel(
    a_ptr, b_ptr, c_ptr,
    M, N, K,
    stride_am, stride_ak,
    stride_bk, stride_bn,
    stride_cm, stride_cn,
    PRECISION: tl.constexpr,
    TILE_M: tl.constexpr,
    TILE_N: tl.constexpr,
    TILE_K: tl.constexpr,
):
    """C = A @ B for the tile (program_id(0), program_id(1)) of C."""
    rm = tl.program_id(0) * TILE_M + tl.arange(0, TILE_M)  # rows of A and C
    cn = tl.program_id(1) * TILE_N + tl.arange(0, TILE_N)  # columns of B and C

    acc = tl.zeros((TILE_M, TILE_N), dtype=tl.float32)
    for k_start in range(0, K, TILE_K):
        rk = k_start + tl.arange(0, TILE_K)
        a_mask = (rm[:, None] < M) & (rk[None, :] < K)
        a = tl.load(a_ptr + rm[:, None] * stride_am + rk[None, :] * stride_ak, mask=a_mask, other=0.0)
        b_mask = (rk[:, None] < K) & (cn[None, :] < N)
        b = tl.load(b_ptr + rk[:, None] * stride_bk + cn[None, :] * stride_bn, mask=b_mask, other=0.0)
        acc += tl.dot(a, b, input_precision=PRECISION)

    c_mask = (rm[:, None] < M) & (cn[None, :] < N)
    c_ptrs = c_ptr + rm[:, None] * stride_cm + cn[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=c_mask)
