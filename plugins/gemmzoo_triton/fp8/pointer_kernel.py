"""triton-fp8's kernel: float8_e4m3fn tiles, fp32 accumulation with promoted partial sums, C in bf16.

The grouped program order and the pointer loads are those of triton-grouped's kernel
(:mod:`gemmzoo_triton.grouped.pointer_kernel`); what differs is the dot. On Hopper, Triton's fp8 ``tl.dot``
by default lets the tensor cores add every product of the whole K loop into the accumulator in
their reduced-precision mode (``max_num_imprecise_acc`` defaults to 2**30 there): fast, but the
sum keeps fewer bits than fp32 and fails gemmzoo's float8_e4m3fn bound. Passing
``max_num_imprecise_acc`` makes Triton sum each run of that many products of K in a fresh
partial accumulator and add it to the fp32 accumulator with ordinary fp32 adds: the promotion of
partial sums that cuBLAS does with ``use_fast_accum=False`` and DeepGEMM does every 128. The
backend promotes once per K tile (:data:`PROMOTE_EVERY` 0): that matched the worst errors of
cuBLAS's ``_scaled_mm`` and ran faster than promoting after every 32-deep MMA instruction
(docs/results/2026-11-23-fp8.md).

Under Triton's interpreter (CI) the kernel takes an ``INTERPRETER`` branch around the dot: the
interpreter decodes the E4M3 NaN bytes as ±480 and truncates fp32 to bfloat16, so there the kernel
widens the operands to float16 itself (exactly, NaN kept) and rounds C to nearest even on the
bits. Everything else (program order, strides, masks, the K loop) is the code the GPU runs.

Imported only when the backend runs (``triton.jit`` reads TRITON_INTERPRET when it decorates).
"""

# ruff: noqa: N803, N806 - named as in the tutorial: M, N, K and upper-case constexprs

from __future__ import annotations

from typing import Any

import triton
import triton.language as tl

from gemmzoo_triton.core.autotune import autotuned, launch_tuned, make_config
from gemmzoo_triton.core.e4m3 import e4m3_to_f16_keeping_nan
from gemmzoo_triton.core.env import interpreter_mode
from gemmzoo_triton.core.tile_order import tile_position

#: Configs for Hopper's fp8 tensor cores: BLOCK_SIZE_K 128 (one 128-byte row of fp8 per stage)
#: or 64, tiles of 128x256 down to 64x64; pruned per problem by triton-grouped's rules (the smallest
#: alone for tiny problems, none taller or wider than the problem, stages within shared memory).
HOPPER_FP8_CONFIGS = [
    make_config(128, 256, 128, 3, 8),
    make_config(256, 128, 128, 3, 8),
    make_config(128, 128, 128, 4, 8),
    make_config(128, 256, 64, 4, 8),
    make_config(128, 128, 64, 4, 4),
    make_config(64, 128, 128, 4, 4),
    make_config(64, 64, 64, 4, 4),
]

#: Under the interpreter: one config, nothing to time.
INTERPRETER_CONFIGS = [make_config(32, 32, 32, 1, 4)]

#: How many products of K the tensor cores may sum in their reduced-precision mode before the
#: partial sum is added to the fp32 accumulator, by default: 0 means once per K tile
#: (BLOCK_SIZE_K products), a positive value that many (at most BLOCK_SIZE_K; 32 is one fp8 MMA
#: instruction). Triton's default on Hopper, never promoting, fails gemmzoo's bound and is not
#: offered.
PROMOTE_EVERY = 0


@triton.jit
def f32_to_bf16_nearest_even(x):
    """fp32 to bfloat16, rounded to nearest even on the bits: Triton's interpreter truncates in
    ``.to(tl.bfloat16)``. NaN stays NaN (its quiet bit survives the shift), overflow gives Inf."""
    bits = x.to(tl.uint32, bitcast=True)
    rounded = bits + 0x7FFF + ((bits >> 16) & 1)
    return (rounded >> 16).to(tl.uint16).to(tl.bfloat16, bitcast=True)


