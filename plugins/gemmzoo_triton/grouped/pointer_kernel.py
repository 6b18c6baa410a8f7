"""triton-grouped's kernel: Triton's matmul tutorial, with K masked and a fused activation.

A 1-D grid whose program ids are ordered in groups of GROUP_SIZE_M rows of tiles, so that the
tiles running at once share rows of A and columns of B in L2; ``triton.autotune`` picks the block
shapes per problem. Imported only when the backend runs: ``triton.jit`` reads TRITON_INTERPRET
when a kernel is decorated, and the config list depends on it.
"""

# ruff: noqa: N803, N806 - named as in the tutorial: M, N, K and upper-case constexprs

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import triton
import triton.language as tl

from gemmzoo_triton.core import autotune, triton_internals
from gemmzoo_triton.core.autotune import autotuned, launch_tuned, make_config
from gemmzoo_triton.core.env import interpreter_mode
from gemmzoo_triton.core.tile_order import tile_position

#: The tutorial's ten configs (BLOCK_SIZE_K 32).
TUTORIAL_CONFIGS = [
    make_config(128, 256, 32, 3, 8),
    make_config(256, 128, 32, 3, 8),
    make_config(256, 64, 32, 4, 4),
    make_config(64, 256, 32, 4, 4),
    make_config(128, 128, 32, 4, 4),
    make_config(128, 64, 32, 4, 4),
    make_config(64, 128, 32, 4, 4),
    make_config(128, 32, 32, 4, 4),
    make_config(64, 32, 32, 5, 2),
    make_config(32, 64, 32, 5, 2),
]

#: Configs with BLOCK_SIZE_K 64 for Hopper: deeper K tiles keep its tensor cores fed, closing most
#: of the gap the tutorial's configs leave to cuBLAS on large products
#: (docs/results/2026-11-21-h100-triton.md).
HOPPER_CONFIGS = [
    make_config(128, 256, 64, 3, 8),
    make_config(256, 128, 64, 3, 8),
    make_config(128, 128, 64, 4, 4),
    make_config(128, 256, 64, 4, 8),
    make_config(64, 256, 64, 4, 4),
    make_config(128, 128, 64, 3, 8),
]

#: Found by timing each config alone (same results file): the best configs for mid-sized
#: products, and near-ties for the best on large ones.
EXTRA_CONFIGS = [
    make_config(64, 128, 64, 4, 4),
    make_config(128, 64, 64, 4, 4),
    make_config(128, 256, 32, 4, 8),
]

#: Under the interpreter: one config, so nothing is benchmarked (it would take minutes).
INTERPRETER_CONFIGS = [make_config(64, 64, 32, 1, 4)]

@triton.jit
def leaky_relu(x):
    """max(x, 0.01 x), with NaN kept."""
    return tl.where(x >= 0, x, 0.01 * x)


@triton.jit
def relu(x):
    """max(x, 0), with NaN kept."""
    return tl.where(x < 0, 0.0, x)


@autotuned(
    configs=INTERPRETER_CONFIGS if interpreter_mode() else TUTORIAL_CONFIGS + HOPPER_CONFIGS + EXTRA_CONFIGS,
    key=["M", "N", "K", "PRECISION"],  # Triton adds the operands' dtypes to the key
)
@triton.jit
def grouped_matmul_kernel(
    a_ptr, b_ptr, c_ptr,
    M, N, K,
    stride_am, stride_ak,
    stride_bk, stride_bn,
    stride_cm, stride_cn,
    PRECISION: tl.constexpr,
    ACTIVATION: tl.constexpr,
    BLOCK_SIZE_M: tl.constexpr,
    BLOCK_SIZE_N: tl.constexpr,
    BLOCK_SIZE_K: tl.constexpr,
    GROUP_SIZE_M: tl.constexpr,
):
    """C = ACTIVATION(A @ B) for the tile of C that this program's grouped id maps to."""
    # The 1-D program id is a tile of C in grouped order, so that programs running together reuse
    # the same A rows and B columns.
    pid_m, pid_n = tile_position(tl.program_id(axis=0), tl.cdiv(M, BLOCK_SIZE_M), tl.cdiv(N, BLOCK_SIZE_N),
                                 GROUP_SIZE_M)

    # Rows and columns past M and N wrap around (modulo) to rows that exist, so their loads need
    # no mask; the store below drops them. K has no such slack: its tail is masked to zeros.
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
        accumulator = tl.dot(a, b, accumulator, input_precision=PRECISION)
        a_ptrs += BLOCK_SIZE_K * stride_ak
        b_ptrs += BLOCK_SIZE_K * stride_bk

    # The epilogue runs on the fp32 accumulator, before the one rounding to C's dtype.
    if ACTIVATION == "leaky_relu":
        accumulator = leaky_relu(accumulator)
    elif ACTIVATION == "relu":
        accumulator = relu(accumulator)
    c = accumulator.to(c_ptr.dtype.element_ty)

    offs_cm = pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)
    offs_cn = pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)
    c_ptrs = c_ptr + offs_cm[:, None] * stride_cm + offs_cn[None, :] * stride_cn
    tl.store(c_ptrs, c, mask=(offs_cm[:, None] < M) & (offs_cn[None, :] < N))


def launch(x: Any, y: Any, c: Any, precision: str, activation: str | None = None,
           mode: str = "quick") -> triton.Config:
    """Compute ``c = activation(x @ y)`` with the pointer kernel, tuned in ``mode`` (see
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
    options = {"PRECISION": precision, "ACTIVATION": activation or ""}
    return launch_tuned(grouped_matmul_kernel, grid, args, options, pointer_key(x, y, precision)[1:], mode)


def pointer_key(x: Any, y: Any, precision: str) -> tuple[Any, ...]:
    """The key :data:`PICKED` keeps the pointer kernel's config for ``x @ y`` under."""
    return ("grouped_matmul_kernel", x.shape[0], y.shape[1], x.shape[1], precision, str(x.dtype))


def picked(x: Any, y: Any, precision: str, mode: str = "quick") -> triton.Config | None:
    """The config :func:`launch` in ``mode`` launches for a problem like ``x @ y``, or None before
    it is tuned (:func:`~gemmzoo_triton.core.autotune.picked`)."""
    return autotune.picked(grouped_matmul_kernel, pointer_key(x, y, precision)[1:], mode)


def bind(
    x: Any, y: Any, precision: str, config: triton.Config, activation: str | None = None
) -> Callable[[Any, Any, Any], None]:
    """:func:`launch` with ``config``, bound for every problem like ``x @ y``: the returned
    ``run(x, y, c)`` launches the compiled kernel on operands with these shapes and strides and a
    contiguous C."""
    from gemmzoo_triton.core.launch import BoundLaunch

    M, K = x.shape
    N = y.shape[1]
    blocks = config.all_kwargs()
    tiles = triton.cdiv(M, blocks["BLOCK_SIZE_M"]) * triton.cdiv(N, blocks["BLOCK_SIZE_N"])
    options = {"PRECISION": precision, "ACTIVATION": activation or ""}
    kernel = triton_internals.jit_function(grouped_matmul_kernel)
    launch_bound = BoundLaunch(kernel, (tiles,), {**options, **blocks}, device=x.device)
    sizes = (M, N, K, x.stride(0), x.stride(1), y.stride(0), y.stride(1), N, 1)

    def run(x: Any, y: Any, c: Any) -> None:
        launch_bound(x, y, c, *sizes)

    return run
