"""The grouped class on Hopper: one persistent launch over every group, tiles fetched by TMA.

``C[offsets[g-1]:offsets[g]] = A[offsets[g-1]:offsets[g]] @ B[g]``, as in
:mod:`~gemmzoo_triton.core.grouped_mm_kernel` (the pointer kernel, which every other GPU and
Triton's interpreter run). What differs:

- A is read through one 2-D descriptor over all its rows, B through a 3-D one over G×K×N (or
  over G×N×K, each B[g] column-major, ``B_T``: the K-major layout Hopper's fp8 MMA needs), so
  every load is a whole tile copied by the tensor memory accelerator into shared memory and the
  K loop is software-pipelined ``num_stages`` deep. A tile's rows past its group's end come from
  the next group (or read as zeros past A's end) and are never stored; B's tiles stop at their
  own group's K and N (the third dimension keeps the groups apart), so K's tail reads zeros.
- Tiles are numbered group after group; within a group they go in the grouped order of Triton's
  matmul tutorial (GROUP_SIZE_M rows of tiles at a time), so that tiles running together share
  A's rows and B[g]'s columns in L2. Program ``p`` computes tiles ``p``, ``p + programs``, ... of
  the whole numbering: the SMs stay busy across group boundaries, and a ragged or empty group
  costs its own tiles only. The offsets are read on the device (no host synchronisation).
- C is stored through masked pointers (a tile of a group must not write the next group's rows).

Operands: float16, bfloat16, float32 (tf32 or IEEE, ``PRECISION``) or float8_e4m3fn (C in
bfloat16, partial sums promoted to fp32 once per K tile, cuBLAS's ``use_fast_accum=False``
numerics). Runs under the interpreter too (the tests call it directly there).
"""

# ruff: noqa: N803, N806 - M, N, K and upper-case constexprs as in Triton's tutorials

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

from gemmzoo_triton.core.tile_order import tile_position


@dataclass(frozen=True)
class GroupedConfig:
    """One launch configuration: tile sides, pipeline depth, warps, programs per SM, and whether
    a tile is computed in two halves of rows (``split_m`` 2)."""

    block_m: int
    block_n: int
    block_k: int
    stages: int
    warps: int
    per_sm: int = 1
    split_m: int = 1
    group_m: int = 8

    def shared_bytes(self, element_size: int) -> int:
        """Shared memory of the pipeline's A and B tiles."""
        return self.stages * (self.block_m + self.block_n) * self.block_k * element_size

    def text(self) -> str:
        """``BMxBNxBK/sS/wW/pP[/h2]``, as :func:`parse_config` reads it."""
        return (f"{self.block_m}x{self.block_n}x{self.block_k}/s{self.stages}/w{self.warps}"
                f"/p{self.per_sm}" + ("/h2" if self.split_m == 2 else ""))


def parse_config(text: str) -> GroupedConfig:
    """A :class:`GroupedConfig` from ``BMxBNxBK/sS/wW[/pP][/h2]`` (``128x256x64/s3/w8``; ``h2``:
    in halves of rows)."""
    try:
        sides, *rest = text.split("/")
        bm, bn, bk = (int(s) for s in sides.split("x"))
        fields = {part[0]: int(part[1:]) for part in rest}
        if set(fields) - set("swph") or fields.get("h", 1) not in (1, 2):
            raise ValueError(text)
        return GroupedConfig(bm, bn, bk, fields.get("s", 3), fields.get("w", 8), fields.get("p", 1),
                             fields.get("h", 1))
    except (ValueError, IndexError, KeyError) as error:
        raise ValueError(f"grouped config {text!r}: expected BMxBNxBK/sS/wW[/pP][/h2], e.g. "
                         "128x256x64/s3/w8") from error


