"""``--devices``: one worker process per GPU, one result. Here with a pretend list of GPUs: the
workers are real processes (spawned, each with its own CUDA_VISIBLE_DEVICES) that run CPU backends."""

from __future__ import annotations

import functools
import json
import os
import signal
import sys
import time
import types
from pathlib import Path

import pytest

from gemmzoo.cli import main
from gemmzoo.measure import gpu_state
from gemmzoo.problems.grids import GridPoint
from gemmzoo.scale import jobs as scale_jobs
from gemmzoo.scale.bench import OK, BenchResult
from gemmzoo.scale.shards import DevicesError, parse_devices, run_on_devices, visible_gpus
from gemmzoo.tuning import state

POINTS = [GridPoint(8 * i, 8, 16, "float32") for i in range(1, 7)]


def visible_device(point: GridPoint) -> tuple[str | None, int]:
    """A worker's job in these tests: which GPU it was given, and for which point."""
    return os.environ.get("CUDA_VISIBLE_DEVICES"), point.m


def dies_on_the_third(point: GridPoint) -> int:
    if point.m == 24:
        os._exit(3)
    return point.m


pytestmark = pytest.mark.usefixtures("empty_cache")


def test_visible_gpus_and_parse_devices():
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "2, 3"}) == ["2", "3"]
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": ""}) == []
    assert visible_gpus({}, device_files=["/dev/nvidia0", "/dev/nvidia1"]) == ["0", "1"]
    assert parse_devices("all", ["2", "3"]) == ["2", "3"]
    assert parse_devices("1", ["2", "3"]) == ["3"]  # a position in the visible list
    assert parse_devices("1,0", ["GPU-a", "GPU-b"]) == ["GPU-b", "GPU-a"]
    bad = (("2", "not one of the visible GPUs 0..1"), ("0,0", "named twice"), ("x", "not one"))
    for text, message in bad:
        with pytest.raises(DevicesError, match=message):
            parse_devices(text, ["2", "3"])
    with pytest.raises(DevicesError, match="no GPU is visible"):
        parse_devices("all", [])


def test_each_worker_sees_only_its_gpu_and_every_point_runs_once():
    heard = []
    outcomes, reports = run_on_devices(visible_device, POINTS, ["5", "7"],
                                       on_done=lambda point, device, outcome: heard.append((point, device)))
    assert [value[1] for kind, value in outcomes] == [p.m for p in POINTS]  # in the grid's order
    assert all(kind == "ok" for kind, _ in outcomes)
    for (point, device), (_, (seen, m)) in zip(sorted(heard, key=lambda h: h[0].m), outcomes, strict=True):
        assert seen == device and m == point.m  # the job ran where the parent says it did
    assert {r.device for r in reports} == {"5", "7"} and sum(r.points for r in reports) == len(POINTS)
    assert os.environ.get("CUDA_VISIBLE_DEVICES") != "7"  # the parent's own setting is restored


def test_a_point_that_ends_every_worker_it_meets_is_given_up_the_rest_finish():
    outcomes, reports = run_on_devices(dies_on_the_third, POINTS, ["0", "1"], retries=1)
    kinds = {point.m: outcome for point, outcome in zip(POINTS, outcomes, strict=True)}
    assert kinds[24][0] == "error" and "exit code 3" in kinds[24][1] and "ended 2 workers" in kinds[24][1]
    assert all(kinds[p.m] == ("ok", p.m) for p in POINTS if p.m != 24)
    # two workers ended on it (the first try and the one retry); replacements finished the rest
    assert sum(r.error.count("exit code 3") for r in reports) == 2
    assert sum(r.points for r in reports) == len(POINTS) - 1


def killed_once(log_dir: str, kill_at: int, point: GridPoint) -> tuple[int, str | None]:
    """Logs each finished call; SIGKILLs its own process the first time it meets ``kill_at``
    (a worker lost mid-sweep, as an out-of-memory kill would lose it)."""
    log = Path(log_dir)
    marker = log / "killed"
    if point.m == kill_at and not marker.exists():
        marker.write_text(os.environ.get("CUDA_VISIBLE_DEVICES") or "")
        os.kill(os.getpid(), signal.SIGKILL)
    (log / f"done-{point.m}-{os.getpid()}-{time.monotonic_ns()}").write_text("")
    return point.m, os.environ.get("CUDA_VISIBLE_DEVICES")


def test_a_killed_worker_s_point_is_run_again_nothing_lost_nothing_twice(tmp_path):
    heard = []
    job = functools.partial(killed_once, str(tmp_path), 32)
    outcomes, reports = run_on_devices(job, POINTS, ["0", "1"],
                                       on_done=lambda point, device, outcome: heard.append(point.m))
    assert (tmp_path / "killed").exists()  # the kill did happen, mid-sweep
    assert [kind for kind, _ in outcomes] == ["ok"] * len(POINTS)
    assert [value[0] for _, value in outcomes] == [p.m for p in POINTS]  # in the grid's order
    assert all(value[1] in ("0", "1") for _, value in outcomes)
    assert sorted(heard) == [p.m for p in POINTS]  # each point heard once
    for point in POINTS:  # each point finished exactly once: nothing lost, nothing counted twice
        assert len(list(tmp_path.glob(f"done-{point.m}-*"))) == 1, point.m
    assert sum(r.points for r in reports) == len(POINTS)
    killed = (tmp_path / "killed").read_text()
    assert [r.device for r in reports if r.error] == [killed] and "(exit code -9) on 32x8x16" in \
        next(r.error for r in reports if r.error)


