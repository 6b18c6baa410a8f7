"""The suite's random operands: a large one drawn in chunks side by side, fixed by the case's seed."""

from __future__ import annotations

import numpy as np

from gemmzoo.conformance import runner


def test_a_large_operand_is_drawn_in_chunks_fixed_by_the_seed():
    shape = (2049, 2051)  # past PARALLEL_DRAW, not a multiple of the chunk count
    assert shape[0] * shape[1] >= runner.PARALLEL_DRAW
    first = runner._normal(np.random.default_rng(11), shape)
    again = runner._normal(np.random.default_rng(11), shape)
    other = runner._normal(np.random.default_rng(12), shape)
    np.testing.assert_array_equal(first, again)
    assert first.shape == shape and first.dtype == np.float64 and np.isfinite(first).all()
    assert not np.isclose(first, other).all()
    # every chunk filled (np.empty's leftovers would show), each chunk its own stream, and the whole
    # standard normal: mean, spread and tails within a few standard errors of N(0, 1)
    chunks = np.array_split(first.reshape(-1), runner.DRAW_CHUNKS)
    assert len({round(float(c[:8].sum()), 9) for c in chunks}) == runner.DRAW_CHUNKS
    size = first.size
    assert abs(first.mean()) < 5 / np.sqrt(size)
    assert abs(first.std() - 1) < 5 / np.sqrt(2 * size)
    assert abs((np.abs(first) > 2).mean() - 0.0455) < 0.002


def test_a_small_operand_is_the_generator_s_own_draw():
    shape = (37, 41)
    np.testing.assert_array_equal(runner._normal(np.random.default_rng(3), shape),
                                  np.random.default_rng(3).standard_normal(shape))
