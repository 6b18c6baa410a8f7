"""triton-grouped's TMA kernels: tiles of A and B fetched by Hopper's tensor memory accelerator.

The operands come as host-side tensor descriptors instead of pointers; the TMA unit copies whole
tiles into shared memory, fills the parts past a matrix's edge with zeros and clips stores at
C's edge, so nothing is masked. Two kernels, both in grouped_kernel's tile order and with its
epilogue and config pruning:

- ``tma_matmul_kernel``: one program per tile of C;
- ``tma_persistent_matmul_kernel``: one program per SM (fewer for small problems), each looping
  over tiles, so that the loads of a program's next tile overlap the epilogue of its last.

A column-major operand is read through a descriptor over its transpose, which is row-major, and
its tiles are transposed in the kernel (the ``A_T`` and ``B_T`` flags). C is stored through a
descriptor, or through masked pointers (``C_PTR``) when its rows are not 16-byte aligned. Which
problems run here, on the operands as they are or on aligned copies, is
:func:`gemmzoo_triton.grouped_plan.route`'s decision. Imported only when the backend takes this
path, like grouped_kernel (and for the same reason).
"""

# ruff: noqa: N803, N806 - named as in the tutorial: M, N, K and upper-case constexprs

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

from gemmzoo_triton.common import column_major, interpreter_mode
from gemmzoo_triton.grouped_kernel import (
    PICKED,
    _autotune_options,
    _config,
    launch_tuned,
    leaky_relu,
    prune_configs,
    relu,
    tile_position,
)
from gemmzoo_triton.launcher import BoundLaunch

#: The kernel the backend launches: "tiles" (one program per tile) or "persistent". A module
#: setting, so that benchmarks can switch it. "tiles" because on the H100 the two ran within
#: the rounds' noise of each other at 2048^3 to 8192^3, while the persistent kernel's launch
#: took ~36 us more host time (86 against 50 us), enough to leave the GPU waiting for the host
#: at 2048^3 (docs/results/2026-11-21-h100-triton.md).
VARIANT = "tiles"
VARIANTS = ("persistent", "tiles")

#: When set, a prepared plan binds the persistent kernel, with the config tuned for the
#: one-tile-per-program kernel, where C has at least this many tiles per SM. Each kernel tuned on
#: its own, the persistent one was ahead on the H100 from about two waves of tiles (3072^3 fp16:
#: 0.82x cuBLAS against 0.78x, 1024x14336x4096: 0.94x against 0.90x) and behind at 1.2 waves
#: (2176^3: 0.76x against 0.86x). Off (None) until the persistent kernel has been timed and
#: checked on the GPU with the configs tuned for the other (a config may need more resources
#: in the persistent loop).
PERSISTENT_MIN_WAVES: float | None = None


def set_block_shapes(nargs: dict[str, Any]) -> None:
    """Give the descriptors the block shapes of the config about to run.

    ``nargs`` maps the kernel's argument names, the config's included, to their values. Each
    config's ``pre_hook``: the descriptors are made once per call, before a config is chosen.
    """
    bm, bn, bk = (nargs[f"BLOCK_SIZE_{d}"] for d in "MNK")
    nargs["a_desc"].block_shape = [bk, bm] if nargs["A_T"] else [bm, bk]
    nargs["b_desc"].block_shape = [bn, bk] if nargs["B_T"] else [bk, bn]
    if not nargs["C_PTR"]:
        nargs["c_desc"].block_shape = [bm, bn]


def _tma_config(bm: int, bn: int, bk: int, stages: int, warps: int, group: int = 8) -> triton.Config:
    return _config(bm, bn, bk, stages, warps, group, pre_hook=set_block_shapes)


#: For Hopper: 16-bit types, and float32 in tf32 (the last two); prune_configs drops the ones
#: whose pipelines overflow shared memory for wider types. 64x64x64 fits every case, and is the
#: pick for small problems.
HOPPER_CONFIGS = [
    _tma_config(128, 256, 64, 3, 8),
    _tma_config(128, 256, 64, 4, 8),
    _tma_config(256, 128, 64, 3, 8),
    _tma_config(128, 128, 64, 4, 4),
    _tma_config(128, 128, 64, 4, 8),
    _tma_config(128, 128, 64, 3, 8),
    _tma_config(64, 256, 64, 4, 4),
    _tma_config(128, 256, 32, 4, 8),
    _tma_config(128, 64, 64, 4, 4),
    _tma_config(64, 128, 64, 4, 4),
    _tma_config(64, 64, 64, 4, 4),
    # float32 (tf32): K tiles of 32 keep three or four stages within shared memory
    _tma_config(128, 128, 32, 3, 4),
    _tma_config(128, 128, 32, 4, 8),
]

