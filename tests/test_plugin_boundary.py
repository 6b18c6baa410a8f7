"""No plugin can crash or hang gemmzoo: every member guarded, every backend call under a time limit.

The corpus (tests/misbehaving_plugins.py) has a backend that raises in each member, one that
returns the wrong type from each, one that hangs in each of unavailable_reason, from_numpy,
prepare, synchronize and matmul, one with a wrong shape and one that mutates its inputs. In this
process each one meets the API next to NumPy's backend; installed as real plugins (a subprocess
each), all of them at once meet every command.
"""

from __future__ import annotations

import csv
import io
import os
import subprocess
import sys
import time
import warnings
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace

import misbehaving_plugins as corpus
import numpy as np
import pytest
from fake_distributions import subprocess_env
from sessions import reconfigure, scoped

import gemmzoo
from gemmzoo.conformance import check_backend
from gemmzoo.plugins import watchdog
from gemmzoo.plugins.registry import PluginInfo, Registry, unavailable_reason
from gemmzoo.problems.grids import GridPoint
from gemmzoo.scale.bench import ERROR, OK, TIMEOUT, run_bench
from gemmzoo_numpy import NumpyBackend

LIMIT_S = 1.0
#: What a call cut at LIMIT_S may take on top, on a busy machine: far below a hang (HANG_S).
SLACK_S = 10.0
LIVE = [case for case in corpus.CASES if case not in corpus.REFUSED]
HARMLESS = {"value-synchronize"}  # synchronize's return value is ignored: a correct backend
POINT = GridPoint(8, 8, 8, "float32", "NN")
TESTS = Path(__file__).parent


