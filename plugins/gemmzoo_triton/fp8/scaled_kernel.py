"""triton-fp8's scaled products (the ``scaled`` class): FP8 E4M3 tiles with tensorwise, rowwise or
blockwise scales, fp32 accumulation, C in bfloat16, float16 or float32.

- Block-wise (DeepSeek-V3: A per 1×128 block of a row, B per 128×128 block): ``BLOCK_SIZE_K`` is
  128, so each K tile meets one column of A's scales and one row of B's; the tile's product is
  summed in a fresh fp32 partial (the tensor cores' own promotion), multiplied by its row scales
  of A and block scales of B, and added to the accumulator: the scales are applied inside the
  accumulator loop, where DeepGEMM applies them.
- Row-wise (per token × per channel) and tensor-wise: the K loop is the unscaled product (partial
  sums promoted once per K tile, as :mod:`~gemmzoo_triton.fp8.pointer_kernel` does), and the
  epilogue multiplies by A's row scales and B's column scales before the one rounding to C's
  dtype.

Under Triton's interpreter (CI) the operands are widened to float16 exactly before the dot (see
:func:`~gemmzoo_triton.core.e4m3.e4m3_to_f16_keeping_nan`) and C is stored in float32,
rounded to the output dtype by torch afterwards (the interpreter truncates in ``.to``); the loop,
the masks and the scale arithmetic are the code the GPU runs. The same kernel takes float16 and
float32 operands (``WIDEN`` off), so its structure is tested under the interpreter with plain
floats too.

Imported only when the backend runs (``triton.jit`` reads TRITON_INTERPRET when it decorates).
"""

# ruff: noqa: N803, N806 - M, N, K and upper-case constexprs as in Triton's tutorials

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import triton
import triton.language as tl

from gemmzoo_triton.core.autotune import autotuned, launch_tuned, make_config
from gemmzoo_triton.core.e4m3 import e4m3_to_f16_keeping_nan
from gemmzoo_triton.core.env import interpreter_mode
from gemmzoo_triton.core.tile_order import tile_position

#: Scaling codes of the kernel's ``SCALING``.
TENSORWISE, ROWWISE, BLOCKWISE = 0, 1, 2
_CODES = {"tensorwise": TENSORWISE, "rowwise": ROWWISE, "blockwise": BLOCKWISE}

#: The side of a scale block, and the K tile of the block-wise kernel.
SCALE_BLOCK = 128

#: Tile configs on a GPU, autotuned once per problem: every K tile is SCALE_BLOCK deep, so each
#: meets one column of A's block scales and one row of B's (and Hopper's fp8 MMA its 128-byte rows).
GPU_CONFIGS = [
    make_config(128, 256, 128, 3, 8),
    make_config(256, 128, 128, 3, 8),
    make_config(128, 128, 128, 4, 8),
    make_config(64, 128, 128, 4, 4),
]
#: Under the interpreter: one config, nothing to time.
INTERPRETER_CONFIGS = [make_config(32, 32, 128, 1, 4)]


@autotuned(configs=INTERPRETER_CONFIGS if interpreter_mode() else GPU_CONFIGS, key=["M", "N", "K", "SCALING"])
@triton.jit
def scaled_matmul_kernel(
    a_ptr, b_ptr, c_ptr, sa_ptr, sb_ptr,
    M, N, K,
    stride_am, stride_ak,
    stride_bk, stride_bn,
    stride_cm, stride_cn,
    stride_sam, stride_sak,
    stride_sbk, stride_sbn,
    SCALING: tl.constexpr,
    WIDEN: tl.constexpr,
    PRECISION: tl.constexpr,
    BLOCK_SIZE_M: tl.constexpr,
    BLOCK_SIZE_N: tl.constexpr,
    BLOCK_SIZE_K: tl.constexpr,
    GROUP_SIZE_M: tl.constexpr,
):
    """C = (A·scale_a)(B·scale_b) for the tile of C this program's grouped id maps to."""
    pid_m, pid_n = tile_position(tl.program_id(axis=0), tl.cdiv(M, BLOCK_SIZE_M), tl.cdiv(N, BLOCK_SIZE_N),
                                 GROUP_SIZE_M)
    # Rows and columns past M and N wrap to ones that exist (the store drops them); K's tail is
    # masked to zeros.
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
        if WIDEN:
            a = e4m3_to_f16_keeping_nan(a)
            b = e4m3_to_f16_keeping_nan(b)
        if SCALING == 2:  # block-wise: this K tile's partial, scaled, joins the accumulator
            partial = tl.dot(a, b, max_num_imprecise_acc=BLOCK_SIZE_K, input_precision=PRECISION)
            block = (k * BLOCK_SIZE_K) // 128
            row_scales = tl.load(sa_ptr + offs_am * stride_sam + block * stride_sak)
            col_scales = tl.load(sb_ptr + block * stride_sbk + (offs_bn // 128) * stride_sbn)
            accumulator += partial * row_scales[:, None] * col_scales[None, :]
        else:
            accumulator = tl.dot(a, b, accumulator, max_num_imprecise_acc=BLOCK_SIZE_K,
                                 input_precision=PRECISION)
        a_ptrs += BLOCK_SIZE_K * stride_ak
        b_ptrs += BLOCK_SIZE_K * stride_bk

    if SCALING == 1:  # row-wise epilogue: per-token scales of A, per-channel scales of B
        row_scales = tl.load(sa_ptr + offs_am * stride_sam)
        col_scales = tl.load(sb_ptr + offs_bn * stride_sbn)
        accumulator = accumulator * row_scales[:, None] * col_scales[None, :]
    elif SCALING == 0:
        accumulator = accumulator * (tl.load(sa_ptr) * tl.load(sb_ptr))

    c = accumulator.to(c_ptr.dtype.element_ty)
    offs_cm = pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)
    offs_cn = pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)
    c_ptrs = c_ptr + offs_cm[:, None] * stride_cm + offs_cn[None, :] * stride_cn
    tl.store(c_ptrs, c, mask=(offs_cm[:, None] < M) & (offs_cn[None, :] < N))