#: The default config by operand size in bytes (fp8, 16-bit, fp32), for large N and K: wide tiles
#: (each element loaded feeds many multiply-adds), K tiles of 128 bytes a row (the widest
#: shared-memory swizzle), as many stages as Hopper's shared memory holds beside them.
HOPPER_CONFIGS = {
    # fp8, promoted per K tile: two programs an SM, each tile in halves of rows (see
    # fp8/tma_kernel.py for why: one program's adds, the other's MMAs)
    1: GroupedConfig(128, 128, 128, 3, 4, per_sm=2, split_m=2),
    2: GroupedConfig(128, 256, 64, 3, 8),
    4: GroupedConfig(64, 64, 32, 3, 4),  # IEEE fp32 runs on the FMA units: small tiles
}
#: Where N or the rows per group are small: 128-wide tiles.
NARROW_CONFIGS = {
    1: GroupedConfig(64, 128, 128, 4, 4, per_sm=2),
    2: GroupedConfig(128, 128, 64, 4, 8),
    4: GroupedConfig(64, 64, 32, 3, 4),
}
#: Under the interpreter: small tiles and groups of two rows of tiles, so that test problems span
#: several tiles, groups and programs.
INTERPRETER_CONFIG = GroupedConfig(16, 32, 16, 1, 4, per_sm=1, group_m=2)
#: The same in halves of rows.
INTERPRETER_SPLIT_CONFIG = GroupedConfig(32, 32, 16, 1, 4, per_sm=1, split_m=2, group_m=2)
#: Programs of the persistent launch under the interpreter.
INTERPRETER_PROGRAMS = 3


@triton.jit
def _accumulate(accumulator, a, b, FP8: tl.constexpr, PRECISION: tl.constexpr):
    """``accumulator + a @ b``; for fp8, the K tile summed from zero by the tensor cores, then
    added in fp32 (cuBLAS's ``use_fast_accum=False`` numerics)."""
    if FP8:
        return accumulator + tl.dot(a, b)
    else:
        return tl.dot(a, b, accumulator, input_precision=PRECISION)


@triton.jit
def _store_rows(c_ptr, accumulator, off_m, off_n, end, N, stride_cm):
    """The tile's rows of its group (before ``end``) and columns before N, rounded to C's dtype."""
    rows = off_m + tl.arange(0, accumulator.shape[0])
    cols = off_n + tl.arange(0, accumulator.shape[1])
    c_ptrs = c_ptr + rows[:, None] * stride_cm + cols[None, :]
    tl.store(c_ptrs, accumulator.to(c_ptr.dtype.element_ty), mask=(rows[:, None] < end) & (cols[None, :] < N))


@triton.jit
def grouped_mm_tma_kernel(
    a_desc, b_desc, c_ptr, offs_ptr,
    G, N, K, stride_cm,
    B_T: tl.constexpr,
    PRECISION: tl.constexpr,
    FP8: tl.constexpr,
    BLOCK_SIZE_M: tl.constexpr,
    BLOCK_SIZE_N: tl.constexpr,
    BLOCK_SIZE_K: tl.constexpr,
    GROUP_SIZE_M: tl.constexpr,
    SPLIT_M: tl.constexpr,
):
    """This program's tiles of every group's product (see the module docstring); with SPLIT_M 2
    each tile as two halves of rows sharing B's tile."""
    PART_M: tl.constexpr = BLOCK_SIZE_M // SPLIT_M
    pid = tl.program_id(axis=0)
    programs = tl.num_programs(axis=0)
    tiles_n = tl.cdiv(N, BLOCK_SIZE_N)
    done = 0  # tiles of the groups before this one
    start = 0  # this group's first row
    for g in range(0, G):
        end = tl.load(offs_ptr + g)
        tiles_m = tl.cdiv(end - start, BLOCK_SIZE_M)
        # this program's first tile of the group: the first number >= done that is pid modulo programs
        own = done + (pid - done % programs + programs) % programs
        for tile in range(own, done + tiles_m * tiles_n, programs):
            pid_m, pid_n = tile_position(tile - done, tiles_m, tiles_n, GROUP_SIZE_M)
            off_m = start + pid_m * BLOCK_SIZE_M
            off_n = pid_n * BLOCK_SIZE_N
            first = tl.zeros((PART_M, BLOCK_SIZE_N), dtype=tl.float32)
            second = tl.zeros((PART_M, BLOCK_SIZE_N), dtype=tl.float32)
            for off_k in range(0, K, BLOCK_SIZE_K):
                if B_T:
                    b = b_desc.load([g, off_n, off_k]).reshape(BLOCK_SIZE_N, BLOCK_SIZE_K).T
                else:
                    b = b_desc.load([g, off_k, off_n]).reshape(BLOCK_SIZE_K, BLOCK_SIZE_N)
                first = _accumulate(first, a_desc.load([off_m, off_k]), b, FP8, PRECISION)
                if SPLIT_M == 2:
                    second = _accumulate(second, a_desc.load([off_m + PART_M, off_k]), b, FP8, PRECISION)
            _store_rows(c_ptr, first, off_m, off_n, end, N, stride_cm)
            if SPLIT_M == 2:
                _store_rows(c_ptr, second, off_m + PART_M, off_n, end, N, stride_cm)
        done += tiles_m * tiles_n
        start = end


