"""The executors without a cluster: the slurm path through submitit's local executor, the ray path on
a local Ray with fake GPUs, each with a worker killed mid-sweep; the options and missing engines."""

from __future__ import annotations

import functools
import json
import os
import signal
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from gemmzoo.problems.grids import GridPoint
from gemmzoo.scale.executors import (
    ExecutorError,
    ExecutorSettings,
    PointFolder,
    parse_option,
    require,
    sweep_key,
)
from gemmzoo.scale.jobs import make_executor

POINTS = [GridPoint(m, 8 + m % 5, 16, "float32") for m in (3, 17, 29, 41, 53, 67)]


def traced_job(log_dir: str, kill_at: str, point: GridPoint) -> dict[str, object]:
    """A job that logs each finished call and kills its own process the first time it meets
    ``kill_at`` (a worker lost mid-sweep, as a preempted node or an OOM kill would lose it)."""
    log = Path(log_dir)
    marker = log / f"killed-{point.id}"
    if point.id == kill_at and not marker.exists():
        marker.write_text(str(os.getpid()))
        os.kill(os.getpid(), signal.SIGKILL)
    (log / f"done-{point.id}-{uuid.uuid4().hex}").write_text(str(os.getpid()))
    return {"m": point.m, "product": point.m * point.n * point.k,
            "gpu": os.environ.get("CUDA_VISIBLE_DEVICES")}


def traced_setup(log_dir: str, points: list[GridPoint]) -> dict[str, object]:
    """A worker's setup that logs each call with its process, and how many points it was given."""
    (Path(log_dir) / f"setup-{os.getpid()}-{uuid.uuid4().hex}").write_text(str(len(points)))
    return {"points": len(points)}


def _check_setups(log: Path) -> None:
    """Each worker process that measured ran the setup once, before its first point."""
    setups = [path.name.split("-")[1] for path in log.glob("setup-*")]
    assert len(setups) == len(set(setups)), "a worker ran its setup twice"
    measured = {path.read_text() for path in log.glob("done-*")}
    assert measured <= set(setups)
    for pid in measured:
        (setup,) = log.glob(f"setup-{pid}-*")
        assert all(setup.stat().st_mtime <= done.stat().st_mtime for done in log.glob("done-*")
                   if done.read_text() == pid)


def _by_value() -> None:
    # The workers unpickle the job by value: this test module is not importable there.
    for name in ("cloudpickle", "ray.cloudpickle"):  # submitit's, Ray's own copy
        module = sys.modules.get(name)
        if module is None:
            try:
                module = __import__(name, fromlist=["register_pickle_by_value"])
            except ImportError:
                continue
        module.register_pickle_by_value(sys.modules[__name__])


def _check_sweep(log: Path, outcomes: list, kill_at: str) -> None:
    assert len(outcomes) == len(POINTS)
    for point, (status, value) in zip(POINTS, outcomes, strict=True):
        assert status == "ok", value
        assert value["m"] == point.m and value["product"] == point.m * point.n * point.k
    for point in POINTS:  # every point finished exactly once: nothing lost, nothing counted twice
        assert len(list(log.glob(f"done-{point.id}-*"))) == 1, point.id
    assert (log / f"killed-{kill_at}").exists()  # the kill did happen


def test_slurm_through_submitit_local_survives_a_killed_task(tmp_path: Path) -> None:
    pytest.importorskip("submitit")
    _by_value()
    log = tmp_path / "log"
    log.mkdir()
    kill_at = POINTS[2].id
    job = functools.partial(traced_job, str(log), kill_at)
    settings = ExecutorSettings("slurm", workers=2, devices=["0", "1"], folder=str(tmp_path / "sweep"),
                                cluster="local", options={"timeout_min": 5}, poll_s=0.2)
    heard = []
    setup = functools.partial(traced_setup, str(log))
    outcomes, reports = make_executor(settings).run(job, POINTS, lambda p, w, o: heard.append(p.id), setup)
    _check_sweep(log, outcomes, kill_at)
    _check_setups(log)
    assert sorted(heard) == sorted(p.id for p in POINTS)
    for report in reports:  # when each task began, was set up and was done, from the sweep's start
        if report.points:
            assert 0 <= report.began_s <= report.ready_s <= report.done_s
            assert report.setup["points"] >= report.points and report.setup["seconds"] >= 0
    # each array task had its own GPU entry; the killed task's points went out again
    gpus = {value["gpu"] for _status, value in outcomes}
    assert gpus == {"0", "1"}
    assert any(r.error for r in reports) and any(r.device.startswith("try 2") and r.points for r in reports)
    # A requeue (or the same command again) measures nothing already in the folder.
    again, _ = make_executor(settings).run(job, POINTS)
    assert again == outcomes
    assert len(list(log.glob("done-*"))) == len(POINTS)


