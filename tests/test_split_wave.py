"""The split of the last wave (gemmzoo_triton.grouped.split_wave), run as Triton code: every program's
units enumerated by a small kernel (under the interpreter without a GPU) and checked for
coverage, order and the hand-overs."""

from __future__ import annotations

import itertools
from collections import defaultdict

import pytest

torch = pytest.importorskip("torch")
triton = pytest.importorskip("triton")
import triton.language as tl  # noqa: E402

from gemmzoo_triton.grouped import split_wave  # noqa: E402

FIELDS = tl.constexpr(4)  # tile, first K step, end K step, kind


@triton.jit
def _units_kernel(out, tiles, k_steps, sk_tiles, split, MAX_UNITS: tl.constexpr,  # noqa: N803
                  SPLIT: tl.constexpr):  # noqa: N803
    pid = tl.program_id(0)
    count = split_wave.unit_count(tiles, sk_tiles, split, SPLIT)
    row = out + pid * (1 + MAX_UNITS * FIELDS)
    tl.store(row, count)
    for i in range(count):
        tile, k_first, k_end, kind = split_wave.unit(i, tiles, k_steps, sk_tiles, split, SPLIT)
        tl.store(row + 1 + i * FIELDS + 0, tile)
        tl.store(row + 1 + i * FIELDS + 1, k_first)
        tl.store(row + 1 + i * FIELDS + 2, k_end)
        tl.store(row + 1 + i * FIELDS + 3, kind)


def _units(tiles: int, k_steps: int, sk_tiles: int, split: int, programs: int) -> list[list[tuple[int, ...]]]:
    """Each program's units as the kernel's code enumerates them."""
    device = "cuda" if torch.cuda.is_available() else "cpu"
    max_units = tiles + 1
    out = torch.full((programs, 1 + max_units * FIELDS), -7, dtype=torch.int32, device=device)
    _units_kernel[(programs,)](out, tiles, k_steps, sk_tiles, split, max_units, split > 1)
    rows = out.cpu().tolist()
    return [[tuple(row[1 + i * FIELDS:1 + (i + 1) * FIELDS]) for i in range(row[0])] for row in rows]


# (tiles, K steps a tile, tiles split, pieces a tile, programs): 2176^2 in 128x128 tiles on 132
# SMs (25 tiles left after two waves, 5 pieces each); 3072^2 (48 left, 2 pieces); fewer tiles
# than programs (long K: 16 tiles in 8 pieces); pieces of one K step; pieces of uneven length
SCHEDULES = [
    (289, 34, 25, 5, 132),
    (576, 48, 48, 2, 132),
    (16, 256, 16, 8, 132),
    (3, 3, 3, 3, 10),
    (23, 10, 3, 3, 10),
]


@pytest.mark.parametrize("tiles, k_steps, sk_tiles, split, programs", SCHEDULES)
def test_every_k_step_of_every_tile_runs_once_and_heads_reach_their_tail(tiles, k_steps, sk_tiles, split,
                                                                          programs):
    assert split_wave.pieces_fit(sk_tiles, split, k_steps, programs)
    units = _units(tiles, k_steps, sk_tiles, split, programs)
    runs: dict[int, list[tuple[int, int]]] = defaultdict(list)
    heads: dict[int, list[int]] = defaultdict(list)
    tails: dict[int, list[int]] = defaultdict(list)
    pieces = defaultdict(list)
    for pid, program in enumerate(units):
        for i, (tile, k_first, k_end, kind) in enumerate(program):
            assert 0 <= tile < tiles and 0 <= k_first < k_end <= k_steps
            runs[tile].append((k_first, k_end))
            if kind == split_wave.WHOLE:
                assert (k_first, k_end) == (0, k_steps) and tile < tiles - sk_tiles
                continue
            assert i == len(program) - 1, "a piece comes after a program's whole tiles"
            pieces[tile].append((pid, k_first))
            if kind == split_wave.TAIL:
                assert k_end == k_steps
                tails[tile].append(pid)
            else:
                assert kind == split_wave.HEAD
                heads[tile].append(pid)
    for tile in range(tiles):
        covered = sorted(runs[tile])
        assert covered[0][0] == 0 and covered[-1][1] == k_steps
        assert all(a[1] == b[0] for a, b in itertools.pairwise(covered)), f"tile {tile}: {covered}"
        if tile < tiles - sk_tiles:
            assert len(covered) == 1
            continue
        # the tail adds the heads of the split - 1 programs just before its own
        ((taker,),) = (tails[tile],)
        assert sorted(heads[tile]) == list(range(taker - split + 1, taker))
        # piece j of every split tile starts at the same K step: the wave reads A and B in step
        assert [k for _, k in sorted(pieces[tile])] == [j * k_steps // split for j in range(split)]
    # whole tiles spread evenly
    whole = [sum(1 for unit in program if unit[3] == split_wave.WHOLE) for program in units]
    assert max(whole) - min(whole) <= 1


def test_without_a_split_every_program_takes_every_programs_th_tile():
    units = _units(29, 4, 0, 1, 8)
    for pid, program in enumerate(units):
        assert [unit[0] for unit in program] == list(range(pid, 29, 8))
        assert all(unit[1:4] == (0, 4, split_wave.WHOLE) for unit in program)


def test_a_split_needs_a_program_a_piece_and_a_k_step_a_piece():
    assert split_wave.pieces_fit(25, 5, 34, 132)
    assert not split_wave.pieces_fit(25, 6, 34, 132)
    assert not split_wave.pieces_fit(2, 40, 34, 132)
