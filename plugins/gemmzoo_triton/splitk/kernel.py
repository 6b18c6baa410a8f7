"""The split-K kernel behind ``triton-splitk`` and ``triton-decode``, and its reduction.

The grid is (tiles of C, splits of K). Program (t, s) multiplies the rows of A and the columns of
B of tile t over the s-th range of K and, when K is split, stores its fp32 partial tile into a
workspace of shape (splits, M, N). The partial tiles of a tile are then summed in the order
s = 0, 1, ..., splits - 1, whichever program finished last, so every call rounds the same way and
repeated calls agree bitwise. Two ways to do that sum (``REDUCE``):

- ``REDUCE_SERIAL``: in the same launch. After storing its partial tile each program takes a
  ticket from a per-tile arrival counter; the program with the last ticket reads the partial
  tiles back in split order, writes C and resets the counter to zero for the next launch. The
  counter only says who arrived last; it never touches the values, so the sum's order is fixed.
- ``REDUCE_SEPARATE``: the kernel only stores partial tiles, and :func:`reduce_kernel`, a second
  launch spread over every SM, sums them. No atomics at all; it pays a second launch.

With one split the program writes its tile of C directly (``REDUCE_NONE``).

Imported only when a backend runs: ``triton.jit`` reads TRITON_INTERPRET when it decorates.
"""

# ruff: noqa: N803 - M, N, K and upper-case constexprs, as Triton's tutorials write them

from __future__ import annotations

import triton
import triton.language as tl

REDUCE_NONE = 0
REDUCE_SERIAL = 1
REDUCE_SEPARATE = 2


@triton.jit
def splitk_kernel(
    a_ptr, b_ptr, c_ptr, ws_ptr, count_ptr,
    M, N, K, k_per_split, splits,
    stride_am, stride_ak,
    stride_bk, stride_bn,
    stride_cm, stride_cn,
    PRECISION: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    EVEN_K: tl.constexpr,
    EVEN_N: tl.constexpr,
    REDUCE: tl.constexpr,
    CHUNK: tl.constexpr,
):
    """One tile of C over one range of K; see the module docstring for the reduction.

    ``k_per_split`` is a multiple of BLOCK_K and every split's range is non-empty. ``EVEN_K``:
    K is a multiple of BLOCK_K, so no load needs a K mask; ``EVEN_N``: N is a multiple of
    BLOCK_N, so B's loads need no column mask and stay as wide as the layout allows. The serial
    reduction reads CHUNK partial tiles at a time, so that several loads are in flight.
    """
    tile = tl.program_id(0)
    split = tl.program_id(1)
    tiles_n = tl.cdiv(N, BLOCK_N)
    rm = (tile // tiles_n) * BLOCK_M + tl.arange(0, BLOCK_M)
    cn = (tile % tiles_n) * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    m_ok = rm < M
    n_ok = cn < N

    k_start = split * k_per_split
    k_len = tl.minimum(k_per_split, K - k_start)
    a_ptrs = a_ptr + rm[:, None] * stride_am + (k_start + rk)[None, :] * stride_ak
    b_ptrs = b_ptr + (k_start + rk)[:, None] * stride_bk + cn[None, :] * stride_bn

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, k_len, BLOCK_K):
        if EVEN_K:
            a = tl.load(a_ptrs, mask=m_ok[:, None], other=0.0)
            if EVEN_N:
                b = tl.load(b_ptrs)
            else:
                b = tl.load(b_ptrs, mask=n_ok[None, :], other=0.0)
        else:
            k_ok = rk < k_len - k
            a = tl.load(a_ptrs, mask=m_ok[:, None] & k_ok[None, :], other=0.0)
            b = tl.load(b_ptrs, mask=k_ok[:, None] & n_ok[None, :], other=0.0)
        acc = tl.dot(a, b, acc, input_precision=PRECISION)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk

    finish(acc, c_ptr, ws_ptr, count_ptr, tile, split, splits, rm, cn, M, N, stride_cm, stride_cn,
           BLOCK_M, BLOCK_N, REDUCE, CHUNK)


