"""A suite shared among worker processes (gemmzoo.conformance.shards): the same checks, the same
results in the same order, every worker's results its own, and a worker that cannot run leaves
its checks to the suite's process."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from dataclasses import asdict

import pytest
from sessions import scoped
from tuning_fakes import DelayedBackend, registry_with

import gemmzoo
from gemmzoo.conformance import check_backend, shard_worker, shards
from gemmzoo.conformance.runner import CheckResult, SuiteSettings, suite_checks
from gemmzoo.session import current


def test_how_many_processes_share_a_suite(monkeypatch):
    plain, compiling = DelayedBackend("plain"), DelayedBackend("compiling")
    compiling.suite_compiles = True
    monkeypatch.setattr(shards, "usable_cores", lambda: 16)
    assert shards.worker_count(plain, 60) == 1  # nothing compiles: threads would do as well
    assert shards.worker_count(compiling, 60) == 8  # 16 cores, two each
    assert shards.worker_count(compiling, 12) == 3  # at least four checks each
    assert shards.worker_count(plain, 60, workers=3) == 3 and shards.worker_count(plain, 2, workers=5) == 2
    monkeypatch.setattr(shards, "usable_cores", lambda: 2)
    assert shards.worker_count(compiling, 60) == 1  # two cores: no core to spare


def test_workers_run_their_checks_and_the_results_are_the_suites():
    backend = gemmzoo.get_backend("numpy")
    settings = SuiteSettings(("float32",))
    checks = suite_checks(backend, settings)
    labels = [label for label, _ in checks]
    shared = shards.start(backend, asdict(settings), 60.0, labels, workers=3)
    assert shared is not None and shared.here == shards.deal(labels, 3)[0]

    def not_here(index):
        raise AssertionError(f"check {index} fell back to this process")

    got = {index: (result, overran) for index, result, overran in shared.results(not_here, CheckResult)}
    assert sorted(got) == sorted(set(range(len(checks))) - set(shared.here)) and got
    alone = check_backend(backend, ["float32"], workers=1).results
    assert all(got[i] == (alone[i], None) for i in got)
    assert all(result.passed for result, _ in got.values())


def test_a_shared_suite_reports_what_one_process_does():
    backend = gemmzoo.get_backend("numpy")
    alone = check_backend(backend, ["float64", "float16"], workers=1)
    seen = []
    shared = check_backend(backend, ["float64", "float16"], workers=2, on_result=seen.append)
    assert shared.results == alone.results and shared.passed and len(seen) == len(alone.results)


def test_a_worker_that_finds_other_code_leaves_its_checks_here(monkeypatch):
    backend = gemmzoo.get_backend("numpy")
    monkeypatch.setattr(type(current().registry), "code_digest", lambda self, name: "not the installed code")
    settings = SuiteSettings(("float32",))
    checks = suite_checks(backend, settings)
    labels = [label for label, _ in checks]
    shared = shards.start(backend, asdict(settings), 60.0, labels, workers=2)
    ran_here = []

    def here(index):
        ran_here.append(index)
        return checks[index][1](), None

    results = list(shared.results(here, CheckResult))
    assert ran_here == shards.deal(labels, 2)[1] == [index for index, _r, _o in results] and ran_here
    assert all(result.passed for _i, result, _o in results)


def test_a_backend_no_worker_could_find_runs_here():
    fake = DelayedBackend("fake-here-only")
    with scoped(registry=registry_with(fake)):
        assert shards.start(fake, asdict(SuiteSettings(("float32",))), 60.0, [f"c{i}" for i in range(40)],
                            workers=4) is None
        report = check_backend(fake, ["float32"], workers=4)
    assert report.passed


@pytest.mark.parametrize("spec_change", [{"backend": "no-such-backend"}, {"digest": "other"},
                                          {"timeout": "soon"}, {"labels": ["no-such-check"]}])
def test_a_worker_refuses_a_spec_it_cannot_run(tmp_path, spec_change):
    backend = gemmzoo.get_backend("numpy")
    spec = {"backend": "numpy", "digest": current().registry.code_digest("numpy"),
            "settings": {"dtypes": ["float32"], "classes": None, "random": 0, "seed": 0, "max_work": 1e6},
            "timeout": 60.0, "labels": ["bad-input-not-2d", "float32-random-7x11x13-NN"],
            "out": str(tmp_path / "out.json"), **spec_change}
    assert backend.name == "numpy"
    assert shard_worker.run_spec(spec) == 3 and not (tmp_path / "out.json").exists()


def test_results_that_do_not_name_the_checks_dealt_are_refused(tmp_path):
    done = subprocess.Popen([sys.executable, "-c", "pass"])
    path = tmp_path / "results.json"
    row = ["numpy", "check", True, "fine", None]
    not_a_bool = ["b", "numpy", "check", "yes", "", None]
    for rows, accepted in (([["a", *row], ["b", *row]], True), ([["b", *row], ["a", *row]], False),
                           ([["a", *row]], False), ([["a", *row], not_a_bool], False)):
        path.write_text(json.dumps(rows))
        got = shards._collect(done, str(path), [4, 7], ["a", "b"], None)
        assert (got == {4: (tuple(row[:4]), None), 7: (tuple(row[:4]), None)}) if accepted else got is None


def test_a_check_that_overran_in_a_worker_is_its_last_result_and_runs_nowhere_else(tmp_path):
    done = subprocess.Popen([sys.executable, "-c", "pass"])
    path = tmp_path / "results.json"
    passed = ["numpy", "check", True, "fine", None]
    hung = ["numpy", "check", False, "TIMEOUT: x", "x ran past 1 s"]
    for rows, accepted in (([["a", *passed], ["b", *hung]], True), ([["a", *hung]], True),
                           ([["a", *hung], ["b", *passed]], False), ([["a", *passed]], False)):
        path.write_text(json.dumps(rows))
        got = shards._collect(done, str(path), [4, 7, 9], ["a", "b", "c"], None)
        assert (got is not None and len(got) == len(rows)) if accepted else got is None
    path.write_text(json.dumps([["a", *passed], ["b", *hung]]))
    shared = shards.Shared([], [(done, str(path), [4, 7, 9], ["a", "b", "c"])], None,
                           tempfile.TemporaryDirectory())

    def not_here(index):
        raise AssertionError(f"check {index} ran again in the suite's process")

    got = list(shared.results(not_here, CheckResult))
    assert [(index, overran) for index, _result, overran in got] == [(4, None), (7, "x ran past 1 s")]


def test_a_worker_ends_when_the_process_that_started_it_is_gone(tmp_path):
    # a worker whose parent is already another process than the one its spec names ends at once
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"parent": -1, "backend": "numpy", "digest": "d", "settings": {},
                                "timeout": 1.0, "labels": [], "out": str(tmp_path / "out.json")}))
    stalled = "import time, gemmzoo.conformance.shard_worker as w; w.run_spec = lambda spec: time.sleep(60); "
    done = subprocess.run([sys.executable, "-c", stalled + f"raise SystemExit(w.main([{str(spec)!r}]))"],
                          timeout=30)
    assert done.returncode == 5  # ended by its parent watch, not after the minute's sleep


def test_each_worker_gets_cores_of_its_own():
    assert shards.worker_cores(1, list(range(16))) == [2, 3]  # this process keeps 0 and 1
    assert shards.worker_cores(7, list(range(16))) == [14, 15]
    assert {tuple(shards.worker_cores(n, list(range(16)))) for n in range(1, 8)} == {
        (2 * n, 2 * n + 1) for n in range(1, 8)}  # seven workers, no core shared
    assert shards.worker_cores(1, [4, 9]) == [4, 9]  # two cores only: wraps round, both
    assert shards.worker_cores(3, [5]) == [5] and shards.worker_cores(1, []) == []
    assert shards.worker_cores(1, list(range(64)), start=40) == [42, 43]  # a suite beginning at 40
    assert shards.worker_cores(3, list(range(8)), start=6) == [4, 5]  # 6 + 3 * 2 wraps round to 4


def test_suites_side_by_side_begin_at_drawn_cores(monkeypatch, tmp_path):
    # each suite draws where its workers' cores begin, so two suites on a machine of many cores
    # are not confined to the same ones
    specs = []
    monkeypatch.setattr(shards, "own_cores", lambda: list(range(64)))
    monkeypatch.setattr(shards.random, "randrange", lambda n: 40)

    def recorded(spec_path, _out, _backend):
        specs.append(json.loads(open(spec_path, encoding="utf-8").read()))
        return subprocess.Popen([sys.executable, "-c", "pass"])

    monkeypatch.setattr(shards, "start_worker", recorded)
    backend = gemmzoo.get_backend("numpy")
    settings = SuiteSettings(("float32",))
    labels = [label for label, _ in suite_checks(backend, settings)]
    shared = shards.start(backend, asdict(settings), 60.0, labels, workers=3)
    assert shared is not None and [spec["cores"] for spec in specs] == [[42, 43], [44, 45]]
    shared._folder.cleanup()


@pytest.mark.skipif(not hasattr(__import__("os"), "sched_setaffinity"), reason="no CPU affinity here")
def test_a_worker_runs_on_the_cores_its_spec_names(tmp_path):
    import os

    mine = sorted(os.sched_getaffinity(0))
    spec = tmp_path / "spec.json"
    for cores, expected in (([mine[-1]], [mine[-1]]), (["0", -1], mine), ([10 ** 6], mine)):
        spec.write_text(json.dumps({"backend": "numpy", "digest": "d", "settings": {}, "timeout": 1.0,
                                    "labels": [], "out": str(tmp_path / "out.json"), "cores": cores}))
        seen = ("import os, gemmzoo.conformance.shard_worker as w; "
                "w.run_spec = lambda spec: print(sorted(os.sched_getaffinity(0))) or 0; "
                f"raise SystemExit(w.main([{str(spec)!r}]))")
        done = subprocess.run([sys.executable, "-c", seen], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0 and json.loads(done.stdout) == expected, (cores, done.stdout, done.stderr)


@pytest.mark.skipif(not hasattr(__import__("os"), "sched_setaffinity"), reason="no CPU affinity here")
def test_a_worker_whose_pools_were_sized_before_it_was_confined_runs_its_checks_on_its_cores(tmp_path):
    # as in a worker forked from the zygote: numpy (and torch, where installed) imported first
    import os

    one = sorted(os.sched_getaffinity(0))[-1]
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"backend": "numpy", "digest": "d", "settings": {}, "timeout": 1.0,
                                "labels": [], "out": str(tmp_path / "out.json"), "cores": [one]}))
    seen = ("import json, numpy, importlib.util\n"
            "if importlib.util.find_spec('torch'): import torch; torch.get_num_threads()\n"
            "import gemmzoo.conformance.shard_worker as w\n"
            "from gemmzoo.measure.threads import pools_now\n"
            "before = dict(pools_now())\n"
            "w.run_spec = lambda spec: print(json.dumps([before, dict(pools_now())])) or 0\n"
            f"raise SystemExit(w.main([{str(spec)!r}]))")
    done = subprocess.run([sys.executable, "-c", seen], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    before, during = json.loads(done.stdout)
    assert max(before.values()) > 1 or len(os.sched_getaffinity(0)) == 1  # sized by every core
    assert during and set(during) == set(before) and all(n == 1 for n in during.values()), (before, during)


forks = pytest.mark.skipif(not hasattr(__import__("os"), "fork"),
                           reason="no fork here: workers are processes of their own")


def _numpy_spec(tmp_path, labels=("bad-input-not-2d", "float32-random-7x11x13-NN")):
    spec = {"backend": "numpy", "digest": current().registry.code_digest("numpy"),
            "settings": {"dtypes": ["float32"], "classes": None, "random": 0, "seed": 0, "max_work": 1e6},
            "timeout": 60.0, "labels": list(labels), "out": str(tmp_path / "out.json")}
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(spec))
    return str(path), spec["out"]


@forks
def test_workers_are_forked_from_the_zygote_and_take_this_processs_environment(tmp_path, monkeypatch):
    path, out = _numpy_spec(tmp_path)
    worker = shards.start_worker(path, out, gemmzoo.get_backend("numpy"))
    assert isinstance(worker, shards.ForkedWorker) and worker.wait(timeout=60) == 0
    rows = json.loads(open(out, encoding="utf-8").read())
    assert [row[0] for row in rows] == ["bad-input-not-2d", "float32-random-7x11x13-NN"]
    assert all(row[3] is True for row in rows)
    # the zygote started before this variable was set: the worker reads it all the same, finds no
    # numpy backend, and ends without results
    import os

    os.remove(out)
    monkeypatch.setenv("GEMMZOO_DISABLE_PLUGINS", "numpy")
    worker = shards.start_worker(path, out, gemmzoo.get_backend("numpy"))
    assert isinstance(worker, shards.ForkedWorker) and worker.wait(timeout=60) == 1
    assert not os.path.exists(out)


@pytest.fixture
def zygote(monkeypatch):
    """A zygote whose workers run tests/zygote_probe.py instead of their checks (ended after the
    test)."""
    import os
    from pathlib import Path

    here = str(Path(__file__).resolve().parent)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([here, *filter(None, [os.environ.get("PYTHONPATH")])]))
    probing = shards.Zygote(["gemmzoo.conformance.shard_worker", "zygote_probe"])
    yield probing
    probing.close()


@forks
def test_a_forked_worker_runs_where_and_as_the_suites_process_is_now(tmp_path, monkeypatch, zygote):
    path, out = _numpy_spec(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # after the zygote started: the worker takes this process's now
    monkeypatch.setenv("GEMMZOO_TEST_PROBE", "seen")
    monkeypatch.syspath_prepend(str(tmp_path / "on-the-path"))
    worker = zygote.fork(path, out)
    assert worker is not None and worker.wait(timeout=30) == 0
    where = json.loads(open(out, encoding="utf-8").read())
    assert where["cwd"] == str(elsewhere) and where["probe"] == "seen"
    assert where["path"][0] == str(tmp_path / "on-the-path")


@forks
def test_a_forked_worker_is_killed_at_its_deadline_and_ends_with_its_zygote(tmp_path, zygote):
    import os

    path, out = _numpy_spec(tmp_path)
    spec = json.loads(open(path, encoding="utf-8").read())
    open(path, "w", encoding="utf-8").write(json.dumps({**spec, "stall": True}))
    stalled = zygote.fork(path, out)
    assert stalled is not None and stalled.poll() is None
    with pytest.raises(subprocess.TimeoutExpired):
        stalled.wait(timeout=0.3)
    stalled.kill()
    assert stalled.wait(timeout=10) == 1 and not os.path.exists(out)
    orphan = zygote.fork(path, out)
    assert orphan is not None and orphan.poll() is None
    zygote.close()
    assert not zygote.alive()
    assert orphan.wait(timeout=10) == 1  # its parent watch saw the zygote go: not after the minute


def _children(pid):
    """The process ids of ``pid``'s children (Linux's /proc; empty where it cannot be read)."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children", encoding="utf-8") as listing:
            return {int(child) for child in listing.read().split()}
    except OSError:
        return set()


