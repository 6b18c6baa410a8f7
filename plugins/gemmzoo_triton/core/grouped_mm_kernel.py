"""The grouped class (mixture-of-experts layers) in one persistent launch over every group.

On Hopper (Triton >= 3.4) :func:`grouped_mm` takes the TMA kernel of
:mod:`~gemmzoo_triton.core.grouped_mm_tma` where descriptors can cover the operands; this pointer
kernel runs everywhere else (other GPUs, unaligned operands, Triton's interpreter).

``C[offsets[g-1]:offsets[g]] = A[offsets[g-1]:offsets[g]] @ B[g]``, as ``torch._grouped_mm`` takes
it. The launch has one program per SM (a few under the interpreter); the tiles of all groups are
numbered one after another, group by group, and program ``p`` computes tiles ``p``,
``p + programs``, ... . Each program reads the offsets on the device and walks the groups, so the
host never reads them back (no synchronisation) and empty groups cost one load. Rows of a tile
past its group's end are read from the group's first row and never stored; columns past N and
K's tail are masked to zeros.

Operands: float16, bfloat16, float32 (IEEE) or float8_e4m3fn (C in bfloat16, partial sums
promoted once per K tile as :mod:`~gemmzoo_triton.fp8.pointer_kernel` does). Under Triton's
interpreter fp8 operands are widened to float16 exactly before the dot and C is stored in
float32, rounded by torch afterwards (the interpreter truncates in ``.to``).

Imported only when the backend runs (``triton.jit`` reads TRITON_INTERPRET when it decorates).
"""

# ruff: noqa: N803, N806 - M, N, K and upper-case constexprs as in Triton's tutorials

from __future__ import annotations

from typing import Any

import triton
import triton.language as tl

from gemmzoo_triton.core.e4m3 import e4m3_to_f16_keeping_nan
from gemmzoo_triton.core.env import interpreter_mode

#: (BLOCK_SIZE_M, BLOCK_SIZE_N, BLOCK_SIZE_K, stages, warps) on a GPU, by operand size in bytes,
#: and under the interpreter.
GPU_CONFIGS = {1: (128, 128, 128, 4, 8), 2: (128, 128, 64, 4, 8), 4: (64, 64, 32, 3, 4)}
INTERPRETER_CONFIG = (16, 32, 32, 1, 4)
#: Programs of the persistent launch under the interpreter: a few, so that each walks tiles of
#: several groups as it does on a GPU.
INTERPRETER_PROGRAMS = 3


@triton.jit
def grouped_mm_kernel(
    a_ptr, b_ptr, c_ptr, offs_ptr,
    G, N, K,
    stride_am, stride_ak,
    stride_bg, stride_bk, stride_bn,
    stride_cm, stride_cn,
    NUM_PROGRAMS: tl.constexpr,
    WIDEN: tl.constexpr,
    PRECISION: tl.constexpr,
    IMPRECISE: tl.constexpr,
    BLOCK_SIZE_M: tl.constexpr,
    BLOCK_SIZE_N: tl.constexpr,
    BLOCK_SIZE_K: tl.constexpr,
):
    """This program's tiles of every group's product (see the module docstring)."""
    pid = tl.program_id(axis=0)
    tiles_n = tl.cdiv(N, BLOCK_SIZE_N)
    done = 0  # tiles of the groups before this one
    start = 0  # this group's first row
    for g in range(0, G):
        end = tl.load(offs_ptr + g).to(tl.int32)
        tiles = tl.cdiv(end - start, BLOCK_SIZE_M) * tiles_n
        first = done + (pid - done % NUM_PROGRAMS + NUM_PROGRAMS) % NUM_PROGRAMS
        for tile in range(first, done + tiles, NUM_PROGRAMS):
            local = tile - done
            offs_m = start + (local // tiles_n) * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)
            offs_n = (local % tiles_n) * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)
            rows_in = offs_m < end
            cols_in = offs_n < N
            rows = tl.where(rows_in, offs_m, start)
            offs_k = tl.arange(0, BLOCK_SIZE_K)
            a_ptrs = a_ptr + rows[:, None] * stride_am + offs_k[None, :] * stride_ak
            # B's columns are masked, not clamped: a clamped index hides that they are adjacent,
            # and B's rows would then load element by element, outside the pipeline
            b_ptrs = b_ptr + g * stride_bg + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn
            accumulator = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
            for k in range(0, tl.cdiv(K, BLOCK_SIZE_K)):
                k_left = K - k * BLOCK_SIZE_K
                a = tl.load(a_ptrs, mask=offs_k[None, :] < k_left, other=0.0)
                b = tl.load(b_ptrs, mask=(offs_k[:, None] < k_left) & cols_in[None, :], other=0.0)
                if WIDEN:
                    a = e4m3_to_f16_keeping_nan(a)
                    b = e4m3_to_f16_keeping_nan(b)
                accumulator = tl.dot(a, b, accumulator, max_num_imprecise_acc=IMPRECISE,
                                     input_precision=PRECISION)
                a_ptrs += BLOCK_SIZE_K * stride_ak
                b_ptrs += BLOCK_SIZE_K * stride_bk
            c = accumulator.to(c_ptr.dtype.element_ty)
            c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
            tl.store(c_ptrs, c, mask=rows_in[:, None] & cols_in[None, :])
        done += tiles
        start = end


