"""triton-grouped's Gluon kernel for Hopper: fp16 and bf16, warp-specialized, persistent.

The TMA route's kernel in Gluon, the same shape as triton-fp8's
(:mod:`~gemmzoo_triton.fp8.gluon_kernel`) without its promotion: one loading warp fills
``STAGES`` shared-memory slots through the tensor memory accelerator
(:func:`~gemmzoo_triton.core.gluon_parts.load_slots`), and 8 MMA warps (two warpgroups, 64 rows of the
tile each) chain warpgroup MMAs into one fp32 accumulator, keeping one MMA in flight: after
issuing K tile k they wait for tile k-1 and hand its slot back. One program per SM walks C's
tiles in grouped order; C is rounded once to the operands' dtype, staged in shared memory and
stored by the TMA, which clips the edges (tiles past A's or B's edges load as zeros).

Any of the four layouts is read in place: the descriptors are over A or Aᵀ and B or Bᵀ,
whichever is row-major, and the MMA reads a transposed view of the slot where needed (16-bit
MMAs take either major-ness from shared memory).

Tiles: 128x256 (the accumulator is 128 registers a thread; three 48 KiB slots and a 64 KiB
staging tile), 128x128 (64 registers; six 32 KiB slots) or, where C has too few tiles of those to
fill the GPU, 128x64 (eight 24 KiB slots); TMA boxes are powers of two, which rules out widths
between. Where the last wave of tiles would leave SMs idle, the 128x128 kernel
can split that wave's tiles along K between them (:mod:`~gemmzoo_triton.grouped.split_wave`; partial
sums handed over through an fp32 scratch buffer and added in a fixed order, so every call gives
the same bits). :func:`pick_schedule` weighs the idle SMs, the hand-overs and each tile's speed.

Needs ``triton.experimental.gluon`` with Hopper's ``warpgroup_mma`` and ``warp_specialize``
(Triton 3.6 and later) and a GPU of capability 9.0; no interpreter (CI compiles it for sm_90a
without a GPU). Imported only where :mod:`~gemmzoo_triton.grouped.plan` takes it.
"""

# ruff: noqa: N803, N806 - named as in the tutorials: M, N, K and upper-case constexprs

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import tma, warpgroup_mma, warpgroup_mma_wait

from gemmzoo_triton.core import gluon_parts
from gemmzoo_triton.core.gluon_parts import (
    GluonConfig,
    allocate_pipeline,
    load_steps,
    release,
    slot_operands,
    store_at,
    tile_origin,
    warps_barrier,
)
from gemmzoo_triton.grouped import split_wave

#: The tiles, each with as many slots as Hopper's 227 KiB of shared memory a block hold, and the
#: throughput of a program on it relative to WIDE's, per element of C per K step (narrower tiles
#: read each shared-memory byte for less MMA work): estimates for :func:`pick_schedule` from one
#: large fp16 product (docs/results/2026-11-23-grouped-gluon.md), not a table of shapes.
WIDE = GluonConfig(block_m=128, block_n=256, block_k=64, stages=3, operand_bytes=2)
SQUARE = GluonConfig(block_m=128, block_n=128, block_k=64, stages=6, operand_bytes=2)
RATES = ((WIDE, 1.0), (SQUARE, 0.9))

#: Tiles of 128x64 for C too small to fill the GPU with the others, taken only where all of them
#: fit one wave, and their throughput relative to WIDE's there: with one program an SM and fewer
#: programs than SMs, a narrow tile's K steps run faster than in a full GPU, where it falls well
#: behind WIDE. Estimated like RATES, from products that fill at most one wave
#: (docs/results/2026-11-23-grouped-split-wave.md).
NARROW = GluonConfig(block_m=128, block_n=64, block_k=64, stages=8, operand_bytes=2)
NARROW_RATE = 0.8

#: What a split tile's hand-over costs, in K steps of a SQUARE tile, for :func:`pick_schedule`'s
#: model: polling the heads' flags and storing the tile, and reading and adding each head's 64 KiB
#: (estimated from the timings in docs/results/2026-11-23-grouped-split-wave.md).
HAND_OVER_STEPS = 4
HEAD_STEPS = 6

#: Pieces of a split tile are at least this many K steps long.
MIN_PIECE_STEPS = 4

#: The last wave is split only after this many whole waves, or where there is no whole wave: with
#: one or two before it, splitting it was slower than leaving it whole (same results file), which
#: the step count above does not model.
MIN_WHOLE_WAVES = 3