def _until(condition, seconds=30.0):
    import time

    end = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < end, "not within the time"
        time.sleep(0.02)


@forks
def test_a_worker_on_standby_runs_its_spec_where_the_suites_process_is(tmp_path, monkeypatch, zygote):
    import os

    monkeypatch.setenv("GEMMZOO_TEST_PROBE", "before")
    warmed = tmp_path / "warmed.txt"
    monkeypatch.setenv("GEMMZOO_TEST_WARMED", str(warmed))
    zygote.stand_by(3, ["numpy"])
    assert zygote.standing == 3
    _until(lambda: len(_children(zygote.process.pid)) == 3)  # forked before any spec
    # each readied the backend before any checks came: its warm_up ran
    _until(lambda: warmed.exists() and warmed.read_text().split() == ["numpy"] * 3)
    waiting = _children(zygote.process.pid)
    path, out = _numpy_spec(tmp_path)

    def run():
        if os.path.exists(out):
            os.remove(out)
        worker = zygote.fork(path, out)
        assert worker is not None and worker.wait(timeout=30) == 0
        return worker.pid, json.loads(open(out, encoding="utf-8").read())

    pid, seen = run()
    assert pid in waiting and zygote.standing == 2 and seen["probe"] == "before" and seen["added"] is None
    # a variable set since (as libraries do when they start): a worker on standby takes it
    monkeypatch.setenv("GEMMZOO_TEST_ADDED", "yes")
    pid, seen = run()
    assert pid in waiting and zygote.standing == 1 and seen["added"] == "yes"
    # a variable changed since: the one left on standby is let go, and a worker is forked
    monkeypatch.setenv("GEMMZOO_TEST_PROBE", "after")
    pid, seen = run()
    assert pid not in waiting and zygote.standing == 0 and seen["probe"] == "after"
    _until(lambda: not _children(zygote.process.pid) & waiting)