#: Under the interpreter: one config, so nothing is timed; small tiles and groups of two rows of
#: tiles, so that small test problems still span several tiles and groups.
INTERPRETER_CONFIGS = [_tma_config(16, 32, 16, 1, 4, group=2)]

_CONFIGS = INTERPRETER_CONFIGS if interpreter_mode() else HOPPER_CONFIGS

# Descriptors have no ``dtype`` for the autotuner to add to its key, hence DTYPE.
_KEY = ["M", "N", "K", "PRECISION", "A_T", "B_T", "DTYPE", "C_PTR"]

#: The autotuning both TMA kernels get (each its own autotuner, with the same configs and key).
_autotuned = triton.autotune(
    configs=_CONFIGS,
    key=_KEY,
    prune_configs_by={"early_config_prune": prune_configs},
    **_autotune_options(),
)


@triton.jit
def tile_product(
    a_desc, b_desc, off_m, off_n, K,
    PRECISION: tl.constexpr, A_T: tl.constexpr, B_T: tl.constexpr,
    BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr, BLOCK_SIZE_K: tl.constexpr,
):
    """A[off_m:off_m + BLOCK_SIZE_M, :] @ B[:, off_n:off_n + BLOCK_SIZE_N] in fp32."""
    accumulator = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
    for off_k in range(0, K, BLOCK_SIZE_K):
        if A_T:
            a = a_desc.load([off_k, off_m]).T
        else:
            a = a_desc.load([off_m, off_k])
        if B_T:
            b = b_desc.load([off_n, off_k]).T
        else:
            b = b_desc.load([off_k, off_n])
        accumulator = tl.dot(a, b, accumulator, input_precision=PRECISION)
    return accumulator


@triton.jit
def store_tile(
    c_desc, accumulator, off_m, off_n, M, N, stride_cm,
    ACTIVATION: tl.constexpr, C_PTR: tl.constexpr,
    BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr,
):
    """The epilogue: the activation on the fp32 accumulator, one rounding to C's dtype, the store.

    With ``C_PTR``, ``c_desc`` is C itself (rows ``stride_cm`` elements apart, columns adjacent)
    and the tile is stored through masked pointers: for a C whose rows are not 16-byte aligned,
    which no descriptor can cover.
    """
    if ACTIVATION == "leaky_relu":
        accumulator = leaky_relu(accumulator)
    elif ACTIVATION == "relu":
        accumulator = relu(accumulator)
    if C_PTR:
        rows = off_m + tl.arange(0, BLOCK_SIZE_M)
        cols = off_n + tl.arange(0, BLOCK_SIZE_N)
        pointers = c_desc + rows[:, None] * stride_cm + cols[None, :]
        mask = (rows[:, None] < M) & (cols[None, :] < N)
        tl.store(pointers, accumulator.to(c_desc.dtype.element_ty), mask=mask)
    else:
        c_desc.store([off_m, off_n], accumulator.to(c_desc.dtype))


@_autotuned
@triton.jit
def tma_matmul_kernel(
    a_desc, b_desc, c_desc,
    M, N, K, stride_cm,
    PRECISION: tl.constexpr,
    ACTIVATION: tl.constexpr,
    A_T: tl.constexpr,
    B_T: tl.constexpr,
    DTYPE: tl.constexpr,
    C_PTR: tl.constexpr,
    BLOCK_SIZE_M: tl.constexpr,
    BLOCK_SIZE_N: tl.constexpr,
    BLOCK_SIZE_K: tl.constexpr,
    GROUP_SIZE_M: tl.constexpr,
):
    """C = ACTIVATION(A @ B) for the tile of C that this program's grouped id maps to."""
    pid_m, pid_n = tile_position(
        tl.program_id(axis=0), tl.cdiv(M, BLOCK_SIZE_M), tl.cdiv(N, BLOCK_SIZE_N), GROUP_SIZE_M
    )
    off_m, off_n = pid_m * BLOCK_SIZE_M, pid_n * BLOCK_SIZE_N
    accumulator = tile_product(
        a_desc, b_desc, off_m, off_n, K, PRECISION, A_T, B_T, BLOCK_SIZE_M, BLOCK_SIZE_N, BLOCK_SIZE_K
    )
    store_tile(
        c_desc, accumulator, off_m, off_n, M, N, stride_cm, ACTIVATION, C_PTR, BLOCK_SIZE_M, BLOCK_SIZE_N
    )


