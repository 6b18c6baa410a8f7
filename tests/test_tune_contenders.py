"""``gemmzoo tune --recorded``'s own rules: problems once each and heaviest first, candidates only
where they can win, samples that stop once a candidate is settled slower, one time budget, and
suites bounded by a time limit."""

from __future__ import annotations

import functools
import itertools

import numpy as np
import pytest
from sessions import scoped
from suite_targets import never_ends, passes_at_once
from tuning_fakes import registry_with

import gemmzoo
from gemmzoo.cli import main
from gemmzoo.measure.stats import StoppingRule
from gemmzoo.problems.grids import GridPoint
from gemmzoo.tuning import state
from gemmzoo.tuning.contenders import (
    ESCALATE_RATIO,
    Budget,
    candidate_order,
    contends,
    escalates,
    gathered,
    rival_s,
    work_share,
)
from gemmzoo.tuning.fingerprint import device_fingerprint
from gemmzoo.tuning.suites import SuitePool
from gemmzoo_numpy.backend import NumpyBackend

pytestmark = pytest.mark.usefixtures("empty_cache")


def test_each_problem_once_with_its_counts_summed_and_the_heaviest_work_first():
    small = GridPoint(64, 64, 64, "float32", "NN")
    head = GridPoint(512, 5003, 64, "float32", "NT")
    block = GridPoint(512, 256, 64, "float32", "NT")
    rows = [(small, "cpu", 50), (head, "cpu", 1), (block, "cpu", 12), (block, "cpu", 12), (block, "cuda", 1),
            (GridPoint(512, 256, 64, "float32", "NN"), "cpu", 2)]
    problems = gathered(rows)
    assert len(problems) == 5  # the same block twice on the CPU is one problem; on CUDA, or NN, another
    assert [(p.point, p.device, p.seen) for p in problems[:3]] == [(block, "cpu", 24), (head, "cpu", 1),
                                                                   (GridPoint(512, 256, 64, "float32", "NN"),
                                                                    "cpu", 2)]
    assert [p.weight for p in problems] == sorted((p.weight for p in problems), reverse=True)
    assert problems[0].weight == 24 * block.flops
    total = sum(p.weight for p in problems)
    assert work_share(problems[:1], problems) == pytest.approx(problems[0].weight / total)
    assert work_share([], []) == 0.0


class Routed(NumpyBackend):
    def __init__(self, name: str, contends: tuple = ()) -> None:
        self.name = name
        self.contends = contends


def test_a_backend_contends_only_where_a_declared_route_matches_and_says_why_not_elsewhere():
    decode = Routed("decode-fake", ({"max_m": 64, "why": "above 64 rows it runs another plan"},))
    wide = Routed("wide-fake", ({"max_mn": 1000, "dtypes": ("float32",)},))
    padded = Routed("padded-fake", ({"misaligned_bytes": 16, "why": "aligned rows: the vendor's own call"},))
    point = GridPoint(8192, 768, 768, "bfloat16", "NT")
    assert contends(decode, point, "cuda", "sm_90", "torch") == "above 64 rows it runs another plan"
    assert contends(decode, GridPoint(16, 768, 768, "bfloat16", "NT"), "cuda", "sm_90", "torch") is None
    assert contends(padded, point, "cuda", "sm_90", "torch") == "aligned rows: the vendor's own call"
    assert contends(padded, GridPoint(8192, 50257, 768, "bfloat16", "NT"), "cuda", "sm_90", "torch") is None
    assert contends(wide, GridPoint(10, 100, 5, "float32", "NN"), "cpu", "x86_64", "numpy") is None
    assert "do not match" in contends(wide, GridPoint(10, 101, 5, "float32", "NN"), "cpu", "x86_64", "numpy")
    assert "do not match" in contends(wide, GridPoint(10, 100, 5, "float64", "NN"), "cpu", "x86_64", "numpy")
    # no declaration, a route with a key this gemmzoo does not know, or one that cannot be read: timed
    assert contends(Routed("plain-fake"), point, "cuda", "sm_90", "torch") is None
    odd = Routed("odd-fake", ({"max_m": 1, "future_key": 3},))
    assert contends(odd, point, "cuda", "sm_90", "torch") is None

    class Broken(NumpyBackend):
        name = "broken-fake"

        @property
        def contends(self):
            raise RuntimeError("no")

    assert contends(Broken(), point, "cuda", "sm_90", "torch") is None


