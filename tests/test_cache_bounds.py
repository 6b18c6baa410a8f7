"""A session's per-problem caches are bounded: the least recently used problem is forgotten first,
and a program meeting thousands of distinct problems keeps its memory while every result stays
right."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

import gemmzoo
from gemmzoo.dispatch.matmul import keep_plan
from gemmzoo.dispatch.plan_cache import CACHE_SIZE, LRUCache, PlanCache


def test_the_least_recently_used_entry_goes_first():
    cache = LRUCache(3)
    for key in "abc":
        cache[key] = key.upper()
    assert cache["a"] == "A"  # a is now the most recently used
    cache["d"] = "D"
    assert list(cache) == ["c", "a", "d"] and "b" not in cache
    assert cache.get("c") == "C" and cache.get("b", "gone") == "gone"
    cache["e"] = "E"  # c was read last, so a is now the least recently used
    assert len(cache) == 3 and "a" not in cache and list(cache) == ["d", "c", "e"]
    for bad in (0, -1, 2.5, True, "8"):
        with pytest.raises(ValueError, match="cache_size"):
            LRUCache(bad)


def test_plans_past_the_bound_forget_the_least_recently_used():
    plans = PlanCache(2)
    keep_plan(plans, ("a",), "plan a")
    keep_plan(plans, ("b",), "plan b")
    plans.plans.move_to_end(("a",))  # what the dispatch does when it finds a plan
    keep_plan(plans, ("c",), "plan c")
    assert list(plans.plans) == [("a",), ("c",)] and plans.last == (("c",), "plan c")
    assert PlanCache().size == CACHE_SIZE == PlanCache.MAX_PLANS


def _operands(rng: np.random.Generator, m: int, n: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    return rng.standard_normal((m, k)).astype(np.float32), rng.standard_normal((k, n)).astype(np.float32)


def _right(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> bool:
    want = a.astype(np.float64) @ b.astype(np.float64)
    bound = 1e-5 * (np.abs(a).astype(np.float64) @ np.abs(b).astype(np.float64)) + 1e-30
    return c.shape == want.shape and c.dtype == np.float32 and bool(np.all(np.abs(c - want) <= bound))


def test_ten_thousand_distinct_problems_keep_the_plans_bounded(empty_cache):
    rng = np.random.default_rng(7)
    shapes = [(m, n, 3) for m in range(1, 101) for n in range(1, 101)]  # 10,000 distinct problems
    with gemmzoo.Session(cache_size=1000, record=False) as session:
        tracemalloc.start()
        try:
            for count, (m, n, k) in enumerate(shapes, 1):
                a, b = _operands(rng, m, n, k)
                assert _right(a, b, gemmzoo.matmul(a, b, backend="numpy")), (m, n, k)
                if count == 5000:
                    halfway = tracemalloc.get_traced_memory()[0]
            end = tracemalloc.get_traced_memory()[0]
        finally:
            tracemalloc.stop()
        assert len(session.plan_cache.plans) == 1000
        # the second 5,000 problems add no memory of their own (plans are forgotten as fast as made)
        assert end - halfway < 200_000, (halfway, end)
        for m, n, k in shapes[:3] + shapes[-3:]:  # forgotten long ago, or still kept: right either way
            a, b = _operands(rng, m, n, k)
            assert _right(a, b, gemmzoo.matmul(a, b, backend="numpy"))


def test_answers_past_the_bound_are_asked_again_and_stay_right(empty_cache, monkeypatch):
    monkeypatch.setenv("GEMMZOO_BACKENDS", "numpy")
    rng = np.random.default_rng(8)
    shapes = [(m, 5, k) for m in range(1, 21) for k in range(1, 11)]  # 200 distinct problems
    with gemmzoo.Session(cache_size=50, tune=False, record=False) as session:
        for m, n, k in shapes:
            a, b = _operands(rng, m, n, k)
            assert _right(a, b, gemmzoo.matmul(a, b))
            assert gemmzoo.best_backend((m, n, k), measure=False).name == "numpy"
        assert len(session.answers) == 50 and len(session.plan_cache.plans) == 50
        kept = list(session.answers)
        first = shapes[0]
        assert not any(first in key for key in kept)  # the oldest problems were forgotten
        a, b = _operands(rng, *first)
        assert _right(a, b, gemmzoo.matmul(a, b))  # asked again, still right
        assert len(session.answers) == 50