@forks
def test_workers_on_standby_that_no_suite_takes_end_when_released(tmp_path, monkeypatch, zygote):
    zygote.stand_by(3, ["numpy"])
    zygote.release()  # before the zygote is even ready: nothing here waits for it
    assert zygote.standing == 0
    path, out = _numpy_spec(tmp_path)
    worker = zygote.fork(path, out)  # most often asked for after the three, their ids read first
    assert worker is not None and worker.wait(timeout=30) == 0
    _until(lambda: not _children(zygote.process.pid))
    zygote.stand_by(2, ["numpy"])
    _until(lambda: len(_children(zygote.process.pid)) == 2)
    monkeypatch.setattr(shards, "_zygotes", [zygote])  # as the process's own zygote
    shards.release_standby()
    _until(lambda: not _children(zygote.process.pid))


def test_warm_start_puts_workers_on_standby_only_where_a_suite_would_share_its_checks(monkeypatch):
    compiling = DelayedBackend("compiling")
    compiling.suite_compiles = True
    asked = []

    class Recording:
        def stand_by(self, count, names):
            asked.append((count, names))

    monkeypatch.setattr(shards, "_zygote", lambda backends: Recording())
    monkeypatch.setattr(shards, "usable_cores", lambda: 2)
    shards.warm_start([compiling])
    monkeypatch.setattr(shards, "usable_cores", lambda: 16)
    shards.warm_start([DelayedBackend("plain")])
    assert asked == []
    shards.warm_start([compiling, DelayedBackend("plain")])
    assert asked == [(7, ["compiling"])]  # eight processes share a suite on 16 cores: this one and 7