@dataclass(frozen=True)
class Schedule:
    """How a problem's tiles are spread over the programs of one launch.

    The first ``tiles - sk_tiles`` tiles (grouped order) go whole to the programs in turn; the
    last ``sk_tiles`` are each split into ``split`` pieces along K, one piece a program
    (:mod:`~gemmzoo_triton.grouped.split_wave`).
    """

    config: GluonConfig
    programs: int
    sk_tiles: int = 0
    split: int = 1

    @property
    def splits(self) -> bool:
        """Whether any tile is split between programs."""
        return self.sk_tiles > 0 and self.split > 1


def pick_schedule(M: int, N: int, K: int, sms: int, shared_memory: int) -> Schedule | None:
    """The schedule for an M x N x K product on ``sms`` SMs with the least modelled time, or None
    when no tile fits ``shared_memory`` or M, N are under 128.

    A program's time is counted in K steps of its tile, weighted by the tile's area over its rate
    (:data:`RATES`). Whole tiles: the busiest SM's tile count times the K steps of one. With the
    last, partial wave's tiles split (SQUARE tiles): the whole waves, then one piece, then the
    hand-over (:data:`HAND_OVER_STEPS`, and :data:`HEAD_STEPS` for each head added), with the
    split that makes that least among those that fit the SMs the wave leaves idle (after no
    whole wave, or :data:`MIN_WHOLE_WAVES` of them). NARROW tiles, where all of them fit one wave,
    at :data:`NARROW_RATE`.
    """
    if min(M, N) < 128:
        return None
    best, best_time = None, float("inf")
    for config, rate in RATES:
        if config.shared_bytes() > shared_memory:
            continue
        k_steps = triton.cdiv(K, config.block_k)
        tiles = triton.cdiv(M, config.block_m) * triton.cdiv(N, config.block_n)
        weight = config.block_m * config.block_n / rate
        candidates = [(Schedule(config, min(sms, tiles)), triton.cdiv(tiles, sms) * k_steps)]
        if config == SQUARE and tiles % sms:
            candidates += _splits(tiles, k_steps, sms, config)
        for schedule, steps in candidates:
            if steps * weight < best_time:
                best, best_time = schedule, steps * weight
    narrow_tiles = triton.cdiv(M, NARROW.block_m) * triton.cdiv(N, NARROW.block_n)
    if narrow_tiles <= sms and NARROW.shared_bytes() <= shared_memory:
        narrow_time = triton.cdiv(K, NARROW.block_k) * NARROW.block_m * NARROW.block_n / NARROW_RATE
        if narrow_time < best_time:
            best = Schedule(NARROW, narrow_tiles)
    return best