@triton.jit
def splitk_tma_kernel(
    a_desc, b_desc, c_ptr, ws_ptr, count_ptr,
    M, N, K, k_per_split, splits,
    stride_cm, stride_cn,
    PRECISION: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    A_T: tl.constexpr,
    B_T: tl.constexpr,
    REDUCE: tl.constexpr,
    CHUNK: tl.constexpr,
):
    """:func:`splitk_kernel` with A and B read through tensor descriptors (Hopper's TMA).

    The TMA unit copies whole tiles into shared memory and fills what lies past a matrix's edge
    with zeros, so no load is masked: a split's range of K is a whole number of BLOCK_K steps,
    and the last split's steps past K read zeros. ``A_T`` / ``B_T``: the descriptor covers the
    operand's transpose (the operand is column-major), and the tile is transposed after the load.
    """
    tile = tl.program_id(0)
    split = tl.program_id(1)
    tiles_n = tl.cdiv(N, BLOCK_N)
    off_m = (tile // tiles_n) * BLOCK_M
    off_n = (tile % tiles_n) * BLOCK_N
    k_start = split * k_per_split
    k_end = tl.minimum(k_start + k_per_split, K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(k_start, k_end, BLOCK_K):
        if A_T:
            a = a_desc.load([k, off_m]).T
        else:
            a = a_desc.load([off_m, k])
        if B_T:
            b = b_desc.load([off_n, k]).T
        else:
            b = b_desc.load([k, off_n])
        acc = tl.dot(a, b, acc, input_precision=PRECISION)
    rm = off_m + tl.arange(0, BLOCK_M)
    cn = off_n + tl.arange(0, BLOCK_N)
    finish(acc, c_ptr, ws_ptr, count_ptr, tile, split, splits, rm, cn, M, N, stride_cm, stride_cn,
           BLOCK_M, BLOCK_N, REDUCE, CHUNK)


@triton.jit
def finish(
    acc, c_ptr, ws_ptr, count_ptr, tile, split, splits, rm, cn, M, N, stride_cm, stride_cn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, REDUCE: tl.constexpr, CHUNK: tl.constexpr,
):
    """Both kernels' epilogue: C's tile written directly, or the partial tile stored and (serial
    reduction) summed in split order by the program that arrives last at its tile."""
    m_ok = rm < M
    n_ok = cn < N
    c_mask = m_ok[:, None] & n_ok[None, :]
    c_ptrs = c_ptr + rm[:, None] * stride_cm + cn[None, :] * stride_cn
    if REDUCE == 0:
        tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=c_mask)
    else:
        plane = M * N  # the host keeps splits * M * N under 2**31
        within = rm[:, None] * N + cn[None, :]
        tl.store(ws_ptr + split * plane + within, acc, mask=c_mask)
        if REDUCE == 1:
            # Every thread's partial stores must be done before the ticket releases them.
            tl.debug_barrier()
            ticket = tl.atomic_add(count_ptr + tile, 1, sem="acq_rel", scope="gpu")
            if ticket == splits - 1:
                total = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
                for first in range(0, splits, CHUNK):
                    for j in tl.static_range(CHUNK):
                        # .cg reads L2, where the other SMs' stores landed, not a stale L1 line
                        part = ws_ptr + (first + j) * plane + within
                        ok = c_mask & (within * 0 + first + j < splits)
                        total += tl.load(part, mask=ok, other=0.0, cache_modifier=".cg")
                tl.store(c_ptrs, total.to(c_ptr.dtype.element_ty), mask=c_mask)
                tl.store(count_ptr + tile, 0)


@triton.jit
def reduce_kernel(
    ws_ptr, c_ptr, M, N, splits, stride_cm, stride_cn, BLOCK: tl.constexpr, CHUNK: tl.constexpr
):
    """C = the sum of the workspace's partial products: CHUNK splits at a time (all their loads
    in flight at once), each chunk summed by a reduction tree fixed at compile time, and the
    chunks' sums added in split order."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    plane = M * N  # the host keeps splits * M * N under 2**31
    ok = offs < plane
    rows = tl.arange(0, CHUNK)
    total = tl.zeros((BLOCK,), dtype=tl.float32)
    for first in range(0, splits, CHUNK):
        s = first + rows
        mask = (s[:, None] < splits) & ok[None, :]
        total += tl.sum(tl.load(ws_ptr + s[:, None] * plane + offs[None, :], mask=mask, other=0.0), axis=0)
    c_ptrs = c_ptr + (offs // N) * stride_cm + (offs % N) * stride_cn
    tl.store(c_ptrs, total.to(c_ptr.dtype.element_ty), mask=ok)