def test_local_executor_sets_each_worker_up_once_and_reruns_a_killed_worker_s_point(tmp_path: Path) -> None:
    log = tmp_path / "log"
    log.mkdir()
    kill_at = POINTS[3].id
    job = functools.partial(traced_job, str(log), kill_at)
    settings = ExecutorSettings("local", devices=["0", "1"])
    setup = functools.partial(traced_setup, str(log))
    outcomes, reports = make_executor(settings).run(job, POINTS, setup=setup)
    _check_sweep(log, outcomes, kill_at)  # nothing lost, nothing counted twice
    _check_setups(log)  # the replacement worker set itself up too, once
    assert len(list(log.glob("setup-*"))) == 3
    assert {value["gpu"] for _status, value in outcomes} <= {"0", "1"}
    assert sum(r.points for r in reports) == len(POINTS) and sum(bool(r.error) for r in reports) == 1


def test_a_requeued_slurm_task_resumes_without_measuring_again(tmp_path: Path) -> None:
    submitit = pytest.importorskip("submitit")
    from gemmzoo.scale.slurm_executor import Share

    log = tmp_path / "log"
    log.mkdir()
    job = functools.partial(traced_job, str(log), "none")
    items = list(enumerate(POINTS))
    PointFolder(tmp_path / "sweep", "key").open()
    # The task was preempted after two points: they are in the folder, the others are not.
    assert Share(job, items[:2], str(tmp_path / "sweep"), "key", "task")() == 2
    task = Share(job, items, str(tmp_path / "sweep"), "key", "task")
    requeued = task.checkpoint()  # what submitit calls on preemption or timeout, then resubmits
    assert isinstance(requeued, submitit.helpers.DelayedSubmission)
    assert requeued.result() == len(POINTS) - 2  # the requeued task measured only what was missing
    for point in POINTS:
        assert len(list(log.glob(f"done-{point.id}-*"))) == 1


def test_slurm_parameters_reach_a_slurm_executor(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The cluster path without a cluster: submitit's Slurm executor is made and checks the
    parameters for real; only the submission itself is replaced (each task runs here)."""
    submitit = pytest.importorskip("submitit")
    from submitit.slurm.slurm import SlurmExecutor

    monkeypatch.setattr(SlurmExecutor, "affinity", classmethod(lambda cls: 1))  # as if srun were here
    seen: dict[str, object] = {}

    class Done:
        job_id = "1"

        def done(self) -> bool:
            return True

        def exception(self) -> None:
            return None

    def submit_array(self: object, tasks: list) -> list:
        seen.update(self._executor.parameters)  # type: ignore[attr-defined]
        seen["devices"] = [task.device for task in tasks]
        for task in tasks:
            task()
        return [Done() for _ in tasks]

    monkeypatch.setattr(submitit.AutoExecutor, "submit_array", submit_array)
    log = tmp_path / "log"
    log.mkdir()
    job = functools.partial(traced_job, str(log), "none")
    settings = ExecutorSettings("slurm", workers=3, folder=str(tmp_path / "sweep"), cluster="slurm",
                                options={"slurm_partition": "gpu", "timeout_min": 90, "slurm_account": "proj",
                                         "slurm_qos": "high"})
    outcomes, reports = make_executor(settings).run(job, POINTS)
    assert [status for status, _value in outcomes] == ["ok"] * len(POINTS)
    assert seen["gpus_per_node"] == 1 and seen["array_parallelism"] == 3 and seen["partition"] == "gpu"
    assert seen["account"] == "proj" and seen["qos"] == "high" and seen["time"] == 90
    assert seen["devices"] == [None, None, None]  # Slurm gives each task its GPU
    assert sorted(r.points for r in reports) == [2, 2, 2]
    bad = ExecutorSettings("slurm", folder=str(tmp_path / "other"), cluster="slurm",
                           options={"timeout_min": "x"})
    with pytest.raises(ExecutorError, match="submitit refused"):
        make_executor(bad).run(job, POINTS)


@pytest.fixture(scope="module")
def local_ray() -> Iterator[None]:
    """One local Ray cluster with two fake GPUs for the module's Ray tests (each sweep makes
    actors of its own on it); its workers see this process's ``PYTHONPATH``."""
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, num_gpus=2, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": os.environ.get("PYTHONPATH", "")}})
    try:
        yield
    finally:
        ray.shutdown()


def test_ray_on_a_local_cluster_with_fake_gpus_survives_a_killed_actor(tmp_path: Path,
                                                                       local_ray: None) -> None:
    _by_value()
    log = tmp_path / "log"
    log.mkdir()
    kill_at = POINTS[1].id
    job = functools.partial(traced_job, str(log), kill_at)
    settings = ExecutorSettings("ray", folder=str(tmp_path / "sweep"))
    setup = functools.partial(traced_setup, str(log))
    outcomes, reports = make_executor(settings).run(job, POINTS, setup=setup)
    _check_sweep(log, outcomes, kill_at)
    _check_setups(log)
    assert all(r.began_s <= r.ready_s <= r.done_s and r.setup["seconds"] >= 0 for r in reports if r.points)
    # two GPUs: two actors at a time, each its own GPU (Ray's ids, exported as CUDA_VISIBLE_DEVICES)
    assert {value["gpu"] for _status, value in outcomes} <= {"0", "1"}
    assert sum(1 for r in reports if r.error) == 1
    assert sum(r.points for r in reports) == len(POINTS)
    folder = PointFolder(tmp_path / "sweep", sweep_key(job, POINTS))
    assert all(folder.read(n, p) is not None for n, p in enumerate(POINTS))