def test_the_bundled_declarations_pass_over_only_what_runs_another_backends_call():
    pytest.importorskip("torch")
    padded, decode = gemmzoo.get_backend("torch-padded"), gemmzoo.get_backend("triton-decode")
    aligned, head = GridPoint(8192, 768, 768, "bfloat16", "NT"), GridPoint(8192, 50257, 768, "bfloat16", "NT")
    assert "torch's own call" in contends(padded, aligned, "cuda", "sm_90", "torch")
    assert contends(padded, head, "cuda", "sm_90", "torch") is None
    assert "triton-splitk" in contends(decode, aligned, "cuda", "sm_90", "torch")
    assert contends(decode, GridPoint(16, 4096, 4096, "bfloat16", "NT"), "cuda", "sm_90", "torch") is None
    assert contends(gemmzoo.get_backend("triton-grouped"), aligned, "cuda", "sm_90", "torch") is None


def test_the_baseline_and_the_current_pick_go_first_and_rivals_never_tie():
    order = candidate_order(["a", "b", "torch", "pick"], ["torch", "cupy", "pick"])
    assert order == ["torch", "pick", "a", "b"]
    assert candidate_order(["a", "b"], [None, "torch"]) == ["a", "b"]
    from gemmzoo.measure.ties import Estimate, tied

    leader = Estimate("leader", 1e-3, 0.5e-4)
    above = rival_s(1e-3, 1e-4)
    assert above > 1e-3 * 1.01
    settled = Estimate("slower", above * 1.001, 0.0)
    assert not tied(leader, settled)
    assert escalates(1.2e-3, 1e-3) and not escalates(ESCALATE_RATIO * 1e-3 * 1.01, 1e-3)
    assert escalates(None, 1e-3) and escalates(1e-3, None)


def test_samples_stop_once_slower_than_the_rival_beyond_doubt_and_not_before():
    ticks = itertools.count()
    clock = functools.partial(next, ticks)  # one "second" per reading: the minimum time never passes
    rule = StoppingRule(budget_s=1e9, min_time_s=1e9, clock=clock, settle_above_s=1.0)
    rule.start()
    rng = np.random.default_rng(0)
    slower = []
    while not rule.done(slower):
        slower.append(float(1.5 + 0.01 * rng.standard_normal()))
        assert len(slower) < 100
    assert rule.settled and not rule.converged and len(slower) == 6
    assert "slower than a rival" in rule.timing(slower, "events").method
    # samples that straddle the rival never settle: the noise target or the budget decides
    rule = StoppingRule(budget_s=40, target=0.0, clock=clock, settle_above_s=1.0)
    rule.start()
    close = []
    while not rule.done(close):
        close.append(float(1.0 + 0.05 * rng.standard_normal()))
    assert not rule.settled and len(close) > 6


def test_a_time_budget_counts_from_its_start_and_must_be_positive():
    now = [100.0]
    budget = Budget(10, clock=lambda: now[0])
    assert budget.left() == 10 and not budget.over
    now[0] = 110.0
    assert budget.over and budget.spent() == 10
    with pytest.raises(ValueError, match="positive"):
        Budget(0)


def test_a_suite_past_its_time_limit_is_ended_without_a_verdict_and_never_holds_up_the_others():
    with SuitePool([("slow", "float32"), ("good", "float32"), ("bad", "float32")], workers=2, limit_s=1.0,
                   target=never_ends) as pool:
        assert len(pool.pending) == 3
        ended = pool.wait(None)
    assert {(f.name, f.passed) for f in ended} == {("slow", None), ("good", None), ("bad", None)}
    assert all("time limit" in f.why for f in ended)
    jobs = [("slow", "float32"), ("later", "float32")]
    with SuitePool(jobs, workers=1, limit_s=600, target=never_ends) as pool:
        ended = pool.wait(0.5)  # the run's budget ends first: the running one and the queued one end
    assert {(f.name, f.passed) for f in ended} == {("slow", None), ("later", None)} and pool.done
    assert all("time budget" in f.why for f in ended)
    with SuitePool([("good", "float32"), ("bad", "float32"), ("good", "float32")], workers=2, limit_s=60,
                   target=passes_at_once) as pool:
        ended = pool.wait()
    assert sorted((f.name, f.passed) for f in ended) == [("bad", False), ("good", True)]  # each suite once


class Slow(NumpyBackend):
    """NumPy's product, slowed at the test's problem only (its suite stays quick)."""

    def __init__(self, name: str, contends: tuple = ()) -> None:
        self.name = name
        self.contends = contends

    def matmul(self, a, b):
        import time

        if a.shape == (96, 40):
            time.sleep(0.002)
        return super().matmul(a, b)


def _record(*shapes: tuple[int, int, int]) -> None:
    rng = np.random.default_rng(0)
    for m, n, k in shapes:
        gemmzoo.matmul(rng.standard_normal((m, k)).astype(np.float32),
                       rng.standard_normal((k, n)).astype(np.float32))


