"""`pytest benchmarks --benchmark-only` end to end, in a subprocess, read back from its JSON."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import gemmzoo
from gemmzoo.grids import get_grid

ROOT = Path(__file__).resolve().parent.parent
EXTRA_INFO = {"backend", "m", "n", "k", "dtype", "layout", "tflops", "gflops", "peak_tflops", "peak_percent",
              "error_ratio", "rel_error", "device_name", "driver", "cuda_driver", "libraries", "timing",
              "accuracy"}


def _run(tmp_path, *extra):
    out = tmp_path / "bench.json"
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "benchmarks", "--benchmark-only", "--grid", "smoke", "-q",
         "-p", "no:cacheprovider", "--benchmark-max-time=0.005", "--benchmark-min-rounds=3",
         f"--benchmark-json={out}", *extra],
        capture_output=True, text=True, cwd=ROOT, timeout=300,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return json.loads(out.read_text())


def _expected(names):
    return {f"test_gemm[{p.id}-{name}]" for name in names for p in get_grid("smoke", dtypes=["float32"])}


def _check(data, names):
    # benchmarks/ also holds gemmzoo.matmul's overhead benchmarks; these checks are the grid's
    benches = [b for b in data["benchmarks"] if b["name"].startswith("test_gemm[")]
    assert {b["name"] for b in benches} == _expected(names)
    for bench in benches:
        info = bench["extra_info"]
        assert EXTRA_INFO <= set(info), EXTRA_INFO - set(info)
        assert bench["group"] == f"{info['m']}x{info['n']}x{info['k']}-{info['dtype']}-{info['layout']}"
        assert info["tflops"] > 0 and 0 <= info["error_ratio"] <= 1
        median = bench["stats"]["median"]
        assert info["tflops"] == pytest.approx(2 * info["m"] * info["n"] * info["k"] / median / 1e12)
        assert info["libraries"]["numpy"] and info["accuracy"] == "componentwise"


def test_pytest_benchmarks_smoke_grid(tmp_path):
    names = [b.name for b in gemmzoo.backends()
             if b.device == "cpu" and "float32" in b.dtypes and b.unavailable_reason() is None]
    _check(_run(tmp_path), names)


def test_pytest_benchmarks_under_xdist_land_in_one_report(tmp_path):
    pytest.importorskip("xdist")
    _check(_run(tmp_path, "-n", "2", "--backend", "numpy"), ["numpy"])