def test_a_folder_of_another_sweep_is_refused(tmp_path: Path) -> None:
    PointFolder(tmp_path, "one").open()
    with pytest.raises(ExecutorError, match="holds another sweep"):
        PointFolder(tmp_path, "two").open()
    folder = PointFolder(tmp_path / "x", "key").open()
    folder.file(0, POINTS[0]).write_text(json.dumps({"sweep": "key", "number": 0, "point": "other",
                                                     "status": "ok", "value": 1}))
    with pytest.raises(ExecutorError, match="not a result of this sweep"):
        folder.read(0, POINTS[0])


def test_options_and_missing_engines(monkeypatch: pytest.MonkeyPatch,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    assert parse_option("slurm_partition=gpu") == ("slurm_partition", "gpu")
    assert parse_option("timeout_min=90") == ("timeout_min", 90)
    assert parse_option("num_gpus=0.5") == ("num_gpus", 0.5)
    assert parse_option("exclusive=true") == ("exclusive", True)
    with pytest.raises(ExecutorError, match="KEY=VALUE"):
        parse_option("no value")
    monkeypatch.setitem(sys.modules, "submitit", None)  # as if not installed
    with pytest.raises(ExecutorError, match=r"pip install 'gemmzoo\[slurm\]'"):
        require("submitit")
    from gemmzoo.cli import main

    assert main(["bench", "--executor", "slurm", "--shape", "8x8x8", "--backend", "numpy"]) == 2
    assert "pip install 'gemmzoo[slurm]'" in capsys.readouterr().err.replace("\n", " ")
    with pytest.raises(ExecutorError, match="needs --devices"):
        make_executor(ExecutorSettings("local")).run(traced_job, POINTS)


def test_bench_through_slurm_writes_one_result_file_compare_reads(tmp_path: Path, empty_cache: Path,
                                                                  monkeypatch: pytest.MonkeyPatch,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("submitit")
    from gemmzoo.cli import main
    from gemmzoo.results.runs import load_run

    monkeypatch.chdir(tmp_path)
    shapes = ["--shape", "24x40x32", "--shape", "40x24x16", "--shape", "16x16x48"]
    common = ["bench", "--backend", "numpy", *shapes, "--budget", "0.01", "--rounds", "1",
              "--format", "plain"]
    assert main([*common, "--executor", "slurm", "--slurm-cluster", "local", "--workers", "2",
                 "--slurm-time", "5", "--results-dir", "sweep", "--json", "slurm.json"]) == 0
    run = load_run(tmp_path / "slurm.json")
    assert sorted(r.point.id for r in run.results) == sorted(["24x40x32-float32-NN", "40x24x16-float32-NN",
                                                               "16x16x48-float32-NN"])
    assert all(r.status == "ok" and r.measurement.timing.median_s > 0 for r in run.results)
    assert all(extra["conformance"] == "passed" and extra["worker_device"]["kind"] == "cpu"
               for extra in run.extras)  # the verdict earned, and the fingerprint, in the worker
    assert run.meta["executor"] == "slurm" and len(run.meta["devices"]) == 2
    for worker in run.meta["devices"]:  # each task earned its verdict in its setup, before its points
        assert worker["setup"]["suites"]["numpy:float32"]["verdict"] == "passed"
        assert 0 <= worker["began_s"] <= worker["ready_s"] <= worker["done_s"]
    assert len(list((tmp_path / "sweep" / "points").glob("*.json"))) == 3
    assert main([*common, "--json", "here.json"]) == 0  # in this process, for compare
    capsys.readouterr()
    # compare pairs every row of the two runs (its verdicts depend on this machine's load)
    assert main(["compare", "here.json", "slurm.json", "--format", "json"]) in (0, 1)
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert len(rows) == 3 and all(row["verdict"] in ("same", "faster", "slower", "ambiguous") for row in rows)


def test_tune_through_ray_stores_rows_through_the_import(tmp_path: Path, empty_cache: Path,
                                                        local_ray: None) -> None:
    from gemmzoo.cli import main
    from gemmzoo.tuning import state

    code = main(["tune", "--backend", "numpy", "--shape", "24x40x32", "--shape", "40x24x16",
                 "--budget", "0.01", "--executor", "ray", "--results-dir", str(tmp_path / "sweep")])
    assert code == 0
    rows = [r for r in state.store().all_records() if r.backend == "numpy"]
    assert sorted((r.m, r.n, r.k) for r in rows) == [(24, 40, 32), (40, 24, 16)]
    assert all(r.status == "ok" and r.median_s > 0 for r in rows)
    assert (tmp_path / "sweep" / "tuning-import.json").exists()
