"""``gemmzoo tune --recorded``: which backends it times, its suites run side by side in worker
processes, and its progress lines."""

from __future__ import annotations

import numpy as np
import pytest

import gemmzoo
from gemmzoo.cli import main
from gemmzoo.cli.recorded import Outcome, narrowed, suite_workers
from gemmzoo.session import current
from gemmzoo.tuning import state
from gemmzoo.tuning.fingerprint import device_fingerprint
from gemmzoo.tuning.tune import conformance_verdict

pytestmark = pytest.mark.usefixtures("empty_cache")


def names(backends):
    return {b.name for b in backends}


def test_compiling_baseline_and_unreachable_backends_are_left_out_unless_asked_for():
    pytest.importorskip("torch")
    everything = current().select()
    available = {b.name for b in everything if state.unavailable_reason(b) is None}
    heard = []
    kept = names(narrowed(everything, include_compiling=False, named=False, say=heard.append))
    assert "torch-compile" in available and "torch-compile" not in kept
    assert {"numpy", "torch-cpu"} <= kept
    assert any("torch-compile" in line and "--include-compiling" in line for line in heard)
    if "jax" in available:  # computes on JAX arrays: torch and NumPy callers reach it by host copies only
        assert "jax" not in kept and any(line.startswith("left out: jax ") for line in heard)
    included = narrowed(everything, include_compiling=True, named=False, say=heard.append)
    assert "torch-compile" in names(included)
    assert names(narrowed(everything, include_compiling=False, named=True, say=heard.append)) == names(
        everything)


def test_suites_run_in_worker_processes_on_cuda_only_and_within_the_cores():
    assert suite_workers("cpu", 6, cores=16) == 0
    assert suite_workers("cuda", 1, cores=16) == 0
    assert suite_workers("cuda", 6, cores=16) == 6
    assert suite_workers("cuda", 20, cores=16) == 8
    assert suite_workers("cuda", 6, cores=2) == 0  # one worker: the suites run in this process


def test_missing_suites_run_in_workers_their_verdicts_are_read_back_and_every_problem_gets_a_line(capsys):
    a = np.random.default_rng(0).standard_normal((12, 20)).astype(np.float32)
    b = np.random.default_rng(1).standard_normal((20, 7)).astype(np.float32)
    gemmzoo.matmul(a, b)
    gemmzoo.matmul(np.asfortranarray(a), b)
    store = state.store()
    assert len(store.recorded(device_fingerprint("cpu"))) == 2
    # the first answers ran the suite of NumPy arrays' own backend only: torch-cpu's is missing
    assert conformance_verdict(store, gemmzoo.get_backend("torch-cpu"), "float32", run=False) is None
    assert main(["tune", "--recorded", "--budget", "0.01", "--suite-workers", "2"]) == 0
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert any(line.startswith("conformance: ") and "in 2 worker processes" in line for line in lines)
    assert "conformance torch-cpu float32: passed" in err
    progress = [line for line in lines if line.startswith("[")]
    assert [line[:5] for line in progress] == ["[1/2]", "[2/2]"]
    assert "12x7x20 float32 cpu:" in progress[0] or "12x7x20 float32 cpu:" in progress[1]
    assert any("12x7x20 TN float32 cpu:" in line for line in progress)
    state.verdicts.clear()
    for name in ("numpy", "torch-cpu"):
        assert conformance_verdict(state.store(), gemmzoo.get_backend(name), "float32", run=False) is True


def test_the_expected_gain_is_the_baseline_time_over_the_chosen_one():
    assert Outcome("numpy", 2e-6, "torch-cpu", 3e-6).gain_text() == "x1.50 vs torch-cpu"
    assert Outcome("torch", 1e-3, None, None).gain_text() == "-"
    assert Outcome("torch", 1e-3, "torch", 1e-3).gain == 1.0


def test_only_results_of_a_size_the_host_judges_quickly_are_judged_unless_all_are_asked_for():
    from gemmzoo.cli.recorded import checked, judged, progress_line
    from gemmzoo.problems.grids import GridPoint

    head = GridPoint(8192, 50257, 768, "bfloat16", "NT")  # an LM head's logits: 411M elements
    projection = GridPoint(8192, 3072, 768, "bfloat16", "NT")  # 25M: Freivalds' test, not one by one
    small = GridPoint(1024, 3072, 768, "bfloat16", "NT")
    assert not judged(head, verify=True, verify_all=False) and judged(head, verify=True, verify_all=True)
    assert not checked(head, verify=True, verify_all=False) and checked(head, verify=True, verify_all=True)
    assert checked(projection, verify=True, verify_all=False) and not judged(projection, True, False)
    assert judged(small, verify=True, verify_all=False)
    assert not judged(small, verify=False, verify_all=True)  # --no-verify wins
    assert not checked(small, verify=False, verify_all=True)
    line = progress_line(1, 3, head, "cuda", Outcome("torch-padded", 1e-3, "torch", 3e-3), 2.0, checked=False)
    assert line.startswith("[1/3] 8192x50257x768 NT bfloat16 cuda: torch-padded, 1 ms, x3.00 vs torch")
    assert "not judged" in line and "--verify-all" in line


def test_the_program_ends_with_its_status_without_jaxs_teardown_once_jax_is_loaded(tmp_path):
    """JAX's runtime threads can be inside its C++ code when the interpreter tears down beside
    torch's CUDA context, aborting a command that succeeded: once JAX is loaded, the program ends
    with its status, output flushed, before that teardown."""
    import os
    import subprocess
    import sys

    pytest.importorskip("jax")
    script = ("import sys, jax\n"
              "sys.argv = ['gemmzoo', 'cache']\n"
              "from gemmzoo.cli import main\n"
              "code = main()\n"
              "print('the interpreter went on', flush=True)\n"
              "sys.exit(code)\n")
    env = {**os.environ, "GEMMZOO_CACHE_DIR": str(tmp_path / "cache")}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert "compiled dispatch:" in done.stdout  # the command's last line, flushed
    assert "the interpreter went on" not in done.stdout
    assert "terminate called" not in done.stderr
