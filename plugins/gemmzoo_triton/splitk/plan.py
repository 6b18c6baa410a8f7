"""How ``triton-splitk`` and ``triton-decode`` launch the split-K kernel for one problem.

:func:`choose` picks the block shapes and the number of K splits from M, N, K, the element size
and the GPU's multiprocessor count; :func:`bind` turns that choice into ``run(x, y) -> C`` with
everything that does not change between calls (grid, strides, constexprs, the arrival counters)
worked out once. Nothing here imports torch or triton at module import.
"""

# ruff: noqa: N803, N806 - M, N, K as the kernels name them

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

#: Shared memory the pipelined loads of one program may take (Hopper allows 227 KiB a block;
#: the rest is left for the layout conversions Triton adds).
STAGE_BUDGET = 200 * 1024

#: Programs a multiprocessor runs at once at most, whatever the shared memory would allow.
MAX_RESIDENT = 4

# The time model :func:`split_time` ranks configs with. Its constants were fitted to the kernel's
# measured times on decode and long-K problems (docs/results/2026-11-23-skinny.md): they are the
# values that rank the measured configs best, not datasheet figures, and only their ratios matter.

#: Device memory bandwidth, bytes/s: the floor for reading A and B once.
MEMORY_BW = 2.2e12

#: What one multiprocessor's programs load per second at most (pipelined tile loads).
SM_BW = 120e9

#: What the multiprocessors together load per second through L2 (tiles re-read, partial tiles).
L2_BW = 7.5e12

#: What one multiprocessor's programs load per second at most through TMA (tile copies into
#: shared memory, no per-thread address arithmetic): fitted like the others.
TMA_SM_BW = 240e9

#: One multiprocessor's tensor-core rate, multiply-adds x 2 per second.
SM_FLOPS = 1.6e12

#: One K step's fixed cost in a program (loop, barriers, the wait for its stage), seconds.
STEP_S = 0.8e-6

#: A wave of programs' fixed cost (pipeline fill, epilogue), seconds.
WAVE_S = 0.02e-6

#: The separate reduction's second launch, seconds.
LAUNCH_S = 4e-6

#: One round trip to L2 for the serial reduction's dependent chunk loads, seconds.
ROUND_TRIP_S = 0.13e-6

#: Fewest K steps a split gets: below it the fill and the partial tile's store dominate.
MIN_STEPS = 2

#: The splits a problem may use at most.
MAX_SPLITS = 128

#: Offsets stay 32-bit: the workspace (splits x M x N) must stay under this many elements.
MAX_WORKSPACE = 2**31 - 1

#: IEEE fp32 dots run on the FMA units, where larger tiles of C only spill registers.
FMA_TILE = 128 * 64

#: Splits the separate reduction loads at once.
REDUCE_CHUNK = 8

#: The multiprocessor count the interpreter pretends to have, so that small test problems split.
INTERPRETER_SMS = 4


