"""One pytest-benchmark per backend x grid point (parametrized in conftest.py)."""

from __future__ import annotations

import gemmzoo
from gemmzoo.pytest_bench import point_from_id, run_benchmark


def test_gemm(benchmark, gemm_backend, gemm_point):
    backend = gemmzoo.get_backend(gemm_backend)
    point = point_from_id(gemm_point)
    info = run_benchmark(benchmark, backend, point)
    assert info["error_ratio"] <= 1.0
