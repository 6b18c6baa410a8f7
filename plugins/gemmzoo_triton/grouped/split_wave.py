"""Which tiles and K steps each program of a persistent launch runs: whole tiles in turn, then
the tiles of the last, partial wave split along K between the programs it would leave idle.

Plain ``triton.jit`` functions of scalars, so that Gluon kernels call them on the GPU and the
interpreter runs them in CI (tests/test_split_wave.py enumerates every program's units).

A launch of ``programs`` programs over ``tiles`` tiles of ``k_steps`` K steps runs the first
``tiles - sk_tiles`` tiles whole, every ``programs``-th from a program's id on. Each of the last
``sk_tiles`` is cut into ``split`` **pieces** of consecutive K steps: program ``q`` (for
``q < sk_tiles * split``) runs piece ``q % split`` of tile ``q // split`` after its whole tiles.
All pieces of the last wave run at the same time, each at the same K steps as the pieces of the
same number of the neighbouring tiles, which read the same slices of A or B: what one reads,
L2 holds for the others, as in the whole waves. (A split that let programs start tiles at
arbitrary K steps, as stream-K does, loses that and was much slower at long K:
docs/results/2026-11-23-grouped-split-wave.md.) The last piece of a tile is its **tail**: its
program adds the others' partial sums (the **heads**, handed over through a scratch buffer by
the programs just before it) and stores the tile. So a program waits only for earlier
programs, and only for pieces that run beside its own.
"""

# ruff: noqa: N803 - upper-case constexprs, as in the kernels

from __future__ import annotations

import triton
import triton.language as tl

WHOLE = tl.constexpr(0)
"""A unit that is a whole tile: stored to C."""
HEAD = tl.constexpr(1)
"""A piece of a split tile other than its last: handed over to the tail's program."""
TAIL = tl.constexpr(2)
"""The last piece of a split tile: the heads added, then stored."""


@triton.jit
def unit_count(tiles, sk_tiles, split, SPLIT: tl.constexpr):
    """How many units this program runs (see :func:`unit`)."""
    pid = tl.program_id(0)
    count = tl.maximum(tl.cdiv(tiles - sk_tiles - pid, tl.num_programs(0)), 0)
    if SPLIT:
        count += (pid < sk_tiles * split).to(tl.int32)
    return count


@triton.jit
def unit(i, tiles, k_steps, sk_tiles, split, SPLIT: tl.constexpr):
    """Unit ``i`` of this program: ``(tile, first K step, end K step, kind)``, kind one of
    :data:`WHOLE`, :data:`HEAD`, :data:`TAIL`. Without SPLIT, every ``num_programs``-th tile
    from the program's id on."""
    pid = tl.program_id(0)
    programs = tl.num_programs(0)
    tile = pid + i * programs
    k_first = i * 0
    k_end = k_first + k_steps
    kind = k_first + WHOLE
    if SPLIT:
        whole_tiles = tiles - sk_tiles
        if i >= tl.maximum(tl.cdiv(whole_tiles - pid, programs), 0):
            piece = pid % split
            tile = whole_tiles + pid // split
            k_first = piece * k_steps // split
            k_end = (piece + 1) * k_steps // split
            kind = tl.where(piece == split - 1, TAIL, HEAD)
    return tile, k_first, k_end, kind


def pieces_fit(sk_tiles: int, split: int, k_steps: int, programs: int) -> bool:
    """Whether a split is one the kernels can run: a piece per program at most, and at least one
    K step a piece."""
    return sk_tiles * split <= programs and 1 <= split <= k_steps