def b_transposed(b: Any) -> bool:
    """Whether B (G×K×N) is read through its transpose: each B[g] column-major (K contiguous)."""
    return b.stride(1) == 1 and b.stride(2) != 1


def eligible(a: Any, b: Any) -> bool:
    """Whether descriptors can cover A (row-major) and B (each B[g] row- or column-major): unit
    inner strides, other strides and both starts 16-byte aligned."""
    size = a.element_size()
    if a.stride(1) != 1 or (a.stride(0) * size) % 16 or a.data_ptr() % 16 or b.data_ptr() % 16:
        return False
    outer, inner = (b.stride(2), b.stride(1)) if b_transposed(b) else (b.stride(1), b.stride(2))
    return inner == 1 and not (outer * size) % 16 and not (b.stride(0) * size) % 16


def config_for(a: Any, b: Any, groups: int) -> GroupedConfig:
    """The default config for A (total M×K) and B (G×K×N): :data:`HOPPER_CONFIGS`, or
    :data:`NARROW_CONFIGS` where N is under 256 or groups average under 256 rows."""
    size = a.element_size()
    narrow = b.shape[2] < 256 or a.shape[0] < 256 * max(groups, 1)
    return (NARROW_CONFIGS if narrow else HOPPER_CONFIGS)[size]


def launch(a: Any, b: Any, offsets: Any, c: Any, programs: int, config: GroupedConfig,
           promoted: bool | None = None) -> None:
    """``c``'s rows of each group = that group's rows of ``a`` (total M×K, row-major) times
    ``b[g]`` (K×N, row- or column-major; see :func:`eligible`), ``offsets`` the int32 end rows on
    ``a``'s device, in one launch of ``programs`` programs. ``promoted``: each K tile summed from
    zero and added in fp32 (default: for fp8 only; the tests ask for it on plain floats)."""
    import torch

    K = a.shape[1]
    G, _, N = b.shape
    bm, bn, bk = config.block_m, config.block_n, config.block_k
    b_t = b_transposed(b)
    a_desc = TensorDescriptor(a, list(a.shape), [a.stride(0), 1], [bm // config.split_m, bk])
    if b_t:
        view = b.transpose(1, 2)
        b_desc = TensorDescriptor(view, [G, N, K], [view.stride(0), view.stride(1), 1], [1, bn, bk])
    else:
        b_desc = TensorDescriptor(b, [G, K, N], [b.stride(0), b.stride(1), 1], [1, bk, bn])
    fp8 = a.dtype == getattr(torch, "float8_e4m3fn", None) if promoted is None else promoted
    grouped_mm_tma_kernel[(programs,)](
        a_desc, b_desc, c, offsets,
        G, N, K, c.stride(0),
        B_T=b_t,
        PRECISION="ieee" if a.dtype == torch.float32 else None,  # None: the dot's default
        FP8=fp8,
        BLOCK_SIZE_M=bm, BLOCK_SIZE_N=bn, BLOCK_SIZE_K=bk, GROUP_SIZE_M=config.group_m,
        SPLIT_M=config.split_m, num_stages=config.stages, num_warps=config.warps,
    )