@pytest.fixture(autouse=True)
def fresh(tmp_path, monkeypatch):
    monkeypatch.setenv("GEMMZOO_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("GEMMZOO_TIMEOUT", str(LIMIT_S))
    monkeypatch.delenv("GEMMZOO_BACKENDS", raising=False)
    monkeypatch.delenv("GEMMZOO_TUNE", raising=False)
    with scoped():
        yield


def registry_of(case: str) -> Registry:
    """A registry with NumPy's backend (as gemmzoo's own) and the backend of ``case``."""
    registry = Registry(strict=False)
    numpy_plugin = SimpleNamespace(gemmzoo_register_backends=gemmzoo.hookimpl(
        lambda register: register(NumpyBackend())))
    own = PluginInfo("numpy", "gemmzoo_numpy", "gemmzoo", gemmzoo.__version__)
    registry.register_plugin(numpy_plugin, own)
    bad_plugin = SimpleNamespace(gemmzoo_register_backends=corpus.register_case(case))
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        registry.register_plugin(bad_plugin, PluginInfo(case, corpus.module_name(case), corpus.DISTRIBUTION,
                                                        "6.6.6"))
    return registry


def within(start: float, hangs: int = 1) -> None:
    elapsed = time.monotonic() - start
    assert elapsed < hangs * LIMIT_S + SLACK_S, f"took {elapsed:.1f} s"


@pytest.mark.parametrize("case", sorted(corpus.REFUSED))
def test_a_malformed_member_is_refused_at_registration(case):
    registry = registry_of(case)

    assert registry.names() == ["numpy"]
    [failure] = registry.failures
    assert failure.plugin.name == case and "registered an invalid backend" in failure.error
    assert "\n" not in failure.error


@pytest.mark.parametrize("case", LIVE)
def test_availability_is_a_reason_never_an_exception_nor_a_hang(case):
    backend = registry_of(case).get(corpus.backend_name(case))
    start = time.monotonic()

    reason = unavailable_reason(backend)

    within(start)
    if case not in corpus.UNAVAILABLE:
        assert reason is None
        return
    assert isinstance(reason, str) and reason and "\n" not in reason
    expected = {"raise-unavailable-reason": "unavailable_reason() raised RuntimeError: plugin bug",
                "raise-unprintable-reason": "unavailable_reason() raised UnprintableError: <unprintable>",
                "int-reason": "unavailable_reason() returned int, not a str or None: 42",
                "empty-reason": "gave an empty reason",
                "hang-unavailable-reason": "took longer than 1 s"}[case]
    assert expected in reason
    assert unavailable_reason(backend) == reason  # answered once: a hang is not waited for again


@pytest.mark.parametrize("case", LIVE)
def test_the_suite_fails_each_misbehaving_backend_within_the_limit(case):
    backend = registry_of(case).get(corpus.backend_name(case))
    start = time.monotonic()

    report = check_backend(backend, timeout=LIMIT_S)

    within(start)
    if case in HARMLESS:
        assert report.passed, report.failures
        return
    assert not report.passed
    details = " ".join(f.detail for f in report.failures)
    if case in corpus.HANGS or case == "hang-unavailable-reason":
        assert report.timed_out is not None and "took longer than 1 s" in report.timed_out
        assert "TIMEOUT" in details
        assert watchdog.quarantined(backend) is not None
    elif case == "empty-reason":  # an empty reason still says "unavailable"
        assert "empty reason" in report.unavailable
    else:
        assert report.timed_out is None and report.failures
    if case == "wrong-shape":
        assert "shape" in details
    if case == "mutates-inputs":
        assert "A was changed by matmul" in details


@pytest.mark.parametrize("case", LIVE)
def test_bench_reports_the_backend_and_times_numpy(case):
    registry = registry_of(case)
    bad, numpy_backend = registry.get(corpus.backend_name(case)), registry.get("numpy")
    start = time.monotonic()

    results = run_bench([bad, numpy_backend], [POINT, GridPoint(8, 8, 16)], budget_s=0.02,
                        timeout=LIMIT_S)

    within(start)  # a hung backend costs one limit: at its second point it is quarantined
    by_backend: dict[str, list[str]] = {}
    for result in results:
        by_backend.setdefault(result.backend, []).append(result.status)
    assert by_backend["numpy"] == [OK, OK]
    assert all(r.caller_s > 0 for r in results if r.backend == "numpy")
    statuses = by_backend[corpus.backend_name(case)]
    if case in corpus.HANGS:
        assert statuses == [TIMEOUT, TIMEOUT]
        [timed_out] = [r for r in results if r.status == TIMEOUT and r.point == POINT]
        assert "took longer than 1 s" in timed_out.detail
    elif case.startswith(("raise-", "exit-", "interrupt-")) and case not in corpus.UNAVAILABLE:
        assert statuses == [ERROR, ERROR]


@pytest.mark.parametrize("case", LIVE)
def test_matmul_and_best_backend_answer_with_a_working_backend(case, monkeypatch):
    reconfigure(registry=registry_of(case))
    rng = np.random.default_rng(5)
    a = rng.standard_normal((8, 8)).astype(np.float32)
    b = rng.standard_normal((8, 8)).astype(np.float32)
    start = time.monotonic()

    c = gemmzoo.matmul(a, b)  # never measures: the stored or default choice
    chosen = gemmzoo.best_backend((8, 8, 8))  # measures every candidate on this miss
    again = gemmzoo.matmul(a, b)

    within(start, hangs=2)
    exact = a.astype(np.float64) @ b.astype(np.float64)
    for result in (c, again):
        assert isinstance(result, np.ndarray) and result.shape == (8, 8)
        np.testing.assert_allclose(result, exact, rtol=1e-5, atol=1e-5)
    assert np.array_equal(a, rng_copy(5, 0)) and np.array_equal(b, rng_copy(5, 1))
    if case in HARMLESS:
        assert chosen.name in ("numpy", corpus.backend_name(case))
    else:
        assert chosen.name == "numpy"


def rng_copy(seed: int, index: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    arrays = [rng.standard_normal((8, 8)).astype(np.float32) for _ in range(2)]
    return arrays[index]


def test_the_watchdog_returns_values_reraises_errors_and_quarantines_on_overrun():
    backend = corpus.make_backend("hang-matmul")
    assert watchdog.call(backend, "add", lambda x, y: x + y, 2, 3, timeout=LIMIT_S) == 5
    with pytest.raises(ZeroDivisionError):
        watchdog.call(backend, "divide", lambda: 1 / 0, timeout=LIMIT_S)
    with pytest.raises(watchdog.BackendCrashError, match="SystemExit"):
        watchdog.call(backend, "exit", sys.exit, 4, timeout=LIMIT_S)
    start = time.monotonic()
    with pytest.raises(watchdog.BackendTimeoutError, match=r"sleep took longer than 0\.2 s"):
        watchdog.call(backend, "sleep", time.sleep, corpus.HANG_S, timeout=0.2)
    assert time.monotonic() - start < SLACK_S
    assert "quarantined for the rest of this process" in watchdog.quarantined(backend)
    assert "quarantined" in unavailable_reason(backend)
    ran = []
    with pytest.raises(watchdog.BackendTimeoutError, match=r"anything: not run: TIMEOUT: sleep took longer"):
        watchdog.call(backend, "anything", ran.append, 1, timeout=LIMIT_S)
    assert ran == []  # a quarantined backend is never called again
    assert [t.backend for t in watchdog.timeouts()] == [backend.name]


def test_workers_are_reused_back_to_back_and_end_when_idle():
    """Tasks that follow each other run on one worker thread; a worker left idle for its idle_s
    ends (a kept thread kept the OpenMP team of the backend work it ran alive, and the caller's
    own OpenMP work slow); a task after that gets a new worker."""
    import threading

    watchdog.end_idle_workers()  # the first call makes its worker, with its idle_s
    which = threading.current_thread
    first, second = (watchdog.call(None, "which", which, timeout=LIMIT_S, idle_s=0.2) for _ in range(2))
    assert first is second is not threading.current_thread()
    deadline = time.monotonic() + SLACK_S
    while first.is_alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not first.is_alive()
    assert watchdog.call(None, "which", threading.current_thread, timeout=LIMIT_S) is not first
    assert watchdog.call(None, "add", lambda x, y: x + y, 2, 3, timeout=LIMIT_S) == 5


def _new_workers_end(run) -> bool:
    """Whether the worker threads that appear while ``run()`` runs, and one made just before it
    that would wait an hour for a task, end without further tasks (those from before are left
    out: other tests' hung calls keep their abandoned workers)."""
    import threading

    watchdog.end_idle_workers()  # none left idle from before, to be reused unseen
    earlier = set(threading.enumerate())
    # idle for an hour unless the run ends it: its first task (if any) reuses it
    watchdog.call(None, "which", threading.current_thread, timeout=LIMIT_S, idle_s=3600.0)
    run()
    workers = [t for t in threading.enumerate() if t not in earlier and t.name == "gemmzoo-watchdog-worker"]
    for worker in workers:
        worker.join(SLACK_S)
    return not any(worker.is_alive() for worker in workers)


@pytest.mark.parametrize("run", ["block", "best_backend", "check_backend", "run_bench", "tune"])
def test_a_run_of_tasks_leaves_no_idle_worker_behind(empty_cache, monkeypatch, run):
    """The workers a run of tasks leaves idle end with it, however long their idle time is: an
    idle_workers_ended() block, and the entry points that run tasks for a caller."""
    import threading

    from gemmzoo.tuning.select import explain
    from gemmzoo.tuning.tune import tune

    monkeypatch.setenv("GEMMZOO_BACKENDS", "numpy,torch-cpu")
    reconfigure()
    point = GridPoint(21, 13, 8)

    def block() -> None:
        with watchdog.idle_workers_ended():
            worker = watchdog.call(None, "which", threading.current_thread, timeout=LIMIT_S, idle_s=3600.0)
            assert watchdog.call(None, "which", threading.current_thread, timeout=LIMIT_S) is worker

    def best_backend() -> None:
        assert explain((21, 13, 8), "float32", "cpu").source == "measured now"

    def suite() -> None:
        assert check_backend(NumpyBackend(), ["float32"]).passed

    def bench() -> None:
        assert run_bench([NumpyBackend()], [point], budget_s=0.01)[0].status == OK

    def tuned() -> None:
        assert tune([point], ["numpy"], budget_s=0.01)

    runs = {"block": block, "best_backend": best_backend, "check_backend": suite, "run_bench": bench,
            "tune": tuned}
    assert _new_workers_end(runs[run])


@pytest.mark.parametrize(("text", "seconds"), [("5", 5.0), ("0.5", 0.5), ("0", None), ("off", None),
                                               (" 12 ", 12.0)])
def test_timeouts_parse(text, seconds):
    assert watchdog.parse_timeout(text) == seconds


@pytest.mark.parametrize("text", ["-1", "soon", "nan", "", "inf", "1e10", "86401"])
def test_bad_timeouts_are_refused(text):
    with pytest.raises(ValueError, match="timeout must be a number of seconds"):
        watchdog.parse_timeout(text)


def test_the_default_limit_comes_from_the_session_configuration(monkeypatch):
    from gemmzoo import Session
    from gemmzoo.config import ConfigError

    for text, limit in (("7", 7.0), ("0", None), ("off", None)):
        monkeypatch.setenv("GEMMZOO_TIMEOUT", text)
        with Session():
            assert watchdog.default_timeout() == limit
    monkeypatch.delenv("GEMMZOO_TIMEOUT")
    with Session():
        assert watchdog.default_timeout() == watchdog.DEFAULT_TIMEOUT_S
    with Session(timeout=3):  # a keyword overrides the environment
        assert watchdog.default_timeout() == 3.0
    for text in ("whenever", "1e10", "inf"):
        monkeypatch.setenv("GEMMZOO_TIMEOUT", text)
        with pytest.raises(ConfigError, match=f"GEMMZOO_TIMEOUT: timeout must be .* got '{text}'"):
            Session()


# Installed for real, all at once ------------------------------------------------------------------


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    site = tmp_path_factory.mktemp("site")
    corpus.install(site)
    return site


def search_path(site: Path) -> str:
    """The corpus's site and this folder first, then this process's own PYTHONPATH (where the
    bundled plugins are found in a checkout that is not installed)."""
    return os.pathsep.join(p for p in (str(site), str(TESTS), os.environ.get("PYTHONPATH")) if p)


MATMUL_SCRIPT = ("import numpy as np, gemmzoo\n"
                 "rng = np.random.default_rng(1)\n"
                 "a = rng.standard_normal((8, 8)).astype(np.float32)\n"
                 "b = rng.standard_normal((8, 8)).astype(np.float32)\n"
                 "c = gemmzoo.matmul(a, b)\n"
                 "np.testing.assert_allclose(c, a.astype(float) @ b.astype(float), rtol=1e-5, atol=1e-5)\n"
                 "print(gemmzoo.best_backend((8, 8, 8)).name)\n"
                 "np.testing.assert_allclose(gemmzoo.matmul(a, b), a.astype(float) @ b.astype(float), "
                 "rtol=1e-5, atol=1e-5)\n")

#: The processes of the tests below: the command after ``python``, and the environment. Each
#: waits out the limits of several hung backends (seconds, idle): they run side by side.
RUNS: dict[str, tuple[tuple[str, ...], dict[str, str]]] = {
    "list": (("-m", "gemmzoo", "list", "--plain"),
             {"GEMMZOO_TIMEOUT": "1", "GEMMZOO_DISABLE_PLUGINS": "triton,cupy"}),
    "check": (("-m", "gemmzoo", "check", "--timeout", "1", "--dtype", "float32", "--format", "csv"),
              {"GEMMZOO_DISABLE_PLUGINS": "torch,triton,cupy,jax"}),
    "bench": (("-m", "gemmzoo", "bench", "--shape", "8x8x8", "--dtype", "float32", "--timeout", "1",
               "--plain", "--budget", "0.02"),
              {"GEMMZOO_DISABLE_PLUGINS": "triton,cupy"}),
    "best": (("-m", "gemmzoo", "best", "8", "8", "8", "--timeout", "1"),
             {"GEMMZOO_DISABLE_PLUGINS": "torch,triton,cupy,jax"}),
    "matmul": (("-c", MATMUL_SCRIPT),
               {"GEMMZOO_TIMEOUT": "1", "GEMMZOO_DISABLE_PLUGINS": "torch,triton,cupy,jax"}),
}


def timed(command: list[str], env: dict[str, str]) -> tuple[subprocess.CompletedProcess[str], float]:
    """The finished process and the seconds it took."""
    start = time.monotonic()
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=corpus.HANG_S * 3,
                            check=False)
    return result, time.monotonic() - start


@pytest.fixture(scope="module")
def runs(site: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Future]]:
    """Each of :data:`RUNS` started at once, each with a tuning cache of its own: name -> the
    future of :func:`timed`'s answer."""
    with ThreadPoolExecutor(len(RUNS)) as pool:
        futures = {}
        for name, (args, variables) in RUNS.items():
            futures[name] = pool.submit(timed, [sys.executable, *args],
                                        env_of(site, tmp_path_factory.mktemp(f"{name}-cache"), **variables))
        yield futures


