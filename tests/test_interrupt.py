"""Ctrl-C during a command that runs backends, JAX's included, exits 130 with the results so far
(a subprocess, interrupted with SIGINT as a terminal does)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("jax")

#: How long the interrupted command runs at most before Ctrl-C (where its JAX threads cannot be seen).
LONGEST_S = 6.0
#: How long it runs on after JAX's runtime has started its threads: the command is then computing with it.
AFTER_JAX_S = 1.0


def _xla_threads(pid: int) -> bool:
    """Whether process ``pid`` runs the threads of XLA's CPU client (Linux's ``/proc`` names them;
    False where it cannot be read)."""
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return False
    for task in tasks:
        try:
            if "XLA" in (task / "comm").read_text():
                return True
        except OSError:
            continue
    return False


def _wait_for_jax(process: subprocess.Popen) -> None:
    """Wait until ``process`` has run JAX for :data:`AFTER_JAX_S`, or :data:`LONGEST_S` in all
    (where JAX's threads cannot be seen, or do not come)."""
    deadline = time.monotonic() + LONGEST_S
    while time.monotonic() < deadline and process.poll() is None:
        if _xla_threads(process.pid):
            time.sleep(min(AFTER_JAX_S, max(0.0, deadline - time.monotonic())))
            return
        time.sleep(0.05)


def _interrupted(tmp_path, args: list[str]) -> tuple[subprocess.CompletedProcess, bool]:
    env = {**os.environ, "GEMMZOO_CACHE_DIR": str(tmp_path / "cache")}
    env.pop("GEMMZOO_BACKENDS", None)
    process = subprocess.Popen([sys.executable, "-m", "gemmzoo", *args], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, env=env, text=True, cwd=tmp_path)
    _wait_for_jax(process)
    running = process.poll() is None
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=300)
    return subprocess.CompletedProcess(args, process.returncode, out, err), running


def test_ctrl_c_during_check_of_jax_exits_130(tmp_path):
    done, running = _interrupted(tmp_path, ["check", "jax"])
    if not running:
        pytest.skip("the check ended before it was interrupted")
    assert done.returncode == 130, done.stderr
    assert "Aborted" not in done.stderr and "terminate called" not in done.stderr
    assert "interrupted" in done.stderr


def test_ctrl_c_during_bench_with_jax_exits_130_and_writes_the_results_so_far(tmp_path):
    path = tmp_path / "partial.json"
    done, running = _interrupted(tmp_path, ["bench", "--backend", "jax", "--backend", "numpy",
                                            *(f"--shape={s}x{s}x{s}" for s in range(200, 1400, 100)),
                                            "--json", str(path)])
    if not running:
        pytest.skip("the bench ended before it was interrupted")
    assert done.returncode == 130, done.stderr
    assert "terminate called" not in done.stderr
    if path.exists():  # interrupted once the run had begun: what was measured is written
        assert isinstance(json.loads(path.read_text()), dict)