def _scale_views(scale_a: Any, scale_b: Any, code: int, M: int, N: int) -> tuple[Any, Any]:
    """The scales as 2-D views the kernel indexes through strides (a tensor-wise scale 1×1)."""
    if code == TENSORWISE:
        return scale_a.reshape(1, 1), scale_b.reshape(1, 1)
    return scale_a.reshape(M, -1), scale_b.reshape(-1, N if code == ROWWISE else scale_b.shape[-1])


def _options(code: int, x: Any) -> dict[str, Any]:
    """The kernel's constexprs beyond the config's, for operands like ``x``."""
    import torch

    return {
        "SCALING": code,
        "WIDEN": interpreter_mode() and x.dtype == getattr(torch, "float8_e4m3fn", None),
        "PRECISION": "ieee" if x.dtype == torch.float32 else None,  # None: the dot's default
    }


def _key(x: Any, y: Any, c: Any, code: int) -> tuple[Any, ...]:
    """The key a problem's config is kept under (:func:`~gemmzoo_triton.core.autotune.launch_tuned`)."""
    M, K = x.shape
    return (M, y.shape[1], K, code, str(x.dtype), str(c.dtype), x.stride(0) == 1, y.stride(0) == 1)


def _sizes(x: Any, y: Any, c: Any, sa: Any, sb: Any) -> tuple[int, ...]:
    """The kernel's run-time arguments after its five pointers."""
    M, K = x.shape
    return (M, y.shape[1], K, *x.stride(), *y.stride(), *c.stride(), *sa.stride(), *sb.stride())


def launch(x: Any, y: Any, scale_a: Any, scale_b: Any, scaling: str, c: Any,
           mode: str = "quick") -> triton.Config:
    """``c = (x·scale_a)(y·scale_b)``: ``x`` M×K and ``y`` K×N (fp8, or float16/float32 for
    tests), float32 scales of the shapes :func:`gemmzoo.problems.classes.scale_shapes` gives (a
    tensorwise scale as a one-element tensor), ``c`` M×N of the output dtype (float32 under the
    interpreter: see the module docstring); tuned in ``mode`` on a problem's first call
    (:mod:`~gemmzoo_triton.core.autotune`). Returns the config that ran."""
    M, N = x.shape[0], y.shape[1]
    code = _CODES[scaling]
    sa, sb = _scale_views(scale_a, scale_b, code, M, N)

    def grid(meta: dict[str, Any]) -> tuple[int]:
        return (triton.cdiv(M, meta["BLOCK_SIZE_M"]) * triton.cdiv(N, meta["BLOCK_SIZE_N"]),)

    args = (x, y, c, sa, sb, *_sizes(x, y, c, sa, sb))
    return launch_tuned(scaled_matmul_kernel, grid, args, _options(code, x), _key(x, y, c, code), mode)


def picked(x: Any, y: Any, scaling: str, c: Any, mode: str = "quick") -> triton.Config | None:
    """The config :func:`launch` in ``mode`` launches for a problem like this one, or None before it
    is tuned (:func:`~gemmzoo_triton.core.autotune.picked`)."""
    from gemmzoo_triton.core import autotune

    return autotune.picked(scaled_matmul_kernel, _key(x, y, c, _CODES[scaling]), mode)


def bind(x: Any, y: Any, scale_a: Any, scale_b: Any, scaling: str, c: Any,
         config: triton.Config) -> Callable[[Any, Any, Any, Any, Any], None]:
    """``run(x, y, scale_a, scale_b, c)``: :func:`launch` with ``config``, bound once for every
    problem like this one (shapes and strides of the operands, of C and of the scales, which must
    be contiguous): a call launches the compiled kernel, nothing else."""
    from gemmzoo_triton.core import triton_internals
    from gemmzoo_triton.core.launch import BoundLaunch

    M, N = x.shape[0], y.shape[1]
    code = _CODES[scaling]
    sa, sb = _scale_views(scale_a, scale_b, code, M, N)
    blocks = config.all_kwargs()
    tiles = triton.cdiv(M, blocks["BLOCK_SIZE_M"]) * triton.cdiv(N, blocks["BLOCK_SIZE_N"])
    launch_bound = BoundLaunch(triton_internals.jit_function(scaled_matmul_kernel), (tiles,),
                               {**_options(code, x), **blocks}, pointers=(0, 1, 2, 3, 4), device=x.device)
    sizes = _sizes(x, y, c, sa, sb)

    def run(x: Any, y: Any, scale_a: Any, scale_b: Any, c: Any) -> None:
        launch_bound(x, y, c, scale_a, scale_b, *sizes)

    return run
