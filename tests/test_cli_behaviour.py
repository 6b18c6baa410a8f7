"""What a command-line user expects: --version, checked numbers, sizes refused before any work,
exit codes, Ctrl-C with the results so far, the baseline's dtype, the interpreter's slow
backends, gemmzoo cache, and one rule for dtype objects and zero sizes in best_backend."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from cli_forks import CliForks
from fake_distributions import subprocess_env, write_distribution

import gemmzoo
from gemmzoo.cli import main
from gemmzoo.cli.sizes import need, too_large
from gemmzoo.problems.grids import GridPoint

LIGHT = {"GEMMZOO_DISABLE_PLUGINS": "torch,triton,cupy,jax"}

# A numpy backend that raises on one size and sleeps on another (and says so in a file), so that
# a test can stop a run in the middle.
PLUGIN = """
    import os, time
    import gemmzoo
    from gemmzoo_numpy import NumpyBackend

    class Sleepy(NumpyBackend):
        name = "sleepy"

        def matmul(self, a, b):
            if a.shape == (47, 8) and b.shape == (8, 8):
                raise RuntimeError("kernel launch failed")
            if a.shape == b.shape == (37, 37) or os.environ.get("SLEEPY_ALWAYS"):
                open(os.environ["SLEEPY_MARK"], "w").close()
                time.sleep(0.2)
            return super().matmul(a, b)

    @gemmzoo.hookimpl
    def gemmzoo_register_backends(register):
        register(Sleepy())
"""


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    folder = tmp_path_factory.mktemp("sleepy")
    write_distribution(folder, "gemmzoo-sleepy", "1.0", {"sleepy": "gemmzoo_sleepy"},
                       {"gemmzoo_sleepy": PLUGIN})
    return folder


@pytest.fixture(scope="module")
def nowhere(tmp_path_factory):
    return tmp_path_factory.mktemp("nowhere")  # an empty directory: no extra plugins on the path


@pytest.fixture(scope="module")
def run_gemmzoo():
    """``fake_distributions.run_gemmzoo(where, ...)`` for this module's runs, each forked from a
    started interpreter with ``where`` on its path (tests/cli_forks.py): what they print and
    their exit codes are under test here, not the start. Ctrl-C's runs are plain processes."""
    servers: dict[object, CliForks] = {}

    def run(where, *args: str, **env: str):
        if where not in servers:
            servers[where] = CliForks(where)
        return servers[where].run(*args, **env)

    yield run
    for server in servers.values():
        server.close()


def test_version(run_gemmzoo, nowhere):
    from importlib.metadata import version

    result = run_gemmzoo(nowhere, "--version")
    assert result.returncode == 0
    assert result.stdout.strip() == f"gemmzoo {version('gemmzoo')}"


@pytest.mark.parametrize("args, said", [
    (["bench", "--budget", "-1"], "--budget: -1 is out of range"),
    (["bench", "--budget", "0"], "--budget: 0 is out of range"),
    (["bench", "--rounds", "0"], "--rounds: 0 is out of range"),
    (["bench", "--shape", "-5x10x10"], "shape '-5x10x10'"),
    (["tune", "--budget", "nan"], "--budget: nan is out of range"),
    (["best", "-1", "8", "8"], "M: -1 is out of range"),
    (["check", "numpy", "--random", "-2"], "--random: -2 is out of range"),
    (["check", "numpy", "--workers", "0"], "--workers: 0 is out of range"),
    (["check", "numpy", "--workers", "65"], "--workers: 65 is out of range: must be at least 1 and at most"),
])
def test_numbers_are_checked_with_a_one_line_error(run_gemmzoo, nowhere, args, said):
    result = run_gemmzoo(nowhere, *args, **LIGHT)
    assert result.returncode == 2, result.stdout + result.stderr
    assert said in result.stderr + result.stdout
    assert "expected one argument" not in result.stderr and "Traceback" not in result.stderr


