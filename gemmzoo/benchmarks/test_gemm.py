"""One pytest-benchmark per backend x grid point (parametrized by gemmzoo's pytest plugin)."""

from __future__ import annotations

from typing import Any

import gemmzoo
from gemmzoo.pytest.bench import RoundBudget, point_from_id, run_benchmark

__all__ = ["test_gemm"]


def test_gemm(benchmark: Any, gemm_backend: str, gemm_point: str, request: Any) -> None:
    """Check one backend on one grid point against the float64 reference, then time it, in
    rounds sized by ``--benchmark-max-time`` and ``--benchmark-min-rounds``."""
    backend = gemmzoo.get_backend(gemm_backend)
    point = point_from_id(gemm_point)
    info = run_benchmark(benchmark, backend, point, budget=RoundBudget.from_config(request.config))
    assert info["error_ratio"] <= 1.0