@dataclass(frozen=True)
class SplitConfig:
    """One launch of the split-K kernel: block shapes, pipeline depth, warps and the split."""

    block_m: int
    block_n: int
    block_k: int
    stages: int
    warps: int
    splits: int = 1
    k_per_split: int = 0
    reduce: int = 0  # splitk_kernel.REDUCE_NONE / _SERIAL / _SEPARATE
    #: A and B read through tensor descriptors (:func:`~gemmzoo_triton.splitk.kernel.splitk_tma_kernel`)
    tma: bool = False

    @property
    def chunk(self) -> int:
        """Partial tiles the serial reduction loads at once: as many as keep the registers they
        take near those of the accumulator (8 for a 16x64 tile, 1 for 128x128)."""
        return max(1, min(8, 16384 // (self.block_m * self.block_n)))

    @property
    def label(self) -> str:
        """``16x64x256 s4 w4 split 8 serial`` (`` tma`` appended for the TMA kernel): how
        results files name a config."""
        reduce = ("direct", "serial", "separate")[self.reduce]
        blocks = f"{self.block_m}x{self.block_n}x{self.block_k} s{self.stages} w{self.warps}"
        return f"{blocks} split {self.splits} {reduce}" + (" tma" if self.tma else "")


def _pow2(n: int, low: int, high: int) -> int:
    """The power of two at or above ``n``, clamped to [low, high]."""
    return max(low, min(high, 1 << max(0, n - 1).bit_length()))


def _shared_bytes(bm: int, bn: int, bk: int, stages: int, elt: int) -> int:
    return stages * (bm + bn) * bk * elt


def decode_blocks(M: int, N: int, elt: int, fma: bool, width: int = 64) -> SplitConfig:
    """Blocks for streaming B when M is small: all of M in one block, ``width`` columns of B,
    long K steps, four stages in flight. B is then read once; A's few rows are re-read from L2."""
    bm = _pow2(M, 16, 64)
    bn = _pow2(N, 16, width)
    stages = 4
    bk = 1024 // elt // max(1, bn // 32)  # 16-bit types: K steps of 256, or 128 at 128 columns
    bk = max(32, min(bk, 512 // elt))
    while bk > 32 and _shared_bytes(bm, bn, bk, stages, elt) > STAGE_BUDGET:
        bk //= 2
    if fma:
        bk = min(bk, 64)
    return SplitConfig(bm, bn, bk, stages, 4)


def tile_blocks(M: int, N: int, elt: int, fma: bool) -> SplitConfig:
    """Blocks for a product whose time is the tensor cores': square-ish tiles up to 128x128."""
    bm = _pow2(M, 16, 128)
    bn = _pow2(N, 16, 128)
    if fma:
        while bm * bn > FMA_TILE:
            bm, bn = (bm // 2, bn) if bm >= bn else (bm, bn // 2)
    bk = 128 // elt  # 64 for 16-bit types
    stages = 4
    while stages > 2 and _shared_bytes(bm, bn, bk, stages, elt) > STAGE_BUDGET:
        stages -= 1
    warps = 8 if bm * bn >= 128 * 128 else 4
    return SplitConfig(bm, bn, bk, stages, warps)


def resident(config: SplitConfig, elt: int) -> int:
    """How many programs of ``config`` one multiprocessor holds at once (by shared memory)."""
    shared = _shared_bytes(config.block_m, config.block_n, config.block_k, config.stages, elt)
    return max(1, min(MAX_RESIDENT, (227 * 1024) // max(shared, 1)))


def split_time(config: SplitConfig, M: int, N: int, K: int, splits: int, sms: int, elt: int,
               reduce: int) -> float:
    """A rough time, in seconds, for ``config`` with K split ``splits`` ways.

    The programs run in waves of ``sms * resident`` programs, the last one maybe partial. A wave
    takes the longest of: its share of A and B read once from memory (:data:`MEMORY_BW`); its
    tiles' loads through L2 (:data:`L2_BW`); one multiprocessor's programs' loads
    (:data:`SM_BW`), multiply-adds (:data:`SM_FLOPS`) and K steps (:data:`STEP_S`); plus
    :data:`WAVE_S`. Splitting adds
    the partial tiles' trip through L2 and the reduction: in the serial mode the last program of
    each tile reads its tile's partials, a chunk per L2 round trip; in the separate mode a second
    launch reads them over every multiprocessor.
    """
    slots = sms * resident(config, elt)
    tiles = math.ceil(M / config.block_m) * math.ceil(N / config.block_n)
    programs = tiles * splits
    k_len = math.ceil(math.ceil(K / config.block_k) / splits) * config.block_k
    program_bytes = (config.block_m + config.block_n) * k_len * elt
    program_flops = 2 * config.block_m * config.block_n * k_len
    unique = (M * K + K * N) * elt

    def wave(n: int) -> float:
        per_sm = math.ceil(n / sms)
        return max(
            unique * n / programs / MEMORY_BW,
            n * program_bytes / L2_BW,
            per_sm * program_bytes / (TMA_SM_BW if config.tma else SM_BW),
            per_sm * program_flops / SM_FLOPS,
            per_sm * k_len / config.block_k * STEP_S,
        ) + WAVE_S

    full, last = divmod(programs, slots)
    seconds = full * wave(slots) + (wave(last) if last else 0.0)
    if splits == 1:
        return seconds
    workspace = splits * M * N * 4
    if reduce == 1:
        partials = splits * config.block_m * config.block_n * 4
        rounds = math.ceil(splits / config.chunk)
        return seconds + workspace / L2_BW + partials / SM_BW + rounds * ROUND_TRIP_S
    return seconds + LAUNCH_S + 2 * workspace / L2_BW


def with_splits(config: SplitConfig, M: int, N: int, K: int, splits: int, reduce: int) -> SplitConfig:
    """``config`` splitting K ``splits`` ways (fewer when the K steps do not divide evenly: every
    split gets the same whole number of steps but the last)."""
    k_steps = max(1, math.ceil(K / config.block_k))
    splits = max(1, min(splits, k_steps, MAX_WORKSPACE // max(M * N, 1)))
    steps = math.ceil(k_steps / splits)
    splits = math.ceil(k_steps / steps)
    reduce = reduce if splits > 1 else 0
    return replace(config, splits=splits, k_per_split=steps * config.block_k, reduce=reduce)


#: Tiles (M, N, K, stages, warps) the TMA kernel adds to the pointer kernel's candidates for a
#: product that is not a decode one: tiles of 64x128 and more, where A and B are re-read through
#: L2 and the TMA loads beat pointer loads; with smaller tiles they gained nothing, and lost with
#: many splits (docs/results/2026-11-23-splitk-tma.md). M and N cap the first two.
TMA_TILES = ((128, 256, 64, 3, 8), (128, 128, 64, 4, 8), (128, 128, 128, 3, 8), (64, 128, 128, 4, 4))


def candidates(M: int, N: int, elt: int, fma: bool, decode: bool, tma: bool = False) -> list[SplitConfig]:
    """The block shapes :func:`choose` weighs. Decode: all of M in one block, B in column blocks
    of 32, 64 or 128 (the narrower ones give more programs when N is small). Otherwise: tiles up
    to 128x128, and smaller tiles with longer K steps for a C too small to give every SM a tile;
    with ``tma`` (operands a tensor descriptor covers, on a GPU with TMA) also the TMA kernel's
    :data:`TMA_TILES` that M and N do not cut below 64x128."""
    if decode:
        return list(dict.fromkeys(decode_blocks(M, N, elt, fma, width) for width in (32, 64, 128)))
    found = []
    if tma and not fma:
        found = [SplitConfig(min(bm, _pow2(M, 16, 256)), min(bn, _pow2(N, 16, 256)), bk, stages, warps,
                             tma=True) for bm, bn, bk, stages, warps in TMA_TILES]
        found = [c for c in found if c.block_m * c.block_n >= 64 * 128]
    found.append(tile_blocks(M, N, elt, fma))
    # small tiles take longer K steps (128 at 64x64, 256 below, for 16-bit types): fewer steps
    # for the same bytes, the fastest for them in the sweep of docs/results/2026-11-23-skinny.md
    for side in (64, 32, 16):
        if min(M, N) > side or side == 16:
            small = tile_blocks(min(M, side), min(N, side), elt, fma)
            found.append(replace(small, block_k=small.block_k * 2 if side == 64 else small.block_k * 4,
                                 stages=4, warps=4))
    return list(dict.fromkeys(c for c in found if _fits(c, elt)))


def _fits(config: SplitConfig, elt: int) -> bool:
    return _shared_bytes(config.block_m, config.block_n, config.block_k, config.stages, elt) <= STAGE_BUDGET


@functools.lru_cache(maxsize=4096)
def choose(M: int, N: int, K: int, elt: int, fma: bool, sms: int, decode: bool,
           tma: bool = False) -> SplitConfig:
    """The config for C = A·B of M x N x K: among :func:`candidates`, splits and reductions, the
    one with the least :func:`split_time`; on a tie, the first found (fewer splits). Remembered
    per problem: weighing every split takes milliseconds of host time."""
    if M * N == 0 or K == 0:  # nothing to launch: bind fills C without the kernel
        return candidates(max(M, 1), max(N, 1), elt, fma, decode, tma)[0]
    best: tuple[float, SplitConfig] | None = None
    for base in candidates(M, N, elt, fma, decode, tma):
        k_steps = max(1, math.ceil(K / base.block_k))
        most = max(1, min(MAX_SPLITS, k_steps // MIN_STEPS))
        for splits in range(1, most + 1):
            for reduce in ((0,) if splits == 1 else (1, 2)):
                config = with_splits(base, M, N, K, splits, reduce)
                if config.splits != splits:
                    continue
                seconds = split_time(base, M, N, K, splits, sms, elt, reduce)
                if best is None or seconds < best[0] * (1 - 1e-6):
                    best = (seconds, config)
    assert best is not None
    return best[1]


@functools.cache
def multiprocessors(device_index: int | None) -> int:
    """The SM count of a CUDA device (``None``: the interpreter's pretend count)."""
    if device_index is None:
        return INTERPRETER_SMS
    import torch

    return int(torch.cuda.get_device_properties(device_index).multi_processor_count)


def tma_operand(tensor: Any) -> bool:
    """Whether a tensor descriptor can cover ``tensor`` (or its transpose, column-major): a
    16-bit type, one dimension contiguous with rows of a multiple of 16 bytes, and its start
    16-byte aligned. Says nothing of the device: see :func:`tma_usable`."""
    from gemmzoo_triton.core.hopper import tma_layout

    return tensor.element_size() == 2 and tma_layout(tensor) and tensor.data_ptr() % 16 == 0


def tma_usable(x: Any, y: Any, precision: str) -> bool:
    """Whether the TMA kernel can run C = x @ y: a GPU with TMA (not the interpreter), 16-bit
    operands on the tensor cores and :func:`tma_operand` for both."""
    from gemmzoo_triton.core.hopper import tma_device

    return precision != "ieee" and tma_device(x.device) and tma_operand(x) and tma_operand(y)


def bind(x: Any, y: Any, precision: str, config: SplitConfig) -> Callable[[Any, Any], Any]:
    """``run(x, y)``: C = x @ y with ``config``, for tensors shaped and strided like ``x`` and ``y``.

    The workspace of partial tiles and the serial reduction's arrival counters (zeroed when made;
    the kernel leaves them zero) are one buffer kept per thread and CUDA stream
    (:class:`~gemmzoo_triton.core.stream_buffers.StreamBuffers`), so calls on two streams never
    share them; C is new each call. A ``tma`` config reads the operands
    through tensor descriptors made per call; a call whose operands a descriptor cannot cover
    (a start not 16-byte aligned, a dtype other than float16 and bfloat16) runs the pointer
    kernel with the same blocks instead.
    """
    import torch
    import triton

    from gemmzoo_triton.core.backend import output_allocator
    from gemmzoo_triton.core.launch import BoundLaunch
    from gemmzoo_triton.core.padding import round_up
    from gemmzoo_triton.core.stream_buffers import StreamBuffers
    from gemmzoo_triton.splitk import kernel

    M, K = x.shape
    N = y.shape[1]
    device, dtype = x.device, x.dtype
    if M * N == 0 or K == 0:
        def empty(x: Any, y: Any) -> Any:
            return torch.zeros((M, N), device=device, dtype=dtype)

        return empty

    tiles = triton.cdiv(M, config.block_m) * triton.cdiv(N, config.block_n)
    grid = (tiles, config.splits)
    new_c = output_allocator(M, N, dtype, device)
    unused = torch.zeros(1, device=device, dtype=torch.int32)  # no counters without a serial reduction
    sizes = (M, N, K, config.k_per_split, config.splits,
             x.stride(0), x.stride(1), y.stride(0), y.stride(1), N, 1)
    shared = {
        "PRECISION": precision,
        "BLOCK_M": config.block_m,
        "BLOCK_N": config.block_n,
        "BLOCK_K": config.block_k,
        "REDUCE": config.reduce,
        "CHUNK": config.chunk,
        "num_stages": config.stages,
        "num_warps": config.warps,
    }
    constants = dict(shared, EVEN_K=K % config.block_k == 0, EVEN_N=N % config.block_n == 0)
    # C comes from torch's allocator, the workspace and the counters at 256-byte offsets of a
    # buffer from it: only A and B may start unaligned
    launch = BoundLaunch(kernel.splitk_kernel, grid, constants, pointers=(0, 1), device=device)
    if config.splits == 1:
        def run_direct(x: Any, y: Any) -> Any:
            c = new_c()
            launch(x, y, c, c, unused, *sizes)
            return c

        return _with_tma(run_direct, x, y, config, grid, shared, sizes, new_c, lambda c: (c, unused), device)

    # the counters first (int32 in the float32 buffer), then the workspace, 256 bytes on
    head = round_up(tiles, 64) if config.reduce == 1 else 0

    def workspace(flat: Any) -> tuple[Any, Any]:
        if not head:
            return flat, unused
        counters = flat[:tiles].view(torch.int32)
        counters.zero_()
        return flat[head:], counters

    buffers = StreamBuffers(head + config.splits * M * N, torch.float32, device, workspace)

    # enough programs to spread the reduction over every multiprocessor, two per SM at least
    sms = multiprocessors(None if device.type == "cpu" else (device.index or 0))
    reduce_block = max(64, min(1024, 1 << max(0, (M * N // (2 * sms)).bit_length() - 1)))
    reduce = BoundLaunch(kernel.reduce_kernel, (triton.cdiv(M * N, reduce_block),),
                         {"BLOCK": reduce_block, "CHUNK": REDUCE_CHUNK, "num_warps": 4}, pointers=(),
                         device=device)
    separate = config.reduce == 2

    def reduce_into(ws: Any, c: Any) -> None:
        reduce(ws, c, M, N, config.splits, N, 1)

    def run(x: Any, y: Any) -> Any:
        c = new_c()
        ws, counters = buffers.get()
        launch(x, y, c, ws, counters, *sizes)
        if separate:
            reduce_into(ws, c)
        return c

    return _with_tma(run, x, y, config, grid, shared, sizes, new_c, lambda c: buffers.get(), device,
                     reduce_into if separate else None)


def _with_tma(run: Callable[[Any, Any], Any], x: Any, y: Any, config: SplitConfig, grid: tuple[int, int],
              shared: dict[str, Any], sizes: tuple[int, ...], new_c: Callable[[], Any],
              scratch: Callable[[Any], tuple[Any, Any]], device: Any,
              reduce: Callable[[Any, Any], None] | None = None) -> Callable[[Any, Any], Any]:
    """``run`` (the pointer kernel's plan), or for a ``tma`` config whose operands a descriptor
    covers, a plan that reads them through tensor descriptors made per call and falls back to
    ``run`` for operands that start unaligned. ``scratch(c)``: the workspace and counters."""
    if not (config.tma and tma_operand(x) and tma_operand(y)):
        return run
    from triton.tools.tensor_descriptor import TensorDescriptor

    from gemmzoo_triton.core.descriptors import reusing
    from gemmzoo_triton.core.hopper import column_major
    from gemmzoo_triton.core.launch import BoundLaunch
    from gemmzoo_triton.splitk import kernel

    a_t, b_t = column_major(x), column_major(y)
    a_box = [config.block_k, config.block_m] if a_t else [config.block_m, config.block_k]
    b_box = [config.block_n, config.block_k] if b_t else [config.block_k, config.block_n]
    launch_tma = BoundLaunch(kernel.splitk_tma_kernel, grid, dict(shared, A_T=a_t, B_T=b_t), pointers=(),
                             device=device)
    M, N, K, k_per_split, splits = sizes[:5]
    a_view = reusing(lambda view: TensorDescriptor.from_tensor(view, a_box))
    b_view = reusing(lambda view: TensorDescriptor.from_tensor(view, b_box))

    def run_tma(x: Any, y: Any) -> Any:
        if x.data_ptr() % 16 or y.data_ptr() % 16:
            return run(x, y)
        c = new_c()
        ws, counters = scratch(c)
        a_desc = a_view(x.T if a_t else x)
        b_desc = b_view(y.T if b_t else y)
        launch_tma(a_desc, b_desc, c, ws, counters, M, N, K, k_per_split, splits, N, 1)
        if reduce is not None:
            reduce(ws, c)
        return c

    return run_tma