def test_sizes_are_estimated_from_operands_result_and_reference():
    point = GridPoint(100, 30, 20, "float16")
    operands, product = 100 * 20 + 20 * 30, 100 * 30
    host = operands * 20 + product * 20  # fp32 inputs, float64 copies and |.|, two float64 products, C
    assert need(point, "cuda").host == host and need(point, "cuda").device == (operands + product) * 2
    assert need(point, "cpu").host == host + (operands + product) * 2 and need(point, "cpu").device == 0


def test_too_large_names_the_largest_point(monkeypatch):
    from gemmzoo.cli import sizes

    monkeypatch.setattr(sizes, "host_free", lambda: 10**9)
    small, large = GridPoint(64, 64, 64), GridPoint(8192, 8192, 8192)
    cpu = type("B", (), {"device": "cpu"})()
    assert too_large([small], [cpu]) is None
    why = too_large([small, large], [cpu])
    assert why.startswith("8192x8192x8192 float32 needs about") and "1 GB is available" in why


@pytest.mark.parametrize("command", ["bench", "tune"])
def test_a_shape_too_large_is_refused_before_any_work(run_gemmzoo, nowhere, tmp_path, command):
    started = time.monotonic()
    result = run_gemmzoo(nowhere, command, "--shape", "40000x40000x40000", "--backend", "numpy",
                         GEMMZOO_CACHE_DIR=str(tmp_path / "cache"), **LIGHT)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "40000x40000x40000 float32 needs about" in result.stderr and "GB" in result.stderr
    assert time.monotonic() - started < 30  # refused at once, not after the operands were made
    assert "MemoryError" not in result.stdout + result.stderr


def test_an_error_row_exits_1_and_names_the_backend(run_gemmzoo, site, tmp_path):
    result = run_gemmzoo(site, "bench", "--backend", "numpy", "--backend", "sleepy", "--shape", "47x8x8",
                         "--budget", "0.005", SLEEPY_MARK=str(tmp_path / "mark"), **LIGHT)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "ERROR sleepy 47x8x8-float32-NN: RuntimeError: kernel launch failed" in result.stdout


def _interrupted(site, tmp_path, *args, **variables):
    """Start ``gemmzoo ARGS``, send SIGINT once the sleepy backend reached 37x37x37 (or any call,
    with ``SLEEPY_ALWAYS``); the exit status, standard output and standard error."""
    mark = tmp_path / "mark"
    env = subprocess_env(site, SLEEPY_MARK=str(mark), GEMMZOO_CACHE_DIR=str(tmp_path / "cache"), **LIGHT,
                         **variables)
    process = subprocess.Popen([sys.executable, "-m", "gemmzoo", *args], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, env=env)
    deadline = time.monotonic() + 120
    while not mark.exists():
        assert process.poll() is None and time.monotonic() < deadline, process.communicate()
        time.sleep(0.05)
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=120)
    return process.returncode, out, err


def test_ctrl_c_in_bench_writes_the_results_so_far_and_exits_130(site, tmp_path):
    path = tmp_path / "partial.json"
    code, out, err = _interrupted(site, tmp_path, "bench", "--backend", "numpy", "--backend", "sleepy",
                                  "--shape", "16x16x16", "--shape", "37x37x37", "--shape", "24x24x24",
                                  "--budget", "2", "--json", str(path))
    assert code == 130, out + err
    assert "Traceback" not in err and "interrupted" in err
    document = json.loads(path.read_text())
    assert document["interrupted"] is True
    done = {(r["backend"], r["point"]) for r in document["results"]}
    assert {("numpy", "16x16x16-float32-NN"), ("sleepy", "16x16x16-float32-NN")} <= done
    assert not any(point.startswith("24x24x24") for _backend, point in done)
    assert all(r["status"] == "ok" and r["caller_s"] > 0 for r in document["results"])
    assert "16x16x16" in out  # the table of what was measured


