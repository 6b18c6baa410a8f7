"""benchmarks/scale_out.py on the CPU: the one- and two-worker runs through submitit's local
executor with pretend GPUs (CUDA_VISIBLE_DEVICES) and a CPU backend, and its time guard."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "scale_out.py"


def _script() -> object:
    spec = importlib.util.spec_from_file_location("scale_out_script", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_stopped_run_ends_with_its_workers_and_says_so(tmp_path: Path) -> None:
    script = _script()
    # A command that starts a worker of its own and outlives its limit, ignoring nothing.
    child = ("import subprocess, sys, time; "
             "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
             "open(sys.argv[1], 'w').write(str(p.pid)); time.sleep(60)")
    began = time.perf_counter()
    found = script.run_bounded("sleeper", [sys.executable, "-c", child, str(tmp_path / "pid")], None, 3.0,
                               tmp_path / "log")
    assert found["stopped"] and found["exit"] != 0 and time.perf_counter() - began < 30
    worker = int((tmp_path / "pid").read_text())
    deadline = time.time() + 10
    while time.time() < deadline:  # the command's own worker was ended with it
        try:
            os.kill(worker, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        pytest.fail("the stopped command's worker is still running")
    done = script.run_bounded("quick", [sys.executable, "-c", "print('fine')"], None, 30.0, tmp_path / "log2")
    assert done == {**done, "stopped": False, "exit": 0} and "fine" in (tmp_path / "log2").read_text()


def test_one_worker_against_two_through_submitit_local(tmp_path: Path, empty_cache: Path) -> None:
    pytest.importorskip("submitit")
    paths = filter(None, (os.environ.get("PYTHONPATH"), str(SCRIPT.parents[1])))
    environment = {**os.environ, "CUDA_VISIBLE_DEVICES": "0,1", "PYTHONPATH": os.pathsep.join(paths)}
    out = tmp_path / "out"
    shapes = [arg for shape in ("24x40x32", "40x24x16", "16x16x48", "32x32x32") for arg in ("--shape", shape)]
    command = [sys.executable, str(SCRIPT), str(out), "--backend", "numpy", *shapes, "--budget", "0.01",
               "--max-seconds", "240", "--fresh"]
    done = subprocess.run(command, capture_output=True, text=True, env=environment, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    summary = json.loads((out / "scale_out.json").read_text())
    assert summary["finished"] and summary["same_points"]
    assert summary["speedup_with_suites"] > 0 and summary["speedup_timing_only"] > 0
    one, two = summary["runs"]["one"], summary["runs"]["two"]
    assert one["ok"] == two["ok"] == 4 and len(one["workers"]) == 1 and len(two["workers"]) == 2
    for worker in one["workers"] + two["workers"]:  # each worker has its verdict from its own set-up
        assert worker["suites"] == {"numpy:float32": "passed"}
        assert worker["setup_s"] >= worker["suites_s"] >= 0
    # each run earned it in its own empty cache; the pretend GPUs of one run are one device ("cpu"),
    # so a worker that asks after the other stored its verdict finds it there
    for run in (one, two):
        assert max(worker["suites_s"] for worker in run["workers"]) > 0
        assert worker["began_s"] <= worker["ready_s"] <= worker["done_s"]
    assert sum(summary["compare_verdicts"].values()) == 4  # every row of the two runs judged
    for name in ("one.json", "two.json", "compare.txt", "report.html"):
        assert (out / name).stat().st_size > 0
    assert "with suites" in done.stdout and "timing only" in done.stdout and "SLOWER" in done.stdout
