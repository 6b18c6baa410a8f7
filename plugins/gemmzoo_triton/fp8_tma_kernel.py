"""triton-fp8's Hopper kernel: fp8 tiles fetched by the tensor memory accelerator, C stored by it.

One program per tile of C, in grouped order (:func:`gemmzoo_triton.grouped_tma_kernel.tile_position`).
A is read through a descriptor over itself (row-major, K contiguous) and B through a descriptor
over its transpose (B column-major, so Bᵀ is row-major with K contiguous): both K-major, the only
layout Hopper's fp8 MMA instructions take from shared memory. Partial sums are promoted to the
fp32 accumulator as in :mod:`gemmzoo_triton.fp8_kernel` (``PROMOTE``), and C is rounded once to
bfloat16. Tiles past a matrix's edge load as zeros and store clipped, so nothing is masked.

The backend takes this kernel where :func:`gemmzoo_triton.fp8_backend.tma_fp8_eligible` allows;
imported only then.
"""

# ruff: noqa: N803, N806 - named as in the tutorial: M, N, K and upper-case constexprs

from __future__ import annotations

from typing import Any

import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

from gemmzoo_triton.fp8_kernel import PROMOTE_EVERY
from gemmzoo_triton.grouped_kernel import _config, launch_tuned, prune_configs
from gemmzoo_triton.grouped_tma_kernel import tile_position


def set_block_shapes(nargs: dict[str, Any]) -> None:
    """Each config's ``pre_hook``: give the descriptors the block shapes of the config about to run."""
    bm, bn, bk = (nargs[f"BLOCK_SIZE_{d}"] for d in "MNK")
    nargs["a_desc"].block_shape = [bm, bk]
    nargs["b_desc"].block_shape = [bn, bk]
    nargs["c_desc"].block_shape = [bm, bn]


def _tma_config(bm: int, bn: int, bk: int, stages: int, warps: int) -> triton.Config:
    return _config(bm, bn, bk, stages, warps, pre_hook=set_block_shapes)


#: Configs for Hopper's fp8 tensor cores, BLOCK_SIZE_K 128 (a 128-byte row of each tile) or 64.
#: Three stages of a 128x256x128 pair of tiles take 144 KiB of shared memory and C's bf16 tile
#: another 64 KiB for the store: four would not fit in 227 KiB.
HOPPER_FP8_TMA_CONFIGS = [
    _tma_config(128, 256, 128, 3, 8),
    _tma_config(256, 128, 128, 3, 8),
    _tma_config(128, 128, 128, 4, 8),
    _tma_config(128, 128, 128, 4, 4),
    _tma_config(128, 256, 64, 4, 8),
    _tma_config(64, 128, 128, 4, 4),
]


@triton.autotune(
    configs=HOPPER_FP8_TMA_CONFIGS,
    key=["M", "N", "K", "PROMOTE"],
    prune_configs_by={"early_config_prune": prune_configs},
)
@triton.jit
def fp8_tma_matmul_kernel(
    a_desc, b_desc, c_desc,
    M, N, K,
    PROMOTE: tl.constexpr,
    BLOCK_SIZE_M: tl.constexpr,
    BLOCK_SIZE_N: tl.constexpr,
    BLOCK_SIZE_K: tl.constexpr,
    GROUP_SIZE_M: tl.constexpr,
):
    """C (bf16) = A @ B (fp8 E4M3) for the tile of C that this program's grouped id maps to."""
    pid_m, pid_n = tile_position(
        tl.program_id(axis=0), tl.cdiv(M, BLOCK_SIZE_M), tl.cdiv(N, BLOCK_SIZE_N), GROUP_SIZE_M
    )
    off_m, off_n = pid_m * BLOCK_SIZE_M, pid_n * BLOCK_SIZE_N
    accumulator = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
    for off_k in range(0, K, BLOCK_SIZE_K):
        a = a_desc.load([off_m, off_k])
        b = b_desc.load([off_n, off_k]).T
        if PROMOTE < 0:  # Triton's default: on Hopper, no promotion at all (measured, not used)
            accumulator = tl.dot(a, b, accumulator)
        elif PROMOTE == 0:  # once per K tile
            accumulator = tl.dot(a, b, accumulator, max_num_imprecise_acc=BLOCK_SIZE_K)
        else:
            accumulator = tl.dot(a, b, accumulator, max_num_imprecise_acc=PROMOTE)
    c_desc.store([off_m, off_n], accumulator.to(tl.bfloat16))


def _descriptor(view: Any) -> TensorDescriptor:
    """A descriptor over a row-major 2-D ``view``, its block shape set per config."""
    return TensorDescriptor(view, list(view.shape), list(view.stride()), [1, 1])


def launch(x: Any, y: Any, c: Any, promote: int = PROMOTE_EVERY) -> triton.Config:
    """Compute ``c = x @ y``: ``x`` row-major, ``y`` column-major, both fp8; ``c`` bf16, contiguous."""
    M, K = x.shape
    N = y.shape[1]
    args = (_descriptor(x), _descriptor(y.T), _descriptor(c), M, N, K)

    def grid(meta: dict[str, Any]) -> tuple[int]:
        return (triton.cdiv(M, meta["BLOCK_SIZE_M"]) * triton.cdiv(N, meta["BLOCK_SIZE_N"]),)

    return launch_tuned(fp8_tma_matmul_kernel, grid, args, {"PROMOTE": promote}, (M, N, K, promote))