def test_ctrl_c_in_tune_keeps_the_stored_measurements_and_exits_130(site, tmp_path):
    code, out, err = _interrupted(site, tmp_path, "tune", "--backend", "numpy", "--backend", "sleepy",
                                  "--shape", "16x16x16", "--shape", "37x37x37", "--budget", "2",
                                  "--format", "json")
    assert code == 130, out + err
    rows = json.loads(out)
    assert [row["problem"] for row in rows] == ["16x16x16 float32 cpu"]
    assert "stored 2 measurements" in err


def test_ctrl_c_in_check_prints_the_backends_checked_and_exits_130(site, tmp_path):
    code, out, err = _interrupted(site, tmp_path, "check", "numpy", "sleepy", "--dtype", "float32",
                                  "--format", "json", SLEEPY_ALWAYS="1")
    assert code == 130, out + err
    assert json.loads(out) == [{"backend": "numpy", "dtypes": "float32", "accuracy": "componentwise",
                                "checks": json.loads(out)[0]["checks"], "failed": "0", "result": "conforms"}]
    assert int(json.loads(out)[0]["checks"]) > 10
    assert "interrupted: 1 of 2 backends checked" in err and "Traceback" not in err


def test_missing_matplotlib_is_reported_before_the_run(monkeypatch, capsys, tmp_path):
    from gemmzoo.cli import cmd_bench

    real = cmd_bench.importlib.util.find_spec
    monkeypatch.setattr(cmd_bench.importlib.util, "find_spec",
                        lambda name, *rest: None if name == "matplotlib" else real(name, *rest))
    monkeypatch.setattr(cmd_bench, "run_bench", lambda *a, **k: pytest.fail("measured before refusing"))
    assert main(["bench", "--shape", "8x8x8", "--backend", "numpy", "--plot", str(tmp_path / "p.png")]) == 2
    assert "--plot needs matplotlib" in capsys.readouterr().err


def test_a_baseline_without_the_dtype_is_replaced_or_refused(capsys, wide_tables):
    pytest.importorskip("torch")
    args = ["bench", "--shape", "16x8x8", "--dtype", "bfloat16", "--backend", "numpy", "--backend",
            "torch-cpu", "--budget", "0.005", "--format", "json"]
    assert main(args) == 0
    captured = capsys.readouterr()
    assert "baseline: torch-cpu (numpy, the first choice, does not compute bfloat16)" in captured.err
    summary = json.loads(captured.out)["summary"]
    assert {entry["baseline"] for entry in summary} == {"torch-cpu"}
    assert main([*args, "--baseline", "numpy"]) == 2
    assert "baseline 'numpy' does not compute bfloat16; choose one of: torch-cpu" in capsys.readouterr().err


@pytest.mark.interpreter  # on a GPU host, the switch set here would leave this process's kernels interpreted
def test_interpreted_triton_backends_are_left_out_unless_named(monkeypatch, capsys, empty_cache):
    pytest.importorskip("triton")
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    from gemmzoo.cli.options import interpreted
    from gemmzoo.conformance.runner import CheckResult, ConformanceReport
    from gemmzoo.tuning.verdicts import store_report

    slow = [b for b in gemmzoo.backends() if interpreted(b)]
    if not slow:
        pytest.skip("no Triton backend runs under the interpreter here (a GPU, or no triton)")
    # The others' float32 verdicts are given (their suites are test_conformance.py's; torch-compile's
    # compiles every case): what is under test is which backends the bench takes.
    for backend in gemmzoo.backends():
        if "float32" in backend.dtypes and not interpreted(backend) and backend.unavailable_reason() is None:
            given = CheckResult(backend.name, "float32-given-by-the-test", True)
            store_report(backend, ConformanceReport(backend.name, [given]), ["float32"])
    assert main(["bench", "--shape", "8x8x8", "--budget", "0.002", "--format", "json"]) == 0
    captured = capsys.readouterr()
    benched = {r["backend"] for r in json.loads(captured.out)["results"]}
    assert benched and not benched & {b.name for b in slow}
    assert "left out under TRITON_INTERPRET=1" in captured.err and slow[0].name in captured.err