@autotuned(
    configs=INTERPRETER_CONFIGS if interpreter_mode() else HOPPER_FP8_CONFIGS,
    key=["M", "N", "K", "PROMOTE"],  # Triton adds the operands' dtypes to the key
)
@triton.jit
def fp8_matmul_kernel(
    a_ptr, b_ptr, c_ptr,
    M, N, K,
    stride_am, stride_ak,
    stride_bk, stride_bn,
    stride_cm, stride_cn,
    PROMOTE: tl.constexpr,
    INTERPRETER: tl.constexpr,
    BLOCK_SIZE_M: tl.constexpr,
    BLOCK_SIZE_N: tl.constexpr,
    BLOCK_SIZE_K: tl.constexpr,
    GROUP_SIZE_M: tl.constexpr,
):
    """C (bf16) = A @ B (fp8 E4M3) for the tile of C that this program's grouped id maps to."""
    pid_m, pid_n = tile_position(tl.program_id(axis=0), tl.cdiv(M, BLOCK_SIZE_M), tl.cdiv(N, BLOCK_SIZE_N),
                                 GROUP_SIZE_M)

    # Rows and columns past M and N wrap to rows that exist (the store drops them); K's tail is
    # masked to zeros, which add nothing (0 times a NaN of the other operand never occurs: the
    # other operand's tail is masked too).
    offs_am = (pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)) % M
    offs_bn = (pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)) % N
    offs_k = tl.arange(0, BLOCK_SIZE_K)
    a_ptrs = a_ptr + offs_am[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_bn[None, :] * stride_bn

    accumulator = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_SIZE_K)):
        k_left = K - k * BLOCK_SIZE_K
        a = tl.load(a_ptrs, mask=offs_k[None, :] < k_left, other=0.0)
        b = tl.load(b_ptrs, mask=offs_k[:, None] < k_left, other=0.0)
        if INTERPRETER:  # exact float16 operands with their NaN, the same fp32 sum
            a = e4m3_to_f16_keeping_nan(a)
            b = e4m3_to_f16_keeping_nan(b)
        if PROMOTE == 0:  # once per K tile
            accumulator = tl.dot(a, b, accumulator, max_num_imprecise_acc=BLOCK_SIZE_K)
        else:
            accumulator = tl.dot(a, b, accumulator, max_num_imprecise_acc=PROMOTE)
        a_ptrs += BLOCK_SIZE_K * stride_ak
        b_ptrs += BLOCK_SIZE_K * stride_bk

    if INTERPRETER:
        c = f32_to_bf16_nearest_even(accumulator)
    else:
        c = accumulator.to(tl.bfloat16)  # round to nearest even on the GPU
    offs_cm = pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)
    offs_cn = pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)
    c_ptrs = c_ptr + offs_cm[:, None] * stride_cm + offs_cn[None, :] * stride_cn
    tl.store(c_ptrs, c, mask=(offs_cm[:, None] < M) & (offs_cn[None, :] < N))


def launch(x: Any, y: Any, c: Any, promote: int = PROMOTE_EVERY, mode: str = "quick") -> triton.Config:
    """Compute ``c = x @ y`` (fp8 operands, bf16 ``c``), tuned in ``mode`` (see
    :mod:`~gemmzoo_triton.core.autotune`); return the config that ran."""
    M, K = x.shape
    N = y.shape[1]

    def grid(meta: dict[str, Any]) -> tuple[int]:
        return (triton.cdiv(M, meta["BLOCK_SIZE_M"]) * triton.cdiv(N, meta["BLOCK_SIZE_N"]),)

    args = (
        x, y, c,
        M, N, K,
        x.stride(0), x.stride(1),
        y.stride(0), y.stride(1),
        c.stride(0), c.stride(1),
    )
    options = {"PROMOTE": promote, "INTERPRETER": interpreter_mode()}
    return launch_tuned(fp8_matmul_kernel, grid, args, options, problem_key(x, y, promote), mode)


def problem_key(x: Any, y: Any, promote: int) -> tuple[Any, ...]:
    """The key the pointer kernel's config is kept under for ``x @ y``."""
    return (x.shape[0], y.shape[1], x.shape[1], promote, str(x.dtype))


def picked(x: Any, y: Any, promote: int, mode: str = "quick") -> triton.Config | None:
    """The config :func:`launch` in ``mode`` launches for a problem like ``x @ y``, or None before
    it is tuned (:func:`~gemmzoo_triton.core.autotune.picked`)."""
    from gemmzoo_triton.core import autotune

    return autotune.picked(fp8_matmul_kernel, problem_key(x, y, promote), mode)


def bind(x: Any, y: Any, promote: int, config: triton.Config) -> Any:
    """:func:`launch` with ``config``, bound for every problem like ``x @ y`` (shapes, strides):
    the returned ``run(x, y, c)`` launches the compiled kernel on a contiguous bf16 ``c``."""
    from gemmzoo_triton.core import triton_internals
    from gemmzoo_triton.core.launch import BoundLaunch

    M, K = x.shape
    N = y.shape[1]
    blocks = config.all_kwargs()
    tiles = triton.cdiv(M, blocks["BLOCK_SIZE_M"]) * triton.cdiv(N, blocks["BLOCK_SIZE_N"])
    options = {"PROMOTE": promote, "INTERPRETER": interpreter_mode()}
    kernel = triton_internals.jit_function(fp8_matmul_kernel)
    launch_bound = BoundLaunch(kernel, (tiles,), {**options, **blocks}, device=x.device)
    sizes = (M, N, K, x.stride(0), x.stride(1), y.stride(0), y.stride(1), N, 1)

    def run(x: Any, y: Any, c: Any) -> None:
        launch_bound(x, y, c, *sizes)

    return run
