"""best_backend: answers from the database, measuring on a miss, nearest shapes, ties, and the
in-memory cache; with backends of known speed so the expected answer is certain."""

from __future__ import annotations

import dataclasses
import time

import numpy as np
import pytest
from sessions import reconfigure, restart, scoped
from tuning_fakes import DelayedBackend, MissingBackend, WrongBackend, registry_with

import gemmzoo
from gemmzoo.errors import BackendUnavailableError
from gemmzoo.problems.grids import GridPoint
from gemmzoo.session import current
from gemmzoo.tuning import Record, explain, log_distance, state, tune
from gemmzoo.tuning.fingerprint import canonical, device_fingerprint, library_versions
from gemmzoo.tuning.select import DEFAULT_ORDER, TIE_FLOOR
from gemmzoo.tuning.tune import conformance_verdict, verdict_versions

FAST, SLOW = "fast-fake", "slow-fake"


@pytest.fixture(autouse=True)
def fresh(tmp_path, monkeypatch):
    """An empty cache directory, a registry with a fast, a slow, a wrong and a missing backend."""
    monkeypatch.setenv("GEMMZOO_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("GEMMZOO_BACKENDS", raising=False)
    monkeypatch.delenv("GEMMZOO_TUNE", raising=False)
    backends = [DelayedBackend(FAST), DelayedBackend(SLOW, 0.003), WrongBackend(), MissingBackend()]
    with scoped(registry=registry_with(*backends)):
        yield


def row(backend: str, shape, median: float, spread: float = 0.0, *, device: str | None = None,
        versions: str | None = None, status: str = "ok", dtype: str = "float32") -> Record:
    """A stored measurement with chosen numbers, valid here unless device/versions say otherwise."""
    m, n, k = shape
    return Record(device or device_fingerprint("cpu"),
                  versions or library_versions(backend, current().registry),
                  backend, m, n, k, dtype, "NN", status, median, spread, 0.5, 10, "", time.time())


def passed_here(*names: str, dtype: str = "float32") -> None:
    """Run the conformance suite on these backends here (stored rows rank only those that passed)."""
    registry = current().registry
    for name in names:
        assert conformance_verdict(state.store(), registry.get(name), dtype) is True


def store_rows(*records: Record) -> None:
    """Store the rows and earn their backends' verdicts here (stored rows rank only those)."""
    state.store().add(records)
    passed_here(*sorted({r.backend for r in records}))


def forbid_measuring(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("measured, but the answer should have come from stored data")

    monkeypatch.setattr("gemmzoo.tuning.select.measure_records", refuse)
    monkeypatch.setattr("gemmzoo.measure.measure", refuse)


def test_tune_then_answer_from_the_database(monkeypatch):
    point = GridPoint(48, 40, 32)
    records = tune([point], budget_s=0.02)
    assert {r.backend for r in records} == {FAST, SLOW}  # wrong-fake fails conformance, missing skipped
    assert all(r.status == "ok" and 0 <= r.error_ratio <= 1 for r in records)
    times = {r.backend: r.median_s for r in records}
    assert times[SLOW] > times[FAST] + 0.002
    assert state.store().count() == 2
    restart()  # as a new process would: nothing in memory, everything from the file
    forbid_measuring(monkeypatch)
    choice = explain((48, 40, 32))
    assert choice.backend.name == FAST and choice.source == "database" and not choice.tie
    assert choice.runner_up.backend == SLOW
    assert "failed conformance" in choice.excluded["wrong-fake"]
    assert gemmzoo.best_backend((48, 40, 32)).name == FAST


def test_a_miss_is_measured_quickly_and_stored():
    start = time.perf_counter()
    choice = explain((33, 17, 65))
    elapsed = time.perf_counter() - start
    assert choice.backend.name == FAST and choice.source == "measured now"
    assert elapsed < 3.0  # conformance of three fakes plus a 0.3 s timing budget
    stored = state.store().records(device_fingerprint("cpu"), "float32", "NN", (33, 17, 65))
    status = {r.backend: r.status for r in stored}
    # every candidate is timed first, each timed result judged at the shape: wrong-fake's is wrong
    assert status == {FAST: "ok", SLOW: "ok", "wrong-fake": "wrong"}
    assert "wrong at this shape" in choice.excluded["wrong-fake"]
    restart()
    assert explain((33, 17, 65)).source == "database"


def test_wrong_backend_never_chosen_even_when_fastest():
    choice = explain((8, 8, 8))
    assert choice.backend.name != "wrong-fake"
    # timed first, its result at this shape judged: wrong, so it was never the answer to check
    assert "wrong at this shape" in choice.excluded["wrong-fake"]


class StridedWrong(DelayedBackend):
    """Right on plain arrays, zeros when an operand is a strided view: right at any shape a
    first answer times, wrong in the suite's layout cases."""

    def matmul(self, a, b):
        if not (a.flags.c_contiguous and b.flags.c_contiguous):
            return np.zeros((a.shape[0], b.shape[1]), dtype=a.dtype)
        return super().matmul(a, b)


def test_the_fastest_is_checked_before_it_is_the_answer():
    backends = [StridedWrong("strided-wrong"), DelayedBackend(FAST, 0.002), DelayedBackend(SLOW, 0.006)]
    with scoped(registry=registry_with(*backends)):
        choice = explain((8, 8, 8))
        assert choice.backend.name == FAST and choice.source == "measured now"
        registry = current().registry
        store = state.store()
        verdicts = {name: store.conformance(device_fingerprint("cpu"), verdict_versions(registry.get(name)),
                                            name, "float32") for name in ("strided-wrong", FAST, SLOW)}
        # the fastest failed its suite, the next fastest passed its own; the slowest never ran one
        assert not verdicts["strided-wrong"].passed and verdicts["strided-wrong"].failures > 0
        assert verdicts[FAST].passed and verdicts[SLOW] is None
        assert "failed conformance" in choice.excluded["strided-wrong"]
        assert "not yet checked" in choice.excluded[SLOW]
        # shown as timed and unchecked: the one not checked yet, never the one that failed
        assert [t.backend for t in choice.unchecked] == [SLOW]
        # the timed rows of all three are stored; the unchecked one's rank nothing until it passes
        stored = {r.backend for r in store.records(device_fingerprint("cpu"), "float32", "NN", (8, 8, 8))}
        assert stored == {"strided-wrong", FAST, SLOW}


def test_repeat_calls_come_from_memory(monkeypatch):
    first = gemmzoo.best_backend((20, 30, 40))
    forbid_measuring(monkeypatch)

    def no_database(*args, **kwargs):
        raise AssertionError("the database was used for a cached answer")

    monkeypatch.setattr(state, "store", no_database)
    for method in ("records", "conformance", "add", "add_conformance"):
        monkeypatch.setattr(f"gemmzoo.tuning.db.TuningStore.{method}", no_database)
    calls = 20_000
    start = time.perf_counter()
    for _ in range(calls):
        assert gemmzoo.best_backend((20, 30, 40)) is first
    per_call = (time.perf_counter() - start) / calls
    assert per_call < 20e-6, f"{per_call * 1e6:.2f} us per cached call"


def test_another_configuration_is_a_new_question(monkeypatch):
    assert gemmzoo.best_backend((20, 30, 40)).name == FAST
    monkeypatch.setenv("GEMMZOO_BACKENDS", SLOW)  # read by sessions made from now on, not this one
    assert gemmzoo.best_backend((20, 30, 40)).name == FAST
    with gemmzoo.Session() as narrowed:
        assert gemmzoo.best_backend((20, 30, 40)).name == SLOW
    assert narrowed.best_backend((20, 30, 40)).name == SLOW
    assert gemmzoo.Session(backends=(FAST,)).best_backend((20, 30, 40)).name == FAST
    assert gemmzoo.best_backend((20, 30, 40)).name == FAST  # the outer session's answer stands


def test_nearest_measured_shape_answers_when_measuring_is_off(monkeypatch):
    small, large = (16, 16, 16), (1024, 1024, 1024)
    state.store().add([row(FAST, small, 1e-5), row(SLOW, small, 2e-5),
                       row(FAST, large, 9e-3), row(SLOW, large, 3e-3)])
    passed_here(FAST, SLOW)
    forbid_measuring(monkeypatch)
    near_small = explain((20, 12, 24), measure=False)
    assert (near_small.backend.name, near_small.source, near_small.basis) == (FAST, "nearest shape", small)
    near_large = explain((700, 2000, 900), measure=False)
    assert (near_large.backend.name, near_large.basis) == (SLOW, large)
    # (128, 128, 128) is 3·ln 8 from one and 3·ln 8 from the other in log space: the smaller wins
    assert log_distance((128,) * 3, small) == pytest.approx(log_distance((128,) * 3, large))
    assert explain((128, 128, 128), measure=False).basis == small
    monkeypatch.setenv("GEMMZOO_TUNE", "0")  # the environment switch does the same, in a new session
    with gemmzoo.Session():
        assert gemmzoo.best_backend((700, 2000, 900)).name == SLOW
    assert gemmzoo.Session(tune=False).best_backend((700, 2000, 900)).name == SLOW  # as does the keyword


def test_nothing_measured_and_measuring_off_gives_the_default(monkeypatch):
    forbid_measuring(monkeypatch)
    choice = explain((64, 64, 64), measure=False)
    assert choice.source == "default" and "default" in choice.note
    names = sorted([FAST, SLOW, "wrong-fake"])  # none is in DEFAULT_ORDER: by name
    assert not set(names) & set(DEFAULT_ORDER)
    assert choice.backend.name == names[0]


@pytest.mark.parametrize(
    ("fast_median", "slow_median", "spreads", "expected", "tie"),
    [
        (1.000e-3, 1.004e-3, (1e-6, 1e-6), FAST, True),   # within the 1% floor: tie, name order
        (1.004e-3, 1.000e-3, (1e-6, 1e-6), FAST, True),   # slower by 0.4%, still the tie winner
        (1.060e-3, 1.000e-3, (1e-6, 1e-6), SLOW, False),  # 6% apart, tight spreads: no tie
        (1.060e-3, 1.000e-3, (1.3e-4, 1e-6), FAST, True),  # 6% apart, bands of ±6.5% overlap: tie
        (1.060e-3, 1.000e-3, (1.1e-4, 1e-6), SLOW, False),  # bands of ±5.5% do not reach: no tie
    ],
)
def test_ties_within_noise_go_to_the_first_name(monkeypatch, fast_median, slow_median, spreads, expected,
                                                tie):
    shape = (256, 256, 256)
    state.store().add([row(FAST, shape, fast_median, spreads[0]), row(SLOW, shape, slow_median, spreads[1])])
    passed_here(FAST, SLOW)  # a tie among checked backends (an unchecked one's suite runs only if it wins)
    forbid_measuring(monkeypatch)
    monkeypatch.setenv("GEMMZOO_BACKENDS", f"{SLOW},{FAST}")  # the wrong one would be measured
    reconfigure()
    choice = explain(shape)
    assert choice.backend.name == expected and choice.tie is tie and choice.source == "database"
    assert choice.ranking[0].median_s == min(fast_median, slow_median)
    assert TIE_FLOOR == 0.01


@pytest.mark.parametrize(("fast_median", "checked_answers"), [(0.996e-3, True), (0.900e-3, False)])
def test_an_unchecked_backend_tied_with_a_checked_one_runs_no_suite(monkeypatch, fast_median,
                                                                    checked_answers):
    shape = (128, 96, 64)
    # FAST timed before its suite ran, SLOW checked here: within the 1% floor they tie, and the
    # checked one answers with no suite run; 10% apart, FAST would be the answer, so it is checked
    state.store().add([row(FAST, shape, fast_median, 1e-6), row(SLOW, shape, 1.000e-3, 1e-6)])
    passed_here(SLOW)
    forbid_measuring(monkeypatch)
    monkeypatch.setenv("GEMMZOO_BACKENDS", f"{FAST},{SLOW}")
    reconfigure()
    choice = explain(shape, measure=True)
    versions = verdict_versions(current().registry.get(FAST))
    verdict = state.store().conformance(device_fingerprint("cpu"), versions, FAST, "float32")
    if checked_answers:
        assert choice.backend.name == SLOW and verdict is None
        assert [t.backend for t in choice.unchecked] == [FAST] and "not yet checked" in choice.excluded[FAST]
    else:
        assert choice.backend.name == FAST and verdict.passed and not choice.unchecked


def test_of_tied_unchecked_backends_the_tie_order_says_which_is_checked(monkeypatch):
    shape = (128, 96, 64)
    # neither is checked; SLOW measured 0.4% faster, within the 1% floor: the tie rule answers
    # FAST (name order), so FAST's suite runs and SLOW's does not
    state.store().add([row(FAST, shape, 1.000e-3, 1e-6), row(SLOW, shape, 0.996e-3, 1e-6)])
    forbid_measuring(monkeypatch)
    monkeypatch.setenv("GEMMZOO_BACKENDS", f"{FAST},{SLOW}")
    reconfigure()
    choice = explain(shape, measure=True)
    registry, here = current().registry, device_fingerprint("cpu")
    verdicts = {name: state.store().conformance(here, verdict_versions(registry.get(name)), name, "float32")
                for name in (FAST, SLOW)}
    assert choice.backend.name == FAST and verdicts[FAST].passed and verdicts[SLOW] is None
    assert [t.backend for t in choice.unchecked] == [SLOW]


class CompilingSuite(DelayedBackend):
    """A fake whose conformance cases would compile kernels (as the Triton backends' do on a GPU)."""

    suite_compiles = True


@pytest.mark.parametrize(("compiling_median", "compiling_answers"), [(0.980e-3, False), (0.975e-3, False),
                                                                     (0.960e-3, True), (0.900e-3, True)])
def test_a_suite_that_compiles_runs_only_for_a_gain_worth_its_wait(monkeypatch, compiling_median,
                                                                    compiling_answers):
    shape = (128, 96, 64)
    # neither is checked; the compiling one timed 2.0% or 2.6% faster (no tie: past the 1% floor)
    # is under the 3% gain worth waiting for: SLOW is checked and answers; 4.2% or 11% faster, the
    # compiling one is checked and answers
    with scoped(registry=registry_with(CompilingSuite(FAST), DelayedBackend(SLOW))):
        state.store().add([row(FAST, shape, compiling_median, 1e-6), row(SLOW, shape, 1.000e-3, 1e-6)])
        forbid_measuring(monkeypatch)
        choice = explain(shape, measure=True)
        registry, here = current().registry, device_fingerprint("cpu")
        verdicts = {name: state.store().conformance(here, verdict_versions(registry.get(name)), name,
                                                    "float32") for name in (FAST, SLOW)}
        if compiling_answers:
            assert choice.backend.name == FAST and verdicts[FAST].passed and verdicts[SLOW] is None
            assert [t.backend for t in choice.unchecked] == [SLOW]
        else:
            gain = 1.000e-3 / compiling_median - 1
            assert choice.backend.name == SLOW and verdicts[SLOW].passed and verdicts[FAST] is None
            assert [t.backend for t in choice.unchecked] == [FAST]
            assert f"timed {gain:.1%} faster than {SLOW}, under the 3% worth waiting" in choice.excluded[FAST]
        # a later answer once the compiling one has its verdict: the rule alone decides
        passed_here(FAST)
        restart()
        later = explain(shape, measure=True)
        assert later.backend.name == FAST


@pytest.mark.parametrize(("compiling_device", "compiling_answers"), [(1.010e-3, False), (0.940e-3, True)])
def test_a_compiling_suite_waits_for_a_gain_by_every_measure_not_by_loops_alone(monkeypatch, compiling_device,
                                                                                compiling_answers):
    shape = (128, 96, 64)
    # both looped in one round: the compiling one 6% faster per call in loops. Call by call it is
    # 1% slower (a loop time that moved with the GPU's clock): the cheaper one is checked and
    # answers. 6% faster call by call too: its suite runs and it answers.
    created = time.time()
    with scoped(registry=registry_with(CompilingSuite(FAST), DelayedBackend(SLOW))):
        state.store().add([
            dataclasses.replace(row(FAST, shape, compiling_device, 1e-6), loop_s=0.94e-3, loop_spread_s=1e-6,
                                created=created),
            dataclasses.replace(row(SLOW, shape, 1.000e-3, 1e-6), loop_s=1.0e-3, loop_spread_s=1e-6,
                                created=created)])
        forbid_measuring(monkeypatch)
        choice = explain(shape, measure=True)
        if compiling_answers:
            assert choice.backend.name == FAST and [t.backend for t in choice.unchecked] == [SLOW]
        else:
            assert choice.backend.name == SLOW and [t.backend for t in choice.unchecked] == [FAST]
            assert f"timed 1.0% slower than {SLOW} by one measure of time per call, under the 3%" \
                in choice.excluded[FAST]


def test_a_compiling_suite_runs_after_all_when_every_cheaper_candidate_fails_its_own(monkeypatch):
    shape = (128, 96, 64)
    # the compiling one is 2% faster: the cheaper one is checked first, fails its suite, and then
    # the compiling one's suite runs and it answers (not "no backend conforms")
    with scoped(registry=registry_with(CompilingSuite(FAST), StridedWrong(SLOW))):
        state.store().add([row(FAST, shape, 0.980e-3, 1e-6), row(SLOW, shape, 1.000e-3, 1e-6)])
        forbid_measuring(monkeypatch)
        choice = explain(shape, measure=True)
        assert choice.backend.name == FAST and not choice.unchecked
        assert "failed conformance" in choice.excluded[SLOW]


class SmallRowsOnly(DelayedBackend):
    """A fake that says it can be the fastest only with at most 4 rows of A (as triton-decode does
    with 64), running another backend's plan elsewhere."""

    contends = ({"max_m": 4, "why": "above 4 rows of A it runs another backend's plan"},)


def test_a_first_answer_times_only_the_backends_that_contend_at_the_shape():
    with scoped(registry=registry_with(SmallRowsOnly(FAST), DelayedBackend(SLOW, 0.003))):
        choice = explain((128, 96, 64), measure=True)
        assert choice.backend.name == SLOW and choice.source == "measured now"
        assert "not timed for a first answer: above 4 rows of A" in choice.excluded[FAST]
        timed = state.store().records(device_fingerprint("cpu"), "float32", "NN", (128, 96, 64))
        assert {r.backend for r in timed} == {SLOW}
        small = explain((4, 96, 64), measure=True)  # where it contends, it is timed and wins
        assert small.backend.name == FAST and FAST not in small.excluded
    with scoped(registry=registry_with(SmallRowsOnly(FAST))):  # alone, it is timed all the same
        assert explain((64, 32, 16), measure=True).backend.name == FAST


def test_latest_row_wins_for_a_backend(monkeypatch):
    shape = (64, 32, 16)
    store = state.store()
    store.add([row(FAST, shape, 5e-3), row(SLOW, shape, 2e-3)])
    store.add([row(FAST, shape, 1e-3)])  # re-tuned later: now faster
    forbid_measuring(monkeypatch)
    monkeypatch.setenv("GEMMZOO_BACKENDS", f"{FAST},{SLOW}")
    reconfigure()
    assert explain(shape).backend.name == FAST


def test_other_devices_and_stale_versions_are_ignored(monkeypatch):
    shape = (96, 96, 96)
    other_device = canonical({"kind": "cuda", "name": "Imaginary GPU", "capability": "9.0", "sms": 1,
                              "driver": "1.0"})
    stale = canonical({"gemmzoo": "0.0.1", "numpy": "1.0"})
    other_cpu = canonical({"kind": "cpu", "model": "Other CPU", "cores": 999, "machine": "x"})
    store = state.store()
    store.add([row(SLOW, shape, 1e-9, device=other_cpu), row(SLOW, shape, 1e-9, versions=stale),
               row(FAST, shape, 1.0, device=other_device), row(FAST, shape, 1.0, versions=stale)])
    monkeypatch.setenv("GEMMZOO_BACKENDS", f"{FAST},{SLOW}")
    reconfigure()
    with monkeypatch.context() as patched:
        forbid_measuring(patched)
        assert explain(shape, measure=False).source == "default"  # none of those rows counts
    choice = explain(shape)
    assert choice.source == "measured now" and choice.backend.name == FAST
    # fresh measurements, not the foreign rows (FAST 1 s, SLOW 1 ns): SLOW sleeps 3 ms a call
    fresh = {r.backend: r.median_s for r in store.records(device_fingerprint("cpu"), "float32", "NN", shape)
             if r.device == device_fingerprint("cpu") and r.versions != stale}
    assert choice.timing.median_s < min(0.5, fresh[SLOW]) and fresh[SLOW] >= 0.003
    # SLOW was timed, not the answer, and not tied with it: its suite has not run yet
    assert "not yet checked" in choice.excluded[SLOW]


def test_gemmzoo_backends_restricts_the_candidates(monkeypatch):
    monkeypatch.setenv("GEMMZOO_BACKENDS", SLOW)
    reconfigure()
    choice = explain((10, 10, 10))
    assert choice.backend.name == SLOW and [t.backend for t in choice.ranking] == [SLOW]


def test_no_candidate_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("GEMMZOO_BACKENDS", "missing-fake")
    reconfigure()
    with pytest.raises(BackendUnavailableError, match="missing-fake: unavailable: not installed here"):
        gemmzoo.best_backend((4, 4, 4))
    with pytest.raises(BackendUnavailableError, match="bfloat16 on cpu"):
        gemmzoo.best_backend((4, 4, 4), "bfloat16")
    with pytest.raises(ValueError, match="shape must be"):
        gemmzoo.best_backend((4, 4))
    with pytest.raises(ValueError, match="unknown dtype"):
        gemmzoo.best_backend((4, 4, 4), "int8")


def test_device_none_means_cpu_without_a_cuda_backend():
    assert explain((4, 4, 4)).device == "cpu"
    with pytest.raises(BackendUnavailableError, match="on cuda"):
        gemmzoo.best_backend((4, 4, 4), device="cuda")


def test_the_api_names_load_lazily(tmp_path):
    import json
    import subprocess
    import sys

    code = (
        "import json, sys, gemmzoo\n"
        "before = [m for m in ('torch', 'cupy', 'triton', 'sqlite3') if m in sys.modules]\n"
        "functions = [gemmzoo.best_backend.__name__, gemmzoo.matmul.__name__]\n"
        "after = [m for m in ('torch', 'cupy', 'triton') if m in sys.modules]\n"
        "print(json.dumps([functions, before + after]))\n"
    )
    env = {**__import__("os").environ, "GEMMZOO_CACHE_DIR": str(tmp_path / "untouched")}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    functions, heavy = json.loads(result.stdout)
    assert functions == ["best_backend", "matmul"] and heavy == []
    assert not (tmp_path / "untouched").exists()  # no database opened, not even the directory made


def test_ties_prefer_the_default_order_before_names(monkeypatch):
    # fakes named like bundled backends: "torch" comes before "numpy" in DEFAULT_ORDER, not by name
    restart(registry=registry_with(DelayedBackend("numpy"), DelayedBackend("torch")))
    shape = (128, 128, 128)
    state.store().add([row("numpy", shape, 1.000e-3, 1e-6), row("torch", shape, 1.005e-3, 1e-6)])
    passed_here("numpy", "torch")
    forbid_measuring(monkeypatch)
    choice = explain(shape, measure=False)
    assert choice.backend.name == "torch" and choice.tied == ("torch", "numpy")
    assert DEFAULT_ORDER.index("torch") < DEFAULT_ORDER.index("numpy")


class CompilingCounted(DelayedBackend):
    """Compiles each new problem (as torch.compile and XLA do); counts how often it is asked
    whether it is available (for a real one, that imports its framework)."""

    compiles_per_problem = True

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.asked = 0

    def unavailable_reason(self):
        self.asked += 1
        return None


def test_a_backend_that_ranks_nothing_here_is_not_asked_its_availability():
    compiling = CompilingCounted("compiling-fake")
    with scoped(registry=registry_with(DelayedBackend(FAST), DelayedBackend(SLOW, 0.003), compiling)):
        measured = explain((24, 16, 8))  # a first answer: neither its suite nor its timings run
        assert measured.backend.name == FAST
        assert "compiles each new problem" in measured.excluded["compiling-fake"]
        stored = explain((24, 16, 8), measure=False)  # no verdict here: it ranks nothing
        assert stored.backend.name == FAST and "not yet run" in stored.excluded["compiling-fake"]
        assert compiling.asked == 0
        passed_here("compiling-fake")  # its suite asks (once a process), and earns a verdict
        assert compiling.asked > 0
        # with a verdict here it is a candidate: left out only for having no timing at this shape
        again = explain((24, 16, 8), measure=False)
        assert "gemmzoo tune --shape 24x16x8" in again.excluded["compiling-fake"]


class NotInstalled(DelayedBackend):
    """Requires a module that is not installed: its availability says so, with a hint."""

    requires = ("gemmzoo_no_such_framework",)

    def unavailable_reason(self):
        return "gemmzoo_no_such_framework is not installed (pip install gemmzoo-no-such-framework)"


def test_a_backend_whose_framework_is_missing_says_so_without_a_verdict():
    with scoped(registry=registry_with(DelayedBackend(FAST), NotInstalled("not-installed"))):
        for measure in (False, True):
            choice = explain((24, 16, 8), measure=measure)
            assert choice.excluded["not-installed"].startswith("unavailable: gemmzoo_no_such_framework")
