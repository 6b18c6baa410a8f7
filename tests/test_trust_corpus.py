"""The clever-backend corpus (tests/clever_backends.py): every backend in it is caught by the
suite or by the check of timed calls, and nothing times, ranks or crowns one that did not pass."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from clever_backends import CLASSES, install
from fake_distributions import run_gemmzoo

from gemmzoo.conformance import check_backend
from gemmzoo.conformance.independence import check_fresh, shares_memory
from gemmzoo.conformance.judge import CheckFailedError
from gemmzoo.plugins.registry import get_registry
from gemmzoo.problems.grids import GridPoint
from gemmzoo.scale.bench import OK, WRONG, BenchResult, bench_one, run_bench

TESTS = Path(__file__).parent
CAUGHT_BY_SUITE = {
    "clever-zeros-strided": "outside the error bound",
    "clever-holds-float32": "does not hold the caller's values",
    "clever-same-output": "shares memory with the result of call 1",
    "clever-returns-a": "was changed by call 2",
    "clever-wrong-above-256": "300x5x8",
}


@pytest.mark.parametrize("name", sorted(CAUGHT_BY_SUITE))
def test_the_suite_catches_each_clever_backend(name: str) -> None:
    report = check_backend(CLASSES[name]())
    assert not report.passed
    details = " | ".join(f"{f.check}: {f.detail}" for f in report.failures)
    assert CAUGHT_BY_SUITE[name] in details, details


def test_a_backend_wrong_only_on_timed_calls_is_caught_when_timed(empty_cache: Path) -> None:
    backend = CLASSES["clever-wrong-when-timed"]()
    assert check_backend(backend, ["float32"]).passed
    result = bench_one(backend, GridPoint(96, 80, 64, "float32"), budget_s=0.05)
    assert result.status == WRONG and "timed call" in result.detail, result.detail
    honest = bench_one(get_registry().get("numpy"), GridPoint(96, 80, 64, "float32"), budget_s=0.05)
    assert honest.status == OK


def test_shares_memory_sees_views_and_identity_but_not_copies() -> None:
    a = np.random.default_rng(1).standard_normal((8, 8))
    assert shares_memory(a, a) and shares_memory(a, a[2:, ::2]) and shares_memory(a.T, a)
    assert not shares_memory(a, a.copy())
    with pytest.raises(CheckFailedError, match="shares memory with A"):
        check_fresh(a[:4], {"A": a})
    torch = pytest.importorskip("torch")
    t = torch.randn(6, 6)
    assert shares_memory(t, t[1:]) and not shares_memory(t, t.clone())


def test_run_bench_times_nothing_without_a_pass(empty_cache: Path) -> None:
    numpy_backend, cheat = get_registry().get("numpy"), CLASSES["clever-zeros-strided"]()
    asked: list[tuple[str, str]] = []

    def verdict(backend: object, dtype: str) -> tuple[str, str]:
        asked.append((backend.name, dtype))
        return ("passed" if backend is numpy_backend else "not passed"), "failed here"

    points = [GridPoint(64, 64, 64, "float32"), GridPoint(32, 48, 16, "float32")]
    results = run_bench([numpy_backend, cheat], points, budget_s=0.05, rounds=2, verdict=verdict)
    by = {(r.backend, r.point): r for r in results}
    assert all(by[("numpy", p)].status == OK for p in points)
    assert all(by[(cheat.name, p)].status == WRONG for p in points)
    assert all(by[(cheat.name, p)].measurement is None for p in points)
    assert sorted(set(asked)) == [(cheat.name, "float32"), ("numpy", "float32")]  # asked once a dtype


def test_the_pytest_benchmark_path_refuses_a_backend_that_failed(empty_cache: Path) -> None:
    from gemmzoo.measure import WrongResultError
    from gemmzoo.pytest.bench import run_benchmark

    with pytest.raises(WrongResultError, match="failed the conformance suite"):
        run_benchmark(None, CLASSES["clever-zeros-strided"](), GridPoint(64, 64, 64, "float32"))


def test_bench_shows_a_failed_backend_as_wrong_and_exits_1(tmp_path: Path) -> None:
    site = tmp_path / "site"
    site.mkdir()
    install(site, ["clever-zeros-strided"])
    path = os.pathsep.join([str(site), str(TESTS), os.environ.get("PYTHONPATH", "")])
    out = tmp_path / "run.json"
    done = run_gemmzoo(site, "bench", "--backend", "clever-zeros-strided", "--backend", "numpy", "--shape",
                       "128x128x128", "--budget", "0.05", "--rounds", "1", "--json", str(out),
                       GEMMZOO_CACHE_DIR=str(tmp_path / "cache"), PYTHONPATH=path)
    assert done.returncode == 1, done.stdout + done.stderr
    rows = {r["backend"]: r for r in json.loads(out.read_text())["results"]}
    assert rows["clever-zeros-strided"]["status"] == "wrong"
    assert "failed the conformance suite" in rows["clever-zeros-strided"]["detail"]
    assert rows["clever-zeros-strided"]["median_s"] is None and rows["numpy"]["status"] == "ok"
    assert rows["clever-zeros-strided"].get("verdict") != "best"


class _FakeBenchmark:
    """The little of pytest-benchmark's fixture the CPU path uses: calls, stats, extra_info."""

    def __init__(self) -> None:
        import time
        from types import SimpleNamespace

        self.extra_info: dict[str, object] = {}
        self.enabled = True
        self._clock = time.perf_counter
        self.stats = SimpleNamespace(stats=SimpleNamespace(data=[], median=None))

    def __call__(self, target):
        import statistics

        data = self.stats.stats.data
        begin = self._clock()
        while len(data) < 30 or self._clock() - begin < 0.05:  # long enough to read contention
            start = self._clock()
            target()
            data.append(self._clock() - start)
        self.stats.stats.median = statistics.median(data)

    def pedantic(self, target, rounds=1, iterations=1, warmup_rounds=0):
        import statistics

        for _ in range(warmup_rounds):
            target()
        data = self.stats.stats.data
        begin = self._clock()
        while len(data) < rounds or self._clock() - begin < 0.05:  # long enough to read contention
            start = self._clock()
            for _ in range(iterations):
                target()
            data.append((self._clock() - start) / iterations)
        self.stats.stats.median = statistics.median(data)