@_autotuned
@triton.jit
def tma_persistent_matmul_kernel(
    a_desc, b_desc, c_desc,
    M, N, K, stride_cm,
    PRECISION: tl.constexpr,
    ACTIVATION: tl.constexpr,
    A_T: tl.constexpr,
    B_T: tl.constexpr,
    DTYPE: tl.constexpr,
    C_PTR: tl.constexpr,
    NUM_SMS: tl.constexpr,
    BLOCK_SIZE_M: tl.constexpr,
    BLOCK_SIZE_N: tl.constexpr,
    BLOCK_SIZE_K: tl.constexpr,
    GROUP_SIZE_M: tl.constexpr,
):
    """C = ACTIVATION(A @ B) for tiles ``program_id, program_id + NUM_SMS, ...`` of C."""
    num_pid_m = tl.cdiv(M, BLOCK_SIZE_M)
    num_pid_n = tl.cdiv(N, BLOCK_SIZE_N)
    # The epilogue finds its tile from a counter of its own, as Triton's persistent tutorial
    # does: a value used both before the K loop and in the epilogue trips up the software
    # pipelining of the flattened loop on some targets.
    epilogue_tile = tl.program_id(axis=0) - NUM_SMS
    # flatten=True merges the K loop into this one, so that the pipeline runs on across tiles.
    for tile_id in tl.range(tl.program_id(axis=0), num_pid_m * num_pid_n, NUM_SMS, flatten=True):
        pid_m, pid_n = tile_position(tile_id, num_pid_m, num_pid_n, GROUP_SIZE_M)
        accumulator = tile_product(
            a_desc, b_desc, pid_m * BLOCK_SIZE_M, pid_n * BLOCK_SIZE_N, K,
            PRECISION, A_T, B_T, BLOCK_SIZE_M, BLOCK_SIZE_N, BLOCK_SIZE_K,
        )
        epilogue_tile += NUM_SMS
        pid_m, pid_n = tile_position(epilogue_tile, num_pid_m, num_pid_n, GROUP_SIZE_M)
        store_tile(
            c_desc, accumulator, pid_m * BLOCK_SIZE_M, pid_n * BLOCK_SIZE_N, M, N, stride_cm,
            ACTIVATION, C_PTR, BLOCK_SIZE_M, BLOCK_SIZE_N,
        )


@functools.cache
def num_sms(device: Any) -> int:
    """The number of SMs of a CUDA ``device``: the persistent kernel's program count."""
    import torch

    return torch.cuda.get_device_properties(device).multi_processor_count


def _descriptor(tensor: Any, transposed: bool, block_shape: list[int] | None = None) -> TensorDescriptor:
    """A descriptor over ``tensor`` (its transpose when ``transposed``); without ``block_shape``
    its block shape is a placeholder until :func:`set_block_shapes` runs."""
    view = tensor.T if transposed else tensor
    return TensorDescriptor(view, list(view.shape), list(view.stride()), block_shape or [1, 1])


def c_needs_pointers(c: Any) -> bool:
    """Whether C must be stored through pointers: its rows or start are not 16-byte aligned."""
    return (c.stride(0) * c.element_size()) % 16 != 0 or c.data_ptr() % 16 != 0


def _problem(
    x: Any, y: Any, c: Any, precision: str, activation: str | None, variant: str | None, sms: int | None
) -> tuple[Any, dict[str, Any], tuple[Any, ...], Any]:
    """The kernel, its options, its tuning key and its grid (a function of the config)."""
    variant = VARIANT if variant is None else variant
    if variant not in VARIANTS:
        raise ValueError(f"unknown TMA kernel variant {variant!r}; known: {', '.join(VARIANTS)}")
    M, K = x.shape
    N = y.shape[1]
    a_t, b_t, c_ptr = column_major(x), column_major(y), c_needs_pointers(c)
    options = {
        "PRECISION": precision, "ACTIVATION": activation or "", "A_T": a_t, "B_T": b_t, "DTYPE": str(x.dtype),
        "C_PTR": c_ptr,
    }
    key = (M, N, K, precision, str(x.dtype), a_t, b_t, c_ptr)

    def tiles(meta: dict[str, Any]) -> int:
        return triton.cdiv(M, meta["BLOCK_SIZE_M"]) * triton.cdiv(N, meta["BLOCK_SIZE_N"])

    if variant == "tiles":
        return tma_matmul_kernel, options, key, lambda meta: (tiles(meta),)
    programs = num_sms(x.device) if sms is None else sms
    options["NUM_SMS"] = programs
    return tma_persistent_matmul_kernel, options, key, lambda meta: (min(programs, tiles(meta)),)


