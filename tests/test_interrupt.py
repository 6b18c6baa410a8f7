"""Ctrl-C during a command that runs backends, JAX's included, exits 130 with the results so far
(a subprocess, interrupted with SIGINT as a terminal does)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

pytest.importorskip("jax")


def _interrupted(tmp_path, args: list[str], after_s: float) -> tuple[subprocess.CompletedProcess, bool]:
    env = {**os.environ, "GEMMZOO_CACHE_DIR": str(tmp_path / "cache")}
    env.pop("GEMMZOO_BACKENDS", None)
    process = subprocess.Popen([sys.executable, "-m", "gemmzoo", *args], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, env=env, text=True, cwd=tmp_path)
    time.sleep(after_s)
    running = process.poll() is None
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=300)
    return subprocess.CompletedProcess(args, process.returncode, out, err), running


def test_ctrl_c_during_check_of_jax_exits_130(tmp_path):
    done, running = _interrupted(tmp_path, ["check", "jax"], 6.0)
    if not running:
        pytest.skip("the check ended before it was interrupted")
    assert done.returncode == 130, done.stderr
    assert "Aborted" not in done.stderr and "terminate called" not in done.stderr
    assert "interrupted" in done.stderr


def test_ctrl_c_during_bench_with_jax_exits_130_and_writes_the_results_so_far(tmp_path):
    path = tmp_path / "partial.json"
    done, running = _interrupted(tmp_path, ["bench", "--backend", "jax", "--backend", "numpy",
                                            *(f"--shape={s}x{s}x{s}" for s in range(200, 1400, 100)),
                                            "--json", str(path)], 6.0)
    if not running:
        pytest.skip("the bench ended before it was interrupted")
    assert done.returncode == 130, done.stderr
    assert "terminate called" not in done.stderr
    if path.exists():  # interrupted once the run had begun: what was measured is written
        assert isinstance(json.loads(path.read_text()), dict)
