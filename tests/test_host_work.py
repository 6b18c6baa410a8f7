"""Block-wise host work (gemmzoo.measure.host_work): every element covered once, the same values whatever
the thread count, and the operands and conversions built on it."""

from __future__ import annotations

import numpy as np
import pytest

from gemmzoo.contract.fp8 import E4M3, e4m3_to_float32, to_e4m3
from gemmzoo.measure import host_work, problems


@pytest.mark.parametrize("size", [0, 1, host_work.BLOCK - 1, host_work.BLOCK, 3 * host_work.BLOCK + 17])
def test_blocks_cover_every_element_once(size):
    seen = np.zeros(size, np.int8)

    def mark(part):
        seen[part] += 1

    host_work.each_block(size, mark)
    assert np.all(seen == 1)
    lengths = [part.stop - part.start for part in host_work.blocks(size)]
    assert all(length == host_work.BLOCK for length in lengths[:-1]) and sum(lengths) == size


def test_an_error_in_a_block_is_raised():
    def fail(part):
        if part.start > 0:
            raise ValueError(f"block at {part.start}")

    with pytest.raises(ValueError, match="block at"):
        host_work.each_block(2 * host_work.BLOCK, fail)


@pytest.mark.parametrize("layout", ["NN", "NT", "TN", "TT"])
def test_large_operands_do_not_depend_on_the_thread_count(layout, monkeypatch):
    m, n, k = 300, 5000, 1700  # over PARALLEL_DRAW_ELEMENTS together
    assert m * k + k * n > problems.PARALLEL_DRAW_ELEMENTS
    drawn = {}
    for count in (1, 3):
        monkeypatch.setattr(host_work, "threads", lambda count=count: count)
        drawn[count] = problems._drawn(m, n, k, 7, layout, np.float32)
    for one, several in zip(drawn[1], drawn[3], strict=True):
        assert one.dtype == np.float32 and np.array_equal(one, several)
        assert abs(float(one.mean())) < 0.01 and abs(float(one.std()) - 1) < 0.01
    a, b = drawn[1]
    assert a.shape == (m, k) and b.shape == (k, n)
    assert a.flags.f_contiguous == (layout[0] == "T") and b.flags.f_contiguous == (layout[1] == "T")
    assert not np.array_equal(a[:, :1].ravel()[:100], b[:1, :].ravel()[:100])  # A and B: other streams


def test_rounding_and_conversion_in_blocks_match_whole_array_work(monkeypatch):
    x = np.random.default_rng(3).standard_normal(2 * host_work.BLOCK + 999, dtype=np.float32) * 100
    x[:4] = [np.inf, -np.inf, np.nan, 1e6]
    monkeypatch.setattr(host_work, "threads", lambda: 3)
    rounded = to_e4m3(x)
    whole = np.clip(np.where(np.isinf(x), np.nan, x), -448, 448).astype(E4M3)
    assert np.array_equal(rounded.view(np.uint8)[4:], whole.view(np.uint8)[4:])
    assert np.isnan(rounded[:3].astype(np.float32)).all() and float(rounded[3].astype(np.float32)) == 448
    values = e4m3_to_float32(rounded)
    assert values.dtype == np.float32
    assert np.array_equal(values, rounded.astype(np.float32), equal_nan=True)


def test_e4m3_to_float32_keeps_every_byte_and_the_memory_order():
    codes = np.arange(256, dtype=np.uint8).view(E4M3)
    assert np.array_equal(e4m3_to_float32(codes), codes.astype(np.float32), equal_nan=True)
    stored = to_e4m3(np.random.default_rng(4).standard_normal((37, 53), dtype=np.float32))
    column_major = e4m3_to_float32(stored.T)
    assert column_major.flags.f_contiguous and np.array_equal(column_major, stored.T.astype(np.float32))
    strided = stored[::2, ::3]
    assert np.array_equal(e4m3_to_float32(strided), strided.astype(np.float32))