def _splits(tiles: int, k_steps: int, sms: int, config: GluonConfig) -> list[tuple[Schedule, float]]:
    """Each schedule that splits the last wave's tiles, with its modelled time in K steps."""
    last_wave = tiles % sms
    if 0 < tiles // sms < MIN_WHOLE_WAVES:
        return []
    found = []
    for split in range(2, min(sms // last_wave, k_steps // MIN_PIECE_STEPS) + 1):
        steps = (tiles // sms) * k_steps + triton.cdiv(k_steps, split) + HAND_OVER_STEPS \
            + HEAD_STEPS * (split - 1)
        found.append((Schedule(config, sms, last_wave, split), steps))
    return found


# The device side -------------------------------------------------------------------------------

@gluon.jit
def _load(a_desc, b_desc, a_slots, b_slots, ready, empty, num_pid_m, num_pid_n, k_steps, sk_tiles,
          split, STAGES: gl.constexpr, GROUP_M: gl.constexpr, A_T: gl.constexpr, B_T: gl.constexpr,
          SPLIT: gl.constexpr):
    """The loading warp: the K tiles of this program's units, unit after unit."""
    BLOCK_M: gl.constexpr = a_desc.block_type.shape[1] if A_T else a_desc.block_type.shape[0]
    BLOCK_N: gl.constexpr = b_desc.block_type.shape[0] if B_T else b_desc.block_type.shape[1]
    tiles = num_pid_m * num_pid_n
    step = 0
    for i in range(split_wave.unit_count(tiles, sk_tiles, split, SPLIT)):
        tile, k_first, k_end, _kind = split_wave.unit(i, tiles, k_steps, sk_tiles, split, SPLIT)
        off_m, off_n = tile_origin(tile, num_pid_m, num_pid_n, BLOCK_M, BLOCK_N, GROUP_M)
        step = load_steps(a_desc, b_desc, a_slots, b_slots, ready, empty, off_m, off_n, k_first,
                          k_end, step, STAGES, A_T, B_T)


@gluon.jit
def _accumulate(step, count, a_slots, b_slots, ready, empty, BLOCK_M: gl.constexpr,
                BLOCK_N: gl.constexpr, mma_layout: gl.constexpr, STAGES: gl.constexpr,
                A_T: gl.constexpr, B_T: gl.constexpr):
    """The sum of the next ``count`` (at least one) K steps' products, chained into one fp32
    accumulator with one MMA in flight; returns it and the next load step."""
    accumulator = gl.zeros((BLOCK_M, BLOCK_N), dtype=gl.float32, layout=mma_layout)
    a, b = slot_operands(step, a_slots, b_slots, ready, STAGES, A_T, B_T)
    accumulator = warpgroup_mma(a, b, accumulator, is_async=True)
    accumulator = warpgroup_mma_wait(num_outstanding=1, deps=(accumulator,))
    step += 1
    for _ in range(1, count):
        a, b = slot_operands(step, a_slots, b_slots, ready, STAGES, A_T, B_T)
        accumulator = warpgroup_mma(a, b, accumulator, is_async=True)
        # one MMA left in flight: the one before it is done, and so is its slot
        accumulator = warpgroup_mma_wait(num_outstanding=1, deps=(accumulator,))
        release(step - 1, empty, STAGES)
        step += 1
    accumulator = warpgroup_mma_wait(num_outstanding=0, deps=(accumulator,))
    release(step - 1, empty, STAGES)
    return accumulator, step


@gluon.jit
def _hand_over(accumulator, partials, flags, offsets, TILE: gl.constexpr):
    """Write this program's head to its row of ``partials`` and raise its flag (release: the
    writes of every MMA warp before it)."""
    pid = gl.program_id(0)
    gl.store(partials + pid * TILE + offsets, accumulator, cache_modifier=".cg")
    warps_barrier()
    gl.atomic_xchg(flags + pid, 1, sem="release", scope="gpu")


@gluon.jit
def _take_over(accumulator, heads, partials, flags, offsets, TILE: gl.constexpr,
               num_warps: gl.constexpr):
    """Add the heads of the ``heads`` programs before this one, nearest first (a fixed order:
    the sum is the same on every call): every flag polled at once until all are raised, each
    head's load issued before the one before it is added, the flags lowered for the next launch."""
    pid = gl.program_id(0)
    poll_layout: gl.constexpr = gl.BlockedLayout([1], [32], [num_warps], [0])
    others = gl.arange(0, 32 * num_warps, layout=poll_layout)
    waiting = others < heads
    flag = flags + pid - 1 - others
    raised = gl.atomic_add(flag, others * 0, mask=waiting, sem="acquire", scope="gpu")
    while gl.min(gl.where(waiting, raised, 1), axis=0) == 0:
        raised = gl.atomic_add(flag, others * 0, mask=waiting, sem="acquire", scope="gpu")
    head = gl.load(partials + (pid - 1) * TILE + offsets, cache_modifier=".cg")
    for j in range(1, heads):
        following = gl.load(partials + (pid - 1 - j) * TILE + offsets, cache_modifier=".cg")
        accumulator += head
        head = following
    accumulator += head
    gl.store(flag, others * 0, mask=waiting)
    return accumulator


@gluon.jit
def _multiply(a_slots, b_slots, ready, empty, c_desc, c_stage, partials, flags, num_pid_m, num_pid_n,
              k_steps, sk_tiles, split, STAGES: gl.constexpr, GROUP_M: gl.constexpr, A_T: gl.constexpr,
              B_T: gl.constexpr, SPLIT: gl.constexpr, num_warps: gl.constexpr):
    """The MMA warps: each unit's K steps chained into one accumulator, then its epilogue."""
    BLOCK_M: gl.constexpr = c_desc.block_type.shape[0]
    BLOCK_N: gl.constexpr = c_desc.block_type.shape[1]
    # an MMA instruction's K: 32 bytes of the operands' type (16 for 16-bit types, 8 for tf32)
    INSTR_K: gl.constexpr = 256 // a_slots.dtype.primitive_bitwidth
    mma_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[num_warps, 1], instr_shape=[16, BLOCK_N, INSTR_K])
    tiles = num_pid_m * num_pid_n
    step = 0
    for i in range(split_wave.unit_count(tiles, sk_tiles, split, SPLIT)):
        tile, k_first, k_end, kind = split_wave.unit(i, tiles, k_steps, sk_tiles, split, SPLIT)
        accumulator, step = _accumulate(step, k_end - k_first, a_slots, b_slots, ready, empty,
                                        BLOCK_M, BLOCK_N, mma_layout, STAGES, A_T, B_T)
        if SPLIT:
            rows = gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, mma_layout))
            columns = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, mma_layout))
            offsets = gl.expand_dims(rows, 1) * BLOCK_N + gl.expand_dims(columns, 0)
            if kind == split_wave.HEAD:
                _hand_over(accumulator, partials, flags, offsets, BLOCK_M * BLOCK_N)
            else:
                if kind == split_wave.TAIL:
                    accumulator = _take_over(accumulator, split - 1, partials, flags, offsets,
                                             BLOCK_M * BLOCK_N, num_warps)
                store_at(accumulator, tile, c_desc, c_stage, num_pid_m, num_pid_n, GROUP_M)
        else:
            store_at(accumulator, tile, c_desc, c_stage, num_pid_m, num_pid_n, GROUP_M)
    tma.store_wait(pendings=0)