def test_cache_shows_and_clears_the_tuning_database(run_gemmzoo, nowhere, tmp_path):
    cache = tmp_path / "cache"
    env = {"GEMMZOO_CACHE_DIR": str(cache), **LIGHT}
    empty = json.loads(run_gemmzoo(nowhere, "cache", "--format", "json", **env).stdout)
    compiled = empty[0].pop("compiled_dispatch")
    assert compiled["built"] is False and compiled["reason"]
    assert empty == [{"path": str(cache / "tuning.sqlite3"), "exists": False, "bytes": 0, "measurements": 0,
                      "conformance_verdicts": 0}]
    assert not cache.exists()  # looking does not create a database
    tuned = run_gemmzoo(nowhere, "tune", "--shape", "16x8x8", "--shape", "8x8x8", "--budget", "0.005", **env)
    assert tuned.returncode == 0, tuned.stdout + tuned.stderr
    [shown] = json.loads(run_gemmzoo(nowhere, "cache", "--format", "json", **env).stdout)
    assert shown["exists"] and shown["bytes"] > 0 and shown["measurements"] == 2
    assert shown["conformance_verdicts"] == 1
    cleared = run_gemmzoo(nowhere, "cache", "--clear", **env)
    assert cleared.returncode == 0 and "cleared" in cleared.stdout
    [after] = json.loads(run_gemmzoo(nowhere, "cache", "--format", "json", **env).stdout)
    assert after["measurements"] == 0 and after["conformance_verdicts"] == 0  # emptied in place


def test_best_backend_takes_numpy_and_torch_dtype_objects(empty_cache):
    import ml_dtypes

    from gemmzoo.contract.dtypes import dtype_name

    assert gemmzoo.best_backend((16, 16, 16), dtype=np.float32, measure=False) is \
        gemmzoo.best_backend((16, 16, 16), dtype="float32", measure=False)
    objects = (np.float64, np.dtype("float16"), ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn)
    assert [dtype_name(x) for x in objects] == ["float64", "float16", "bfloat16", "float8_e4m3fn"]
    torch = pytest.importorskip("torch")
    assert dtype_name(torch.float16) == "float16" and dtype_name(torch.float8_e4m3fn) == "float8_e4m3fn"
    assert gemmzoo.best_backend((16, 16, 16), dtype=torch.float16, device="cpu", measure=False).name
    with pytest.raises(ValueError, match="int32"):
        gemmzoo.best_backend((16, 16, 16), dtype=np.int32)


def test_zero_sizes_are_an_empty_product_everywhere(run_gemmzoo, nowhere, empty_cache, monkeypatch):
    from gemmzoo.tuning import select

    monkeypatch.setattr(select, "measure_records", lambda *a, **k: pytest.fail("measured an empty product"))
    chosen = gemmzoo.best_backend((0, 10, 10))
    assert chosen.device == "cpu"
    rng = np.random.default_rng(0)
    empty = gemmzoo.matmul(rng.standard_normal((0, 3)).astype(np.float32),
                           rng.standard_normal((3, 2)).astype(np.float32))
    assert empty.shape == (0, 2)
    with pytest.raises(ValueError, match="non-negative"):
        gemmzoo.best_backend((-1, 10, 10))
    result = run_gemmzoo(nowhere, "best", "0", "10", "10", GEMMZOO_CACHE_DIR=str(empty_cache),
                         **LIGHT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "for 0x10x10 float32" in result.stdout


def test_best_refuses_to_measure_a_shape_too_large(run_gemmzoo, nowhere, tmp_path):
    result = run_gemmzoo(nowhere, "best", "40000", "40000", "40000", GEMMZOO_CACHE_DIR=str(tmp_path / "c"),
                         **LIGHT)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "40000x40000x40000 float32 needs about" in result.stderr and "--no-measure" in result.stderr
    assert not (tmp_path / "c" / "tuning.sqlite3").exists()  # nothing measured, nothing stored
