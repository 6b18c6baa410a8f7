"""One pytest-benchmark per backend x grid point (parametrized by gemmzoo's pytest plugin)."""

from __future__ import annotations

from typing import Any

import gemmzoo
from gemmzoo.pytest.bench import point_from_id, run_benchmark

__all__ = ["test_gemm"]


def test_gemm(benchmark: Any, gemm_backend: str, gemm_point: str) -> None:
    """Check one backend on one grid point against the float64 reference, then time it."""
    backend = gemmzoo.get_backend(gemm_backend)
    point = point_from_id(gemm_point)
    info = run_benchmark(benchmark, backend, point)
    assert info["error_ratio"] <= 1.0