def test_passed_over_backends_are_said_and_a_slower_one_stops_sampling_early(capsys):
    registry = registry_with(NumpyBackend(), Slow("slow-fake"),
                             Slow("decode-fake", ({"max_m": 8, "why": "above 8 rows it runs another plan"},)))
    with scoped(registry=registry):
        _record((96, 30, 40))
        assert main(["tune", "--recorded", "--budget", "0.2"]) == 0
        err = capsys.readouterr().err
        assert "not timed: decode-fake where above 8 rows it runs another plan" in err
        assert "[1/1] 96x30x40 float32 cpu: numpy" in err
        rows = state.store().records(device_fingerprint("cpu"), "float32", "NN", (96, 30, 40))
        by_name = {r.backend: r for r in rows}
        assert set(by_name) == {"numpy", "slow-fake"}
        # two milliseconds a call against microseconds: settled at the fewest samples, not 0.2 s of them
        assert by_name["slow-fake"].samples < 20 and by_name["slow-fake"].median_s > 0.0019
        assert not state.store().recorded(device_fingerprint("cpu"))


def test_the_budget_goes_to_the_heaviest_problems_and_the_rest_stay_recorded(capsys, monkeypatch):
    import gemmzoo.cli.recorded_run as run

    with scoped(registry=registry_with(NumpyBackend())):
        _record((8, 8, 8), (64, 48, 40), (16, 16, 16))
        store = state.store()
        measured = lambda: float(len(store.records(device_fingerprint("cpu"), "float32", "NN")))  # noqa: E731
        # "time" passes one second per measurement stored: the budget ends after the first problem
        monkeypatch.setattr(run, "Budget", functools.partial(Budget, clock=measured))
        assert main(["tune", "--recorded", "--time-budget", "0.5", "--budget", "0.01"]) == 0
        err = capsys.readouterr().err
        assert "[1/3] 64x48x40 float32 cpu: numpy" in err and "[2/3]" not in err
        assert "2 of 3 problems not (fully) measured" in err and "stay recorded" in err
        left = {(p.m, p.n, p.k) for p, _seen in store.recorded(device_fingerprint("cpu"))}
        assert left == {(8, 8, 8), (16, 16, 16)}


class Watching(NumpyBackend):
    """NumPy's product, noting the operands it is given."""

    def __init__(self, name: str, seen: list) -> None:
        self.name = name
        self.seen = seen

    def matmul(self, a, b):
        self.seen.append((self.name, a))  # kept alive: no id is reused meanwhile
        return super().matmul(a, b)


class OwnArrays(Watching):
    def from_numpy(self, x, dtype):
        return super().from_numpy(x, dtype).copy()


def test_backends_converting_arrays_with_the_same_code_are_measured_on_one_set_of_operands():
    from gemmzoo.tuning.tune import measure_in_turn

    seen: list = []
    backends = [Watching("first-fake", seen), Watching("second-fake", seen), OwnArrays("own-fake", seen)]
    records = measure_in_turn(backends, GridPoint(40, 24, 32, "float32", "NN"), 0.01, True)
    assert [r.backend for r in records] == ["first-fake", "second-fake", "own-fake"]
    assert all(r.status == "ok" and r.error_ratio <= 1 for r in records)
    ids = {name: {id(a) for n, a in seen if n == name} for name in ("first-fake", "second-fake", "own-fake")}
    assert ids["first-fake"] & ids["second-fake"]  # the same A, made once
    assert not ids["own-fake"] & (ids["first-fake"] | ids["second-fake"])


def test_problems_are_measured_while_suites_run_and_again_with_those_that_pass_them(capsys, monkeypatch):
    pytest.importorskip("torch")
    import gemmzoo.cli.recorded_run as run

    _record((96, 30, 40), (12, 20, 7))  # the suite of NumPy arrays' own backend ran; torch-cpu's has not
    monkeypatch.setattr(run, "overlaps", lambda on_cuda: True)  # as on CUDA
    assert main(["tune", "--recorded", "--budget", "0.01", "--suite-workers", "2"]) == 0
    err = capsys.readouterr().err
    assert "the backends already checked are measured meanwhile" in err
    assert "conformance torch-cpu float32: passed" in err
    progress = [line for line in err.splitlines() if line.startswith("[")]
    # whether its suite ended before a problem's first measurement or after: torch-cpu measured at each
    for shape in ((96, 30, 40), (12, 20, 7)):
        rows = state.store().records(device_fingerprint("cpu"), "float32", "NN", shape, status="ok")
        assert {r.backend for r in rows} == {"numpy", "torch-cpu"}, shape
        text = "x".join(map(str, (shape[0], shape[1], shape[2])))
        mine = [line for line in progress if f"] {text} float32 cpu" in line]
        assert mine and ("waiting for the suites of torch-cpu" in mine[0]) == (len(mine) == 2), mine
        assert len(mine) == 1 or "(again, with torch-cpu)" in mine[1]
    assert not state.store().recorded(device_fingerprint("cpu"))


