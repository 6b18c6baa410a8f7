"""``python -m pytest --pyargs gemmzoo.benchmarks --benchmark-only`` end to end, in a subprocess
started in an empty directory, read back from its JSON.

The example plugin (examples/gemmzoo-blocked) is installed the way pip leaves it: its package
importable and its ``.dist-info`` (with the entry point) on the path, so the run sees a
third-party backend as a user's machine would.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from fake_distributions import subprocess_env
from known_cpu import run_options

import gemmzoo
from gemmzoo.cli.options import interpreted
from gemmzoo.problems.grids import get_grid

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE_SRC = ROOT / "examples" / "gemmzoo-blocked" / "src"
EXTRA_INFO = {"backend", "m", "n", "k", "dtype", "layout", "tflops", "gflops", "peak_tflops", "peak_percent",
              "error_ratio", "rel_error", "device_name", "driver", "cuda_driver", "libraries", "timing",
              "accuracy"}
FAST = ("--benchmark-only", "--gemmzoo-grid", "smoke", "-q", "-p", "no:cacheprovider",
        "--benchmark-max-time=0.005", "--benchmark-min-rounds=3")


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One tuning cache for the module's runs (never the user's own): the plugin's suite runs in
    the first run that times it, and the later runs find its verdict, as on a user's machine. The
    bundled backends' float32 verdicts are given: their suites are test_conformance.py's, case by
    case, and torch-compile's (one Inductor compile per case) was most of a run's time."""
    from gemmzoo import Session
    from gemmzoo.conformance.runner import CheckResult, ConformanceReport
    from gemmzoo.tuning.verdicts import store_report

    cache = tmp_path_factory.mktemp("cache")
    with Session(cache_dir=cache):
        for backend in _cpu_backends():
            given = CheckResult(backend.name, "float32-given-by-the-test", True)
            assert store_report(backend, ConformanceReport(backend.name, [given]), ["float32"])
    return cache


def _cpu_backends() -> list:
    """The bundled backends a run on this machine's CPU times (the interpreted ones it leaves out)."""
    return [b for b in gemmzoo.backends() if b.device == "cpu" and "float32" in b.dtypes
            and b.unavailable_reason() is None and not interpreted(b)]


@pytest.fixture
def site(tmp_path: Path) -> Path:
    """A site directory holding the installed example plugin's metadata (its code stays in place)."""
    site = tmp_path / "site"
    info = site / "gemmzoo_blocked-0.1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: gemmzoo-blocked\nVersion: 0.1.0\n")
    (info / "entry_points.txt").write_text("[gemmzoo]\ngemmzoo-blocked = gemmzoo_blocked\n")
    (site / "gemmzoo_blocked.pth").write_text(f"{EXAMPLE_SRC}\n")  # how an editable install points
    return site


def _run(cwd: Path, site: Path, cache: Path, *args: str) -> dict:
    cwd.mkdir(exist_ok=True)
    out = cwd.parent / f"{cwd.name}.json"
    env = subprocess_env(site, GEMMZOO_CACHE_DIR=str(cache))
    # As on a user's machine without a GPU: the Triton kernels under the interpreter (this test
    # run's own switch) take minutes of suites here and are checked case by case in
    # test_conformance.py; the CPU backends and the plugin are what this run is about.
    env.pop("TRITON_INTERPRET", None)
    # A .pth file is read only in a site directory: make this one, as pip's target would be.
    code = ("import site, sys; site.addsitedir(sys.argv[1]); import pytest; "
            "sys.exit(pytest.main(sys.argv[2:]))")
    known_cpu = run_options(env)  # py-cpuinfo's probe once per test process, not once per run
    run = subprocess.run([sys.executable, "-c", code, str(site), *FAST, *known_cpu, f"--benchmark-json={out}",
                          *args], capture_output=True, text=True, cwd=cwd, env=env, timeout=300)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return json.loads(out.read_text())


def _expected(names):
    return {f"test_gemm[{p.id}-{name}]" for name in names for p in get_grid("smoke", dtypes=["float32"])}


def _check(data, names):
    benches = data["benchmarks"]
    assert {b["name"] for b in benches} == _expected(names)
    for bench in benches:
        info = bench["extra_info"]
        assert EXTRA_INFO <= set(info), EXTRA_INFO - set(info)
        assert bench["group"] == f"{info['m']}x{info['n']}x{info['k']}-{info['dtype']}-{info['layout']}"
        assert info["tflops"] > 0 and 0 <= info["error_ratio"] <= 1
        median = bench["stats"]["median"]
        assert info["tflops"] == pytest.approx(2 * info["m"] * info["n"] * info["k"] / median / 1e12)
        assert info["libraries"]["numpy"] and info["accuracy"] == "componentwise"


def test_pyargs_from_an_empty_directory_runs_every_cpu_backend_and_the_plugin(tmp_path, site, cache):
    names = [b.name for b in _cpu_backends()]
    assert {"numpy", "torch-cpu"} <= set(names)
    data = _run(tmp_path / "empty", site, cache, "--pyargs", "gemmzoo.benchmarks")
    _check(data, [*names, "numpy-blocked"])


def test_pyargs_backend_option_narrows_to_one_backend(tmp_path, site, cache):
    data = _run(tmp_path / "empty", site, cache, "--pyargs", "gemmzoo.benchmarks",
                "--gemmzoo-backend", "numpy-blocked")
    _check(data, ["numpy-blocked"])


def test_a_plugin_authors_test_file_reuses_the_benchmarks_with_one_import(tmp_path, site, cache):
    author = tmp_path / "author"
    author.mkdir()
    (author / "test_my_benchmarks.py").write_text("from gemmzoo.benchmarks import test_gemm  # noqa: F401\n")
    data = _run(author, site, cache, "--gemmzoo-backend", "numpy-blocked")
    _check(data, ["numpy-blocked"])


def test_pytest_benchmarks_under_xdist_land_in_one_report(tmp_path, site, cache):
    pytest.importorskip("xdist")
    data = _run(tmp_path / "empty", site, cache, "--pyargs", "gemmzoo.benchmarks", "-n", "2",
                "--gemmzoo-backend", "numpy")
    _check(data, ["numpy"])