def test_the_pytest_benchmark_path_records_the_thread_policy_and_the_flags(empty_cache: Path) -> None:
    from gemmzoo.pytest.bench import run_benchmark

    fake = _FakeBenchmark()
    info = run_benchmark(fake, get_registry().get("numpy"), GridPoint(64, 64, 64, "float32"))
    assert info["threads"] >= 1 and info["thread_policy"] and isinstance(info["thread_pools"], dict)
    assert isinstance(info["converged"], bool) and info["noise_target"] == pytest.approx(0.02)
    assert isinstance(info.get("contended"), bool) and 0 <= info["cpu_share"] <= 1
    assert fake.extra_info["threads"] == info["threads"]


def test_a_time_below_the_roofline_is_flagged_and_never_best() -> None:
    from gemmzoo.measure import Measurement, Timing
    from gemmzoo.measure.roofline import Roofline
    from gemmzoo.results.report import verdicts

    point = GridPoint(4096, 4096, 4096, "float16")
    timing = Timing(1e-6, 0.99e-6, 1.01e-6, 50, "test", noise=0.001, converged=True, target=0.02)
    honest_timing = Timing(2e-4, 1.99e-4, 2.01e-4, 50, "test", noise=0.001, converged=True, target=0.02)
    cheat = BenchResult("cheat", "cuda", point, OK, Measurement("cheat", point, timing, 0.5),
                        roof=Roofline(None, 989.0, 3350.0, 1.4e-4, "compute", efficiency=140.0))
    honest = BenchResult("honest", "cuda", point, OK, Measurement("honest", point, honest_timing, 0.5),
                         roof=Roofline(None, 989.0, 3350.0, 1.4e-4, "compute", efficiency=0.7))
    assert cheat.beyond_roofline and not honest.beyond_roofline
    assert cheat.as_dict()["beyond_roofline"] is True
    marks = verdicts({"cheat": cheat, "honest": honest})
    assert marks.get("cheat") != "best" and marks.get("honest") != "best"  # faster row unranked: undecided
