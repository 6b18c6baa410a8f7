"""triton-grouped's TMA kernels: tiles of A and B fetched by Hopper's tensor memory accelerator.

The operands come as host-side tensor descriptors instead of pointers; the TMA unit copies whole
tiles into shared memory, fills the parts past a matrix's edge with zeros and clips stores at
C's edge, so nothing is masked. ``tma_matmul_kernel`` runs one program per tile of C, in the
pointer kernel's tile order and with its epilogue and config pruning.

A column-major operand is read through a descriptor over its transpose, which is row-major, and
its tiles are transposed in the kernel (the ``A_T`` and ``B_T`` flags). C is stored through a
descriptor, or through masked pointers (``C_PTR``) when its rows are not 16-byte aligned. Which
problems run here, on the operands as they are or on aligned copies, is
:func:`gemmzoo_triton.grouped.plan.route`'s decision. Imported only when the backend takes this
path, like grouped_kernel (and for the same reason).
"""

# ruff: noqa: N803, N806 - named as in the tutorial: M, N, K and upper-case constexprs

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

from gemmzoo_triton.core import autotune, triton_internals
from gemmzoo_triton.core.autotune import autotuned, launch_tuned, make_config
from gemmzoo_triton.core.descriptors import reusing
from gemmzoo_triton.core.env import interpreter_mode
from gemmzoo_triton.core.hopper import column_major
from gemmzoo_triton.core.launch import BoundLaunch, DescriptorLaunch
from gemmzoo_triton.core.tile_order import tile_position
from gemmzoo_triton.grouped.pointer_kernel import leaky_relu, relu


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
    return make_config(bm, bn, bk, stages, warps, group, pre_hook=set_block_shapes)


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

#: The TMA kernel's autotuning.
_autotuned = autotuned(configs=_CONFIGS, key=_KEY)


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


def _descriptor(tensor: Any, transposed: bool, block_shape: list[int] | None = None) -> TensorDescriptor:
    """A descriptor over ``tensor`` (its transpose when ``transposed``); without ``block_shape``
    its block shape is a placeholder until :func:`set_block_shapes` runs."""
    view = tensor.T if transposed else tensor
    return TensorDescriptor(view, list(view.shape), list(view.stride()), block_shape or [1, 1])


def c_needs_pointers(c: Any) -> bool:
    """Whether C must be stored through pointers: its rows or start are not 16-byte aligned."""
    return (c.stride(0) * c.element_size()) % 16 != 0 or c.data_ptr() % 16 != 0


def _problem(
    x: Any, y: Any, c: Any, precision: str, activation: str | None
) -> tuple[Any, dict[str, Any], tuple[Any, ...], Any]:
    """The kernel, its options, its tuning key and its grid (a function of the config)."""
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

    return tma_matmul_kernel, options, key, lambda meta: (tiles(meta),)


def launch(x: Any, y: Any, c: Any, precision: str, activation: str | None = None,
           mode: str = "quick") -> triton.Config:
    """Compute ``c = activation(x @ y)`` with a TMA kernel tuned in ``mode`` (see
    :mod:`~gemmzoo_triton.core.autotune`); return the config that ran.

    The operands must pass :func:`gemmzoo_triton.grouped.plan.tma_eligible`'s rules for A and B (its
    device rule aside: under the interpreter this runs on CPU tensors); C must be contiguous in
    its columns, and is stored through pointers when its rows are not 16-byte aligned.
    """
    kernel, options, key, grid = _problem(x, y, c, precision, activation)
    a_t, b_t = options["A_T"], options["B_T"]
    c_arg = c if options["C_PTR"] else _descriptor(c, False)
    M, K = x.shape
    args = (_descriptor(x, a_t), _descriptor(y, b_t), c_arg, M, y.shape[1], K, c.stride(0))
    return launch_tuned(kernel, grid, args, options, key, mode)


def picked(
    x: Any, y: Any, c: Any, precision: str, activation: str | None = None, mode: str = "quick"
) -> triton.Config | None:
    """The config :func:`launch` in ``mode`` launches for a problem like this one, or None before
    it is tuned (:func:`~gemmzoo_triton.core.autotune.picked`)."""
    kernel, _, key, _ = _problem(x, y, c, precision, activation)
    return autotune.picked(kernel, key, mode)


def bind(
    x: Any, y: Any, c: Any, precision: str, config: triton.Config, activation: str | None = None
) -> Callable[[Any, Any, Any], None]:
    """``launch(x, y, c, ...)`` with ``config``, bound for every problem like this one.

    The returned ``run(x, y, c)`` makes the descriptors (their base addresses change from call
    to call) and launches the compiled kernel; operands must have the layouts and C the row
    alignment of the ones given here. It is a :class:`~gemmzoo_triton.core.launch.DescriptorLaunch`,
    so that a plan can make A's and B's descriptors once for buffers it keeps.
    """
    kernel, options, _, grid = _problem(x, y, c, precision, activation)
    blocks = config.all_kwargs()
    bm, bn, bk = (blocks[f"BLOCK_SIZE_{d}"] for d in "MNK")
    a_t, b_t, c_ptr = options["A_T"], options["B_T"], options["C_PTR"]
    launch_bound = BoundLaunch(triton_internals.jit_function(kernel), grid(blocks), {**options, **blocks},
                               pointers=(2,) if c_ptr else (), device=x.device)
    M, K = x.shape
    N = y.shape[1]
    x_shape, y_shape = ([K, M] if a_t else [M, K]), ([N, K] if b_t else [K, N])
    x_block, y_block = ([bk, bm] if a_t else [bm, bk]), ([bn, bk] if b_t else [bk, bn])

    x_view = reusing(lambda xv: TensorDescriptor(xv, x_shape, [xv.stride(0), 1], x_block))
    y_view = reusing(lambda yv: TensorDescriptor(yv, y_shape, [yv.stride(0), 1], y_block))
    c_desc = reusing(lambda c: TensorDescriptor(c, [M, N], [c.stride(0), 1], [bm, bn]))

    def a_desc(x: Any) -> TensorDescriptor:
        return x_view(x.T if a_t else x)

    def b_desc(y: Any) -> TensorDescriptor:
        return y_view(y.T if b_t else y)

    def launch(a_desc: Any, b_desc: Any, c: Any) -> None:
        launch_bound(a_desc, b_desc, c if c_ptr else c_desc(c), M, N, K, c.stride(0))

    return DescriptorLaunch(a_desc, b_desc, launch)