def launch(a: Any, b: Any, offsets: Any, c: Any, programs: int) -> None:
    """``c``'s rows of each group = that group's rows of ``a`` (total M×K) times ``b[g]`` (K×N),
    ``offsets`` the int32 end rows on ``a``'s device, in one launch of ``programs`` programs
    (:data:`INTERPRETER_PROGRAMS` under the interpreter)."""
    import torch

    K = a.shape[1]
    G, _, N = b.shape
    interpreted = interpreter_mode()
    block_m, block_n, block_k, stages, warps = INTERPRETER_CONFIG if interpreted \
        else GPU_CONFIGS[a.element_size()]
    grouped_mm_kernel[(INTERPRETER_PROGRAMS if interpreted else programs,)](
        a, b, c, offsets,
        G, N, K,
        a.stride(0), a.stride(1),
        b.stride(0), b.stride(1), b.stride(2),
        c.stride(0), c.stride(1),
        NUM_PROGRAMS=INTERPRETER_PROGRAMS if interpreted else programs,
        WIDEN=interpreted and a.dtype == getattr(torch, "float8_e4m3fn", None),
        PRECISION="ieee" if a.dtype == torch.float32 else None,  # None: the dot's default
        # fp8: partial sums promoted to fp32 once per K tile; other dtypes: the dot's default
        IMPRECISE=block_k if a.dtype == getattr(torch, "float8_e4m3fn", None) else None,
        BLOCK_SIZE_M=block_m, BLOCK_SIZE_N=block_n, BLOCK_SIZE_K=block_k,
        num_stages=stages, num_warps=warps,
    )


def grouped_mm(backend: Any, a: Any, b: Any, offsets: Any) -> Any:
    """A backend's ``grouped_mm`` through :func:`launch`: the operands checked (errors name the
    backend and the shapes), C allocated (zeros past the last offset), offsets moved to A's
    device as int32. Rows past the last offset are left unwritten."""
    import torch

    offs = offsets if isinstance(offsets, torch.Tensor) else torch.as_tensor(offsets)
    shapes = {"A": tuple(a.shape), "B": tuple(b.shape), "offsets": tuple(offs.shape)}
    if a.dim() != 2 or b.dim() != 3:
        raise backend.input_error("grouped_mm", "A must be 2-D (total M×K) and B 3-D (G×K×N)", **shapes)
    if a.shape[1] != b.shape[1]:
        raise backend.input_error("grouped_mm", f"inner dimensions differ (A has K={a.shape[1]}, "
                                  f"B has K={b.shape[1]})", **shapes)
    if a.device.type != backend.device:
        raise backend.input_error("grouped_mm", f"A is on {a.device}, this backend runs on {backend.device}",
                                  **shapes)
    dtype = str(a.dtype).removeprefix("torch.")
    if a.dtype != b.dtype or a.device != b.device or dtype not in backend.dtypes:
        known = ", ".join(sorted(backend.dtypes))
        raise backend.input_error("grouped_mm", f"A is {a.dtype} on {a.device} and B {b.dtype} on "
                                  f"{b.device}; both must be one of {known} on one device", **shapes)
    if offs.dim() != 1 or offs.shape[0] != b.shape[0] or offs.dtype not in (torch.int32, torch.int64):
        raise backend.input_error("grouped_mm", f"offsets must be integers, one end row per group "
                                  f"({b.shape[0]}), not {offs.dtype}", **shapes)
    if offs.device.type == "cpu":
        from gemmzoo.problems.class_math import offsets_problem

        problem = offsets_problem(offs.tolist(), b.shape[0], a.shape[0])
        if problem is not None:
            raise backend.input_error("grouped_mm", problem, **shapes)
    fp8 = a.dtype == getattr(torch, "float8_e4m3fn", None)
    out = torch.bfloat16 if fp8 else a.dtype
    interpreted = interpreter_mode()
    c = torch.empty((a.shape[0], b.shape[2]), dtype=torch.float32 if interpreted and fp8 else out,
                    device=a.device)
    if b.shape[0] == 0 or c.numel() == 0:
        return c.to(out)
    if a.shape[1] == 0:  # empty sums (no descriptor covers a dimension of zero)
        return c.zero_().to(out)
    if a.is_cuda and fp8:  # Hopper's fp8 MMA takes both operands K-major, rows 16-byte aligned
        a, b = _k_major_padded(a, b)
    offs = offs.to(device=a.device, dtype=torch.int32)
    if a.is_cuda:
        from gemmzoo_triton.core import grouped_mm_tma
        from gemmzoo_triton.core.hopper import num_sms, tma_device

        if getattr(backend, "tma", True) and tma_device(a.device) and grouped_mm_tma.eligible(a, b):
            config = grouped_mm_tma.config_for(a, b, b.shape[0])
            grouped_mm_tma.launch(a, b, offs, c, config.per_sm * num_sms(a.device), config)
        else:
            launch(a, b, offs, c, num_sms(a.device))
    else:
        launch(a, b, offs, c, 1)
    return c.to(out) if c.dtype != out else c


def _k_major_padded(a: Any, b: Any) -> tuple[Any, Any]:
    """fp8 A (M×K) row-major and each B[g] column-major, K zero-padded to a multiple of 16 where
    it is not (rows that do not start 16-byte aligned cannot be loaded in vectors)."""
    import torch

    K = a.shape[1]
    k16 = -(-K // 16) * 16
    if k16 == K:
        return a.contiguous(), b.transpose(1, 2).contiguous().transpose(1, 2)
    x = torch.empty((a.shape[0], k16), dtype=a.dtype, device=a.device)
    x.view(torch.uint8)[:, K:].zero_()  # zeroed as bytes: fp8 fills are not everywhere
    x[:, :K].copy_(a)
    yt = torch.empty((b.shape[0], b.shape[2], k16), dtype=b.dtype, device=b.device)
    yt.view(torch.uint8)[:, :, K:].zero_()
    yt[:, :, :K].copy_(b.transpose(1, 2))
    return x, yt.transpose(1, 2)