@forks
def test_a_zygote_that_is_gone_forks_no_worker(tmp_path):
    zygote = shards.Zygote(["gemmzoo.conformance.shard_worker"])
    zygote.close()
    path, out = _numpy_spec(tmp_path)
    assert zygote.fork(path, out) is None


def test_checks_that_likely_share_kernels_are_dealt_to_one_process():
    from gemmzoo.conformance.cases import conformance_cases

    cases = [case.id for case in conformance_cases("bfloat16", "cuda")]
    labels = ([f"bad-input-{n}" for n in range(5)] + cases
              + ["grouped-bfloat16-ragged-24x32-m=5,0,1,17,9", "grouped-bfloat16-one-row-16x40-m=1,1,1"])
    for count in (1, 2, 3, 8):
        dealt = shards.deal(labels, count)
        every = sorted(i for indices in dealt for i in indices)
        assert len(dealt) == count and every == list(range(len(labels)))
        owner = {i: number for number, indices in enumerate(dealt) for i in indices}
        keys: dict[object, set[int]] = {}
        for index, label in enumerate(labels):
            if (key := shards.kernel_key(label)) is not None:
                keys.setdefault(key, set()).add(owner[index])
        assert all(len(owners) == 1 for owners in keys.values())
        if count == 8:  # every process has something, and the large problems are spread out
            ends = ("4544x4544x4544-NN", "2112x2080x2064-NN", "1031x1029x4097-NN")
            large = [i for i, label in enumerate(labels) if label.endswith(ends)]
            assert all(dealt) and len({owner[i] for i in large}) == 3
    # a GPU suite's largest problem, most of whose time is drawing and judging its arrays, shares
    # its process with no other problem
    suite = [f"bad-input-{n}" for n in range(5)] + cases
    dealt = shards.deal(suite, 8)
    largest = next(part for part in dealt if any(suite[i].endswith("4544x4544x4544-NN") for i in part))
    assert [suite[i] for i in largest if shards.kernel_key(suite[i]) is not None] == [
        "bfloat16-random-4544x4544x4544-NN"]
    same = shards.kernel_key("bfloat16-random-7x11x13-NN")
    assert same == shards.kernel_key("bfloat16-integers-37x29x33-NN")  # sizes of one kind, one layout
    assert same != shards.kernel_key("bfloat16-random-37x43x53-NT")  # another layout
    assert same != shards.kernel_key("float16-random-7x11x13-NN")  # another dtype
    assert shards.kernel_key("bfloat16-random-63x65x64-NN") != same  # K a multiple of 16
    assert shards.kernel_key("bfloat16-random-1x37x19-NN") != same  # M of one
    large = shards.kernel_key("bfloat16-random-1031x1029x4097-NN")
    assert large != shards.kernel_key("bfloat16-random-1033x1029x4097-NN")  # a large problem: its own key
    assert shards.kernel_key("bad-input-not-2d") is None