def launch(
    x: Any, y: Any, c: Any, precision: str, activation: str | None = None,
    variant: str | None = None, sms: int | None = None,
) -> triton.Config:
    """Compute ``c = activation(x @ y)`` with a TMA kernel; return the config that ran.

    The operands must pass :func:`gemmzoo_triton.common.tma_eligible`'s rules for A and B (its
    device rule aside: under the interpreter this runs on CPU tensors); C must be contiguous in
    its columns, and is stored through pointers when its rows are not 16-byte aligned.
    ``variant`` defaults to :data:`VARIANT`; ``sms``, the persistent kernel's program count, to
    ``x``'s device's SMs.
    """
    kernel, options, key, grid = _problem(x, y, c, precision, activation, variant, sms)
    a_t, b_t = options["A_T"], options["B_T"]
    c_arg = c if options["C_PTR"] else _descriptor(c, False)
    M, K = x.shape
    args = (_descriptor(x, a_t), _descriptor(y, b_t), c_arg, M, y.shape[1], K, c.stride(0))
    return launch_tuned(kernel, grid, args, options, key)


def picked(
    x: Any, y: Any, c: Any, precision: str, activation: str | None = None,
    variant: str | None = None, sms: int | None = None,
) -> triton.Config | None:
    """The config :func:`launch` has picked for a problem like this one, or None before its first call."""
    kernel, _, key, _ = _problem(x, y, c, precision, activation, variant, sms)
    return PICKED.get((kernel.base_fn.__name__, *key))


def bound_variant(x: Any, y: Any, config: triton.Config) -> str:
    """The kernel a prepared plan binds for ``x @ y`` with ``config``: :data:`VARIANT`, or the
    persistent kernel where :data:`PERSISTENT_MIN_WAVES` is set and C has that many waves of
    tiles or more. One program per tile under the interpreter."""
    if VARIANT == "persistent":
        return VARIANT
    if PERSISTENT_MIN_WAVES is None or interpreter_mode():
        return "tiles"
    blocks = config.all_kwargs()
    tiles = triton.cdiv(x.shape[0], blocks["BLOCK_SIZE_M"]) * triton.cdiv(y.shape[1], blocks["BLOCK_SIZE_N"])
    return "persistent" if tiles >= PERSISTENT_MIN_WAVES * num_sms(x.device) else "tiles"


def bind(
    x: Any, y: Any, c: Any, precision: str, config: triton.Config, activation: str | None = None,
    variant: str | None = None, sms: int | None = None,
) -> Callable[[Any, Any, Any], None]:
    """``launch(x, y, c, ...)`` with ``config``, bound for every problem like this one.

    The returned ``run(x, y, c)`` makes the descriptors (their base addresses change from call
    to call) and launches the compiled kernel; operands must have the layouts and C the row
    alignment of the ones given here.
    """
    kernel, options, _, grid = _problem(x, y, c, precision, activation, variant, sms)
    blocks = config.all_kwargs()
    bm, bn, bk = (blocks[f"BLOCK_SIZE_{d}"] for d in "MNK")
    a_t, b_t, c_ptr = options["A_T"], options["B_T"], options["C_PTR"]
    launch_bound = BoundLaunch(kernel.fn, grid(blocks), {**options, **blocks}, pointers=(2,) if c_ptr else ())
    M, K = x.shape
    N = y.shape[1]
    x_shape, y_shape = ([K, M] if a_t else [M, K]), ([N, K] if b_t else [K, N])
    x_block, y_block = ([bk, bm] if a_t else [bm, bk]), ([bn, bk] if b_t else [bk, bn])

    def run(x: Any, y: Any, c: Any) -> None:
        xv, yv = (x.T if a_t else x), (y.T if b_t else y)
        a_desc = TensorDescriptor(xv, x_shape, [xv.stride(0), 1], x_block)
        b_desc = TensorDescriptor(yv, y_shape, [yv.stride(0), 1], y_block)
        c_arg = c if c_ptr else TensorDescriptor(c, [M, N], [c.stride(0), 1], [bm, bn])
        launch_bound(a_desc, b_desc, c_arg, M, N, K, c.stride(0))

    run.variant = variant or VARIANT  # type: ignore[attr-defined] - for tests and benchmarks
    return run