@gluon.jit
def grouped_gluon_kernel(a_desc, b_desc, c_desc, M, N, K, partials, flags, sk_tiles, split,
                         STAGES: gl.constexpr, GROUP_M: gl.constexpr, A_T: gl.constexpr,
                         B_T: gl.constexpr, SPLIT: gl.constexpr, num_warps: gl.constexpr):
    """C = A @ B (fp16 or bf16, fp32 accumulation): ``num_warps`` MMA warps and one loading warp.
    ``A_T``/``B_T``: ``a_desc``/``b_desc`` is over Aᵀ/Bᵀ (that operand is column-major).

    With ``SPLIT`` the last ``sk_tiles`` tiles are each split into ``split`` pieces along K
    (:mod:`~gemmzoo_triton.grouped.split_wave`). The program of a head writes its partial sum to its row of
    ``partials`` (fp32, a tile per program) and raises its entry of ``flags`` (int32, zero before
    the launch and after it); the program of the tail adds the heads in order and stores the tile.
    """
    BLOCK_K: gl.constexpr = a_desc.block_type.shape[0] if A_T else a_desc.block_type.shape[1]
    a_slots, b_slots, c_stage, ready, empty = allocate_pipeline(a_desc, b_desc, c_desc, STAGES)
    num_pid_m = gl.cdiv(M, c_desc.block_type.shape[0])
    num_pid_n = gl.cdiv(N, c_desc.block_type.shape[1])
    k_steps = gl.cdiv(K, BLOCK_K)
    gl.warp_specialize(
        [(_multiply, (a_slots, b_slots, ready, empty, c_desc, c_stage, partials, flags, num_pid_m,
                      num_pid_n, k_steps, sk_tiles, split, STAGES, GROUP_M, A_T, B_T, SPLIT,
                      num_warps)),
         (_load, (a_desc, b_desc, a_slots, b_slots, ready, empty, num_pid_m, num_pid_n, k_steps,
                  sk_tiles, split, STAGES, GROUP_M, A_T, B_T, SPLIT))],
        [1], [24])


# The host side ---------------------------------------------------------------------------------

_SCRATCH: dict[tuple[Any, int], tuple[Any, Any]] = {}


def _scratch(device: Any, rows: int, tile: int) -> tuple[Any, Any]:
    """``(partials, flags)`` for split launches on the current stream of ``device``: at least
    ``rows`` tiles of ``tile`` fp32 values and ``rows`` zeroed flags. One pair per stream (launches
    on one stream run one after the other and leave the flags lowered), grown when too small."""
    import torch

    stream = torch.cuda.current_stream(device).cuda_stream
    found = _SCRATCH.get((device, stream))
    if found is None or found[1].numel() < rows or found[0].numel() < rows * tile:
        found = (torch.empty(rows * tile, dtype=torch.float32, device=device),
                 torch.zeros(rows, dtype=torch.int32, device=device))
        _SCRATCH[(device, stream)] = found
    return found


def bind(M: int, N: int, K: int, a_t: bool, b_t: bool, sms: int, schedule: Schedule,
         device: Any) -> Any:
    """``run(x, y, c)`` for every problem of this shape and layout on ``device`` with
    ``schedule``, bound once (:func:`~gemmzoo_triton.core.gluon_parts.bind`)."""
    import torch

    config = schedule.config
    if schedule.splits:
        if not split_wave.pieces_fit(schedule.sk_tiles, schedule.split, triton.cdiv(K, config.block_k),
                                   schedule.programs):
            raise ValueError(f"{schedule} does not fit {M}x{N}x{K}: a piece a program, a K step a piece")
        tile = config.block_m * config.block_n

        def extra() -> tuple[Any, ...]:
            return (*_scratch(device, schedule.programs, tile), schedule.sk_tiles, schedule.split)
    else:
        unused = (torch.empty(1, dtype=torch.float32, device=device),
                  torch.empty(1, dtype=torch.int32, device=device))

        def extra() -> tuple[Any, ...]:
            return (*unused, 0, 1)

    return gluon_parts.bind(grouped_gluon_kernel, M, N, K, a_t, b_t, sms, config,
                            programs=schedule.programs, extra=extra, device=device, A_T=a_t, B_T=b_t,
                            SPLIT=schedule.splits)