def test_bench_devices_gives_one_merged_result(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(scale_jobs, "visible_gpus", lambda: ["0", "1"])
    out = tmp_path / "run.json"
    shapes = [arg for p in POINTS for arg in ("--shape", f"{p.m}x{p.n}x{p.k}")]
    with pytest.warns(UserWarning, match="numpy run on the CPU, whose cores the 2 workers share"):
        assert main(["bench", *shapes, "--backend", "numpy", "--budget", "0.005", "--devices", "all",
                     "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    assert [r["point"] for r in data["results"]] == [p.id for p in POINTS]
    assert all(r["status"] == OK and r["median_s"] > 0 for r in data["results"])
    assert sorted(w["device"] for w in data["devices"]) == ["0", "1"]
    assert sum(w["points"] for w in data["devices"]) == len(POINTS)
    assert "gpu" not in data["results"][0]  # a CPU backend's result names no GPU


def test_tune_devices_stores_every_point(monkeypatch, capsys):
    monkeypatch.setattr(scale_jobs, "visible_gpus", lambda: ["0", "1"])
    shapes = [arg for p in POINTS for arg in ("--shape", f"{p.m}x{p.n}x{p.k}")]
    assert main(["tune", *shapes, "--backend", "numpy", "--budget", "0.002", "--devices", "0,1"]) == 0
    assert f"stored {len(POINTS)} measurements" in capsys.readouterr().out
    assert state.store().count() == len(POINTS)


def test_devices_without_a_gpu_is_a_usage_error(monkeypatch, capsys):
    monkeypatch.setattr(scale_jobs, "visible_gpus", lambda: [])
    assert main(["bench", "--shape", "8x8x8", "--backend", "numpy", "--devices", "all"]) == 2
    assert "no GPU is visible" in capsys.readouterr().err


def test_a_cuda_result_records_its_gpu(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    monkeypatch.setattr(gpu_state, "_nvml", lambda: None)  # as on a machine without NVML
    result = BenchResult("some-gpu-backend", "cuda", POINTS[0], OK)
    extra = scale_jobs.gpu_extra(result)
    assert extra["gpu"]["index"] == 3 and extra["gpu"]["source"] == "none"
    assert set(extra["gpu"]) >= {"uuid", "sm_clock_mhz", "mem_clock_mhz", "power_w", "power_limit_w",
                                 "pstate", "temperature_c", "throttle_reasons"}
    assert scale_jobs.gpu_extra(BenchResult("numpy", "cpu", POINTS[0], OK)) == {}


def _fake_pynvml() -> types.ModuleType:
    """The pynvml calls gemmzoo makes, answering for two GPUs (names as pynvml spells them)."""
    uuids = ["GPU-aaaa", "GPU-bbbb"]
    calls = {
        "nvmlInit": lambda: None,
        "nvmlDeviceGetCount": lambda: 2,
        "nvmlDeviceGetHandleByIndex": lambda index: index,
        "nvmlDeviceGetHandleByUUID": lambda uuid: uuids.index(uuid.decode()),  # gemmzoo passes bytes
        "nvmlDeviceGetIndex": lambda handle: handle,
        "nvmlDeviceGetUUID": lambda handle: uuids[handle],
        "nvmlDeviceGetName": lambda handle: b"NVIDIA H200",
        "nvmlDeviceGetClockInfo": lambda handle, kind: {1: 1755 + handle, 2: 3201}[kind],
        "nvmlDeviceGetMaxClockInfo": lambda handle, kind: 1980,
        "nvmlDeviceGetPowerUsage": lambda handle: 612_345,
        "nvmlDeviceGetEnforcedPowerLimit": lambda handle: 700_000,
        "nvmlDeviceGetPerformanceState": lambda handle: 0,
        "nvmlDeviceGetTemperature": lambda handle, sensor: 61,
        # the power cap, and a bit gemmzoo does not name
        "nvmlDeviceGetCurrentClocksThrottleReasons": lambda handle: 0x4 | 0x1000,
    }
    module = types.ModuleType("pynvml")
    for name, call in calls.items():
        setattr(module, name, call)
    return module


def test_gpu_state_through_pynvml(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", _fake_pynvml())
    # the GPU named by CUDA_VISIBLE_DEVICES, as in a process whose torch has not started CUDA
    # (where an earlier test of this process did, torch would name the real GPU)
    monkeypatch.setattr(gpu_state, "_torch_uuid", lambda: None)
    gpu_state._nvml.cache_clear()
    try:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
        state_now = gpu_state.gpu_state()
        assert gpu_state.gpu_count() == 2
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-aaaa")
        by_uuid = gpu_state.gpu_state()
    finally:
        gpu_state._nvml.cache_clear()
    assert state_now == {"index": 1, "uuid": "GPU-bbbb", "name": "NVIDIA H200", "sm_clock_mhz": 1756,
                         "mem_clock_mhz": 3201, "max_sm_clock_mhz": 1980, "power_w": 612.345,
                         "power_limit_w": 700.0, "temperature_c": 61, "pstate": "P0",
                         "throttle_reasons": ["sw_power_cap"], "source": "pynvml"}
    assert by_uuid["index"] == 0 and by_uuid["sm_clock_mhz"] == 1755
