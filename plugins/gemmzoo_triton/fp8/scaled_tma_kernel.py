"""triton-fp8's scaled products on Hopper: persistent, TMA loads and stores, scales on the way.

The schedule of :mod:`~gemmzoo_triton.fp8.tma_kernel` (which see for why): programs
(``PROGRAMS_PER_SM`` per SM) walk C's tiles in grouped order with the tile loop and the K loop
pipelined as one (``FLATTEN``); A is read through a descriptor over itself and B through one over
Bᵀ (both K-major, as Hopper's fp8 MMA wants them); each 128-deep K tile is summed by the tensor
cores from zero and added to the fp32 accumulator (cuBLAS's ``use_fast_accum=False`` numerics);
``SPLIT_M`` 2 computes a tile as two halves of rows sharing B's tile, so that a half's fresh
partial sums and its accumulator fit in registers. The scales:

- block-wise (1×128 blocks of A, 128×128 of B): BLOCK_SIZE_K and BLOCK_SIZE_N are 128, so a K
  tile of a tile of C meets one column of A's scales (one per row) and one scale of B; the tile's
  partial sums are multiplied by them before they join the accumulator. A's scales come
  transposed (``(K/128)×M``, :func:`launch` copies them so), so each K tile reads them contiguously;
- row-wise and tensor-wise: in the epilogue, before the one rounding to C's dtype.

C (bfloat16, float16 or float32) is stored by the TMA, which clips the edges. Under Triton's
interpreter the kernel runs on float16 and float32 operands (the tests: the interpreter's fp8 dot
is wrong), with the same loops, descriptors and scale arithmetic. Imported only where
:func:`gemmzoo_triton.fp8.backend.scaled_tma_eligible` sends a problem.
"""

# ruff: noqa: N803, N806 - M, N, K and upper-case constexprs as in Triton's tutorials

from __future__ import annotations

from typing import Any

import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

from gemmzoo_triton.core.autotune import autotuned, launch_tuned, make_config
from gemmzoo_triton.core.env import interpreter_mode
from gemmzoo_triton.core.tile_order import tile_position
from gemmzoo_triton.fp8.tma_kernel import grid_for

#: Scaling codes of the kernel's ``SCALING`` (those of :mod:`~gemmzoo_triton.fp8.scaled_kernel`).
TENSORWISE, ROWWISE, BLOCKWISE = 0, 1, 2


def set_block_shapes(nargs: dict[str, Any]) -> None:
    """Each config's ``pre_hook``: the descriptors' block shapes for the config about to run."""
    bm, bn, bk = (nargs[f"BLOCK_SIZE_{d}"] for d in "MNK")
    part_m = bm // nargs["SPLIT_M"]
    nargs["a_desc"].block_shape = [part_m, bk]
    nargs["b_desc"].block_shape = [bn, bk]
    nargs["c_desc"].block_shape = [part_m, bn]


def scaled_config(bm: int, stages: int, warps: int, split_m: int = 1, per_sm: int = 1,
                  bn: int = 128, bk: int = 128) -> triton.Config:
    """A config: BMx``bn``x``bk`` tiles (128x128 for block-wise scales), halves of M or not,
    programs per SM."""
    config = make_config(bm, bn, bk, stages, warps, pre_hook=set_block_shapes)
    config.kwargs.update({"SPLIT_M": split_m, "FLATTEN": True, "PROGRAMS_PER_SM": per_sm})
    return config


#: On Hopper: two programs per SM of 128x128 tiles in halves of M (the promoted unscaled kernel's
#: fastest), one of 256x128 in halves, 128x128 whole in 8 warps, 64x128 for narrow problems.
HOPPER_CONFIGS = [
    scaled_config(128, 3, 4, split_m=2, per_sm=2),
    scaled_config(256, 3, 8, split_m=2),
    scaled_config(128, 4, 8),
    scaled_config(64, 4, 4, per_sm=2),
]
#: Under the interpreter: small tiles (the K tile stays one scale block deep), several programs.
INTERPRETER_CONFIGS = [scaled_config(32, 1, 4, split_m=2, per_sm=1, bn=128, bk=128)]