class Searching(NumpyBackend):
    """NumPy's product; its tuning twin (a harder search, as Triton's full autotune) notes its calls."""

    name = "searching-fake"

    def __init__(self, full: bool = False, calls: list | None = None) -> None:
        self.full = full
        self.calls = calls if calls is not None else []

    def for_tuning(self):
        return self if self.full else Searching(True, self.calls)

    def matmul(self, a, b):
        self.calls.append(self.full)
        return super().matmul(a, b)


def test_a_backend_that_searches_harder_is_searched_last_and_only_where_its_call_came_close(capsys):
    searching = Searching()
    with scoped(registry=registry_with(Slow("numpy"), searching)):  # NumPy slowed: no noise can hide the gap
        _record((96, 30, 40))
        assert main(["tune", "--recorded", "--budget", "0.01"]) == 0
        err = capsys.readouterr().err
    progress = [line for line in err.splitlines() if line.startswith("[1/1]")]
    # faster than the baseline as a call runs it: searched, in a pass of its own
    assert len(progress) == 2 and "(searched: searching-fake)" in progress[1], progress
    assert True in searching.calls and searching.calls.index(True) > searching.calls.index(False)


class RightOnce(Watching):
    """Right on its first call only: what the check of the timed calls is for."""

    def matmul(self, a, b):
        result = super().matmul(a, b)
        return result if len(self.seen) == 1 else result + np.float32(1)


def test_a_backend_wrong_on_its_timed_calls_is_caught_on_shared_operands_and_checks():
    from gemmzoo.tuning.tune import measure_in_turn

    seen: list = []
    point = GridPoint(40, 24, 32, "float32", "NN")
    records = measure_in_turn([NumpyBackend(), RightOnce("right-once-fake", seen)], point, 0.01, True)
    assert [r.status for r in records] == ["ok", "wrong"]
    assert "timed call" in records[1].detail


class Asked(NumpyBackend):
    """Notes each time it is asked whether it runs here (asking may import a framework)."""

    def __init__(self, name: str, asked: list, **traits) -> None:
        self.name, self.asked = name, asked
        for trait, value in traits.items():
            setattr(self, trait, value)

    def unavailable_reason(self):
        self.asked.append(self.name)
        return None


def test_backends_left_out_by_what_they_declare_or_by_device_are_never_asked_whether_they_run():
    from gemmzoo.cli.recorded import narrowed

    asked: list = []
    heard: list = []
    backends = [Asked("compiling-fake", asked, compiles_per_problem=True),
                Asked("baseline-fake", asked, selectable=False), Asked("plain-fake", asked),
                Asked("gpu-fake", asked, device="cuda")]
    kept = narrowed(backends, include_compiling=False, named=False, say=heard.append, devices={"cpu"})
    assert [b.name for b in kept] == ["plain-fake"] and asked == ["plain-fake"]
    assert any(line.startswith("left out: compiling-fake (they compile") for line in heard)
    assert any(line.startswith("left out: baseline-fake (baselines") for line in heard)


def test_results_not_judged_one_by_one_are_still_checked_by_freivalds_test():
    from gemmzoo.tuning.tune import measure_in_turn

    point = GridPoint(40, 24, 32, "float32", "NN")
    backends = [NumpyBackend(), RightOnce("right-once-fake", [])]
    records = measure_in_turn(backends, point, 0.01, True, judge=False)
    assert [r.status for r in records] == ["ok", "wrong"] and "Freivalds" in records[1].detail
    assert records[0].error_ratio is None  # not judged element by element: no ratio to store


def test_a_search_starts_only_with_its_reserve_of_the_budget_left_and_its_problem_stays_recorded(
        capsys, monkeypatch):
    import gemmzoo.cli.recorded_run as run

    with scoped(registry=registry_with(Slow("numpy"), Searching())):
        _record((96, 30, 40))
        store = state.store()
        # forty "seconds" per measurement stored: two made, 20 s of 100 left, under the 30 s reserve
        clock = lambda: 40.0 * len(store.records(device_fingerprint("cpu"), "float32", "NN"))  # noqa: E731
        monkeypatch.setattr(run, "Budget", functools.partial(Budget, clock=clock))
        assert main(["tune", "--recorded", "--time-budget", "100", "--budget", "0.01"]) == 0
        err = capsys.readouterr().err
        assert "searched" not in err and "1 of 1 problems not (fully) measured" in err
        assert [(p.m, p.n, p.k) for p, _seen in store.recorded(device_fingerprint("cpu"))] == [(96, 30, 40)]