def env_of(site: Path, cache: Path, **variables: str) -> dict[str, str]:
    """A process's environment: the corpus installed, ``cache`` its tuning cache."""
    return subprocess_env(site, PYTHONPATH=search_path(site), GEMMZOO_CACHE_DIR=str(cache), **variables)


def assert_no_traceback(result: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in result.stdout + result.stderr, result.stdout + result.stderr


def test_list_shows_every_misbehaving_plugin_and_the_bundled_backends(runs):
    result, elapsed = runs["list"].result()

    assert result.returncode == 0, result.stderr
    assert_no_traceback(result)
    assert elapsed < corpus.HANG_S
    rows = {line.split("\t")[0]: line.split("\t") for line in result.stdout.splitlines()}
    # without -v a backend whose framework is installed but not yet imported is "installed"
    assert rows["numpy"][3] == "yes" and rows["torch-cpu"][3] in ("yes", "installed")
    for case in corpus.REFUSED:
        refused = f"FAILED\t'{case}' ({corpus.DISTRIBUTION} 6.6.6)\tregistered an invalid backend"
        assert refused in result.stdout
    for case in corpus.UNAVAILABLE:
        assert rows[corpus.backend_name(case)][3].startswith("no: ")
    assert "TIMEOUT" in rows[corpus.backend_name("hang-unavailable-reason")][3]
    assert "[red]not markup[/]" in rows[corpus.backend_name("raise-unavailable-reason")][3]


def test_check_conforms_the_bundled_backends_and_times_out_the_hung_ones(runs):
    result, elapsed = runs["check"].result()

    out = result.stdout + result.stderr  # the table on stdout, progress and TIMEOUT lines on stderr
    assert result.returncode == 1, out
    assert_no_traceback(result)
    assert elapsed < corpus.HANG_S
    assert "numpy: " in out and "0 failed" in out.split("numpy: ", 1)[1].splitlines()[0]
    summary = {row[0]: ",".join(row) for row in csv.reader(io.StringIO(result.stdout)) if row}
    assert "conforms" in summary["numpy"] and "does not" not in summary["numpy"]
    for case in corpus.HANGS:
        assert "TIMEOUT" in summary[corpus.backend_name(case)]
    slow_probe = corpus.backend_name("hang-unavailable-reason")
    assert f"TIMEOUT {slow_probe}: unavailable_reason() took longer" in out
    for case in LIVE:
        if case not in corpus.UNAVAILABLE | HARMLESS | corpus.HANGS:
            assert "does not conform" in summary[corpus.backend_name(case)], case


def test_bench_times_the_bundled_backends_next_to_every_misbehaving_one(runs):
    result, elapsed = runs["bench"].result()

    assert result.returncode == 1, result.stdout + result.stderr
    assert_no_traceback(result)
    assert elapsed < corpus.HANG_S
    rows = {line.split()[3].rstrip("*"): line for line in result.stdout.splitlines()
            if line.startswith("8x8x8")}
    for name in ("numpy", "torch-cpu"):
        assert float(rows[name].split()[4]) > 0, rows[name]
    for case in corpus.HANGS:
        assert "TIMEOUT" in rows[corpus.backend_name(case)]


def test_best_answers_with_a_bundled_backend(runs):
    result, elapsed = runs["best"].result()

    assert_no_traceback(result)
    assert elapsed < corpus.HANG_S
    # numpy, or the harmless misbehaver (numpy's product too) where it timed faster
    names = ("numpy", corpus.backend_name("value-synchronize"))
    assert result.stdout.startswith(tuple(f"{name} for 8x8x8 float32 on cpu" for name in names)), \
        result.stdout + result.stderr
    assert result.returncode == 1  # candidates timed out while the suite checked them
    for case in corpus.HANGS:
        assert f"TIMEOUT {corpus.backend_name(case)}: " in result.stdout + result.stderr


def test_matmul_in_a_process_with_every_misbehaving_plugin(runs):
    result, elapsed = runs["matmul"].result()

    assert result.returncode == 0, result.stdout + result.stderr
    assert elapsed < corpus.HANG_S
    assert result.stdout.strip() in ("numpy", corpus.backend_name("value-synchronize"))


def test_the_target_a_sleeping_backend_is_timeout_and_numpy_is_timed(site, tmp_path):
    # alone, not among the runs above: its bound is the limit and a few seconds
    result, elapsed = timed([sys.executable, "-m", "gemmzoo", "bench", "--backend",
                             corpus.backend_name("hang-matmul"), "--backend", "numpy", "--shape", "8x8x8",
                             "--timeout", "2", "--plain"], env_of(site, tmp_path / "cache"))

    assert result.returncode == 1, result.stdout + result.stderr
    assert_no_traceback(result)
    assert elapsed < 2 + 15
    rows = {line.split()[3].rstrip("*"): line.split() for line in result.stdout.splitlines()
            if line.startswith("8x8x8")}
    assert rows[corpus.backend_name("hang-matmul")][4] == "TIMEOUT"
    assert float(rows["numpy"][4]) > 0
    sleeper = corpus.backend_name("hang-matmul")
    out = result.stdout + result.stderr
    # it hangs in the conformance suite bench runs before any timing (nothing is timed without a pass)
    assert "TIMEOUT" in out and f"{sleeper}: " in out and "took longer than 2 s" in out