@triton.jit
def block_scaled(partial, sa_ptr, sb_ptr, off_m, off_n, off_k, M, stride_sak, stride_sam,
                 stride_sbk, stride_sbn, ROWS: tl.constexpr):
    """A K tile's partial sums times its A scales (one per row) and its B scale."""
    rows = off_m + tl.arange(0, ROWS)
    block = off_k // 128
    row_scales = tl.load(sa_ptr + block * stride_sak + rows * stride_sam, mask=rows < M, other=0.0)
    col_scale = tl.load(sb_ptr + block * stride_sbk + (off_n // 128) * stride_sbn)
    return partial * (row_scales[:, None] * col_scale)


@triton.jit
def epilogue_scaled(accumulator, sa_ptr, sb_ptr, off_m, off_n, M, N, stride_sam, stride_sbn,
                    SCALING: tl.constexpr, ROWS: tl.constexpr, COLS: tl.constexpr):
    """The accumulator times the row-wise or tensor-wise scales (block-wise: as it is)."""
    if SCALING == 1:
        rows = off_m + tl.arange(0, ROWS)
        cols = off_n + tl.arange(0, COLS)
        row_scales = tl.load(sa_ptr + rows * stride_sam, mask=rows < M, other=0.0)
        col_scales = tl.load(sb_ptr + cols * stride_sbn, mask=cols < N, other=0.0)
        accumulator = accumulator * row_scales[:, None] * col_scales[None, :]
    elif SCALING == 0:
        accumulator = accumulator * (tl.load(sa_ptr) * tl.load(sb_ptr))
    return accumulator


@autotuned(configs=INTERPRETER_CONFIGS if interpreter_mode() else HOPPER_CONFIGS,
           key=["M", "N", "K", "SCALING", "DTYPE"])
@triton.jit
def scaled_tma_kernel(
    a_desc, b_desc, c_desc, sa_ptr, sb_ptr,
    M, N, K,
    stride_sam, stride_sak, stride_sbk, stride_sbn,
    SCALING: tl.constexpr,
    DTYPE: tl.constexpr,
    BLOCK_SIZE_M: tl.constexpr,
    BLOCK_SIZE_N: tl.constexpr,
    BLOCK_SIZE_K: tl.constexpr,
    GROUP_SIZE_M: tl.constexpr,
    SPLIT_M: tl.constexpr,
    FLATTEN: tl.constexpr,
    PROGRAMS_PER_SM: tl.constexpr,
):
    """C = (A·scale_a)(B·scale_b) for tiles ``program_id, program_id + num_programs, ...`` of C.
    DTYPE: the operands' (a tuning key; descriptors have none for the autotuner)."""
    PART_M: tl.constexpr = BLOCK_SIZE_M // SPLIT_M
    num_pid_m = tl.cdiv(M, BLOCK_SIZE_M)
    num_pid_n = tl.cdiv(N, BLOCK_SIZE_N)
    programs = tl.num_programs(axis=0)
    # the epilogue finds its tile from a counter of its own (see tma_kernel)
    epilogue_tile = tl.program_id(axis=0) - programs
    for tile_id in tl.range(tl.program_id(axis=0), num_pid_m * num_pid_n, programs, flatten=FLATTEN):
        pid_m, pid_n = tile_position(tile_id, num_pid_m, num_pid_n, GROUP_SIZE_M)
        off_m, off_n = pid_m * BLOCK_SIZE_M, pid_n * BLOCK_SIZE_N
        first = tl.zeros((PART_M, BLOCK_SIZE_N), dtype=tl.float32)
        second = tl.zeros((PART_M, BLOCK_SIZE_N), dtype=tl.float32)
        for off_k in range(0, K, BLOCK_SIZE_K):
            a = a_desc.load([off_m, off_k])
            b = b_desc.load([off_n, off_k]).T
            partial = tl.dot(a, b)
            if SCALING == 2:
                partial = block_scaled(partial, sa_ptr, sb_ptr, off_m, off_n, off_k, M, stride_sak,
                                       stride_sam, stride_sbk, stride_sbn, PART_M)
            first += partial
            if SPLIT_M == 2:
                partial = tl.dot(a_desc.load([off_m + PART_M, off_k]), b)
                if SCALING == 2:
                    partial = block_scaled(partial, sa_ptr, sb_ptr, off_m + PART_M, off_n, off_k, M,
                                           stride_sak, stride_sam, stride_sbk, stride_sbn, PART_M)
                second += partial
        epilogue_tile += programs
        pid_m, pid_n = tile_position(epilogue_tile, num_pid_m, num_pid_n, GROUP_SIZE_M)
        off_m, off_n = pid_m * BLOCK_SIZE_M, pid_n * BLOCK_SIZE_N
        first = epilogue_scaled(first, sa_ptr, sb_ptr, off_m, off_n, M, N, stride_sam, stride_sbn,
                                SCALING, PART_M, BLOCK_SIZE_N)
        c_desc.store([off_m, off_n], first.to(c_desc.dtype))
        if SPLIT_M == 2:
            second = epilogue_scaled(second, sa_ptr, sb_ptr, off_m + PART_M, off_n, M, N, stride_sam,
                                     stride_sbn, SCALING, PART_M, BLOCK_SIZE_N)
            c_desc.store([off_m + PART_M, off_n], second.to(c_desc.dtype))


def _descriptor(view: Any) -> TensorDescriptor:
    """A descriptor over a row-major 2-D ``view``, its block shape set per config."""
    return TensorDescriptor(view, list(view.shape), [view.stride(0), 1], [1, 1])


def _arguments(x: Any, y: Any, scale_a: Any, scale_b: Any, scaling: str, c: Any) -> tuple[tuple, dict]:
    """The kernel's run-time arguments and its constexprs beyond the config's."""
    M, K = x.shape
    N = y.shape[1]
    code = {"tensorwise": TENSORWISE, "rowwise": ROWWISE, "blockwise": BLOCKWISE}[scaling]
    if code == BLOCKWISE:
        sa = scale_a.reshape(M, -1).t().contiguous()  # (K/128) x M: a K tile's scales side by side
        sb = scale_b.reshape(-1, scale_b.shape[-1])
        strides = (sa.stride(1), sa.stride(0), sb.stride(0), sb.stride(1))
    elif code == ROWWISE:
        sa, sb = scale_a.reshape(M), scale_b.reshape(N)
        strides = (sa.stride(0), 0, 0, sb.stride(0))
    else:
        sa, sb = scale_a.reshape(1), scale_b.reshape(1)
        strides = (0, 0, 0, 0)
    args = (_descriptor(x), _descriptor(y.T), _descriptor(c), sa, sb, M, N, K, *strides)
    return args, {"SCALING": code, "DTYPE": str(x.dtype)}


def launch(x: Any, y: Any, scale_a: Any, scale_b: Any, scaling: str, c: Any, sms: int,
           mode: str = "quick") -> triton.Config:
    """``c = (x·scale_a)(y·scale_b)``: ``x`` M×K row-major, ``y`` K×N column-major (fp8; float16
    or float32 in tests), K a multiple of 16 (16-byte rows), float32 scales shaped as
    :func:`gemmzoo.problems.classes.scale_shapes` says, ``c`` M×N contiguous with 16-byte rows; tuned in
    ``mode`` on a problem's first call. Returns the config that ran."""
    M, K = x.shape
    N = y.shape[1]
    args, options = _arguments(x, y, scale_a, scale_b, scaling, c)
    key = (M, N, K, options["SCALING"], str(x.dtype), str(c.dtype), sms)
    return launch_tuned(scaled_tma_kernel, grid_for(M, N, sms), args, options, key, mode)


def launch_config(x: Any, y: Any, scale_a: Any, scale_b: Any, scaling: str, c: Any, sms: int,
                  config: triton.Config) -> None:
    """:func:`launch` with ``config``, untuned (for sweeps of the configs)."""
    from gemmzoo_triton.core import triton_internals

    args, options = _arguments(x, y, scale_a, scale_b, scaling, c)
    kernel = triton_internals.jit_function(scaled_tma_kernel)
    blocks = config.all_kwargs()
    config.pre_hook({**dict(zip(triton_internals.argument_names(scaled_tma_kernel), args, strict=False)),
                     **options, **blocks})
    kernel[grid_for(x.shape[0], y.shape[1], sms)(blocks)](*args, **options, **blocks)


def config_text(config: triton.Config) -> str:
    """``BMxBNxBK/sS/wW/pP``, ``/halves`` where a tile is computed in halves of M."""
    kw = config.all_kwargs()
    text = (f"{kw['BLOCK_SIZE_M']}x{kw['BLOCK_SIZE_N']}x{kw['BLOCK_SIZE_K']}/s{kw['num_stages']}"
            f"/w{kw['num_warps']}/p{kw['PROGRAMS_PER_SM']}")
    return text + ("/halves" if kw["SPLIT_M"] == 2 else "")
