"""What gemmzoo.matmul costs on top of the backend it calls, once the choice is cached.

Run: ``python -m pytest benchmarks/test_matmul_overhead.py`` (pytest-benchmark). Each group
compares ``gemmzoo.matmul`` on the caller's arrays with a direct ``backend.matmul`` on the
backend's own arrays, for a tiny 8x8x8 float32 product where the GEMM itself costs little; the
difference of the medians is the overhead (goal: at most 10 us).
"""

from __future__ import annotations

import numpy as np
import pytest

import gemmzoo
from gemmzoo.tuning import state

SHAPE = (8, 8, 8)


@pytest.fixture(scope="module", autouse=True)
def tuned_cache(tmp_path_factory):
    patch = pytest.MonkeyPatch()
    patch.setenv("GEMMZOO_CACHE_DIR", str(tmp_path_factory.mktemp("gemmzoo-cache")))
    state.reset()
    gemmzoo.best_backend(SHAPE, "float32", "cpu")  # measured once here, outside every timing
    yield
    state.reset()
    patch.undo()


def operands(kind: str):
    rng = np.random.default_rng(0)
    a = rng.standard_normal(SHAPE[::2]).astype(np.float32)
    b = rng.standard_normal(SHAPE[:0:-1]).astype(np.float32)
    if kind == "torch":
        torch = pytest.importorskip("torch")
        return torch.from_numpy(a), torch.from_numpy(b)
    return a, b


@pytest.mark.parametrize("kind", ["numpy", "torch"])
def test_direct_chosen_backend(benchmark, kind):
    """The chosen backend on its own native arrays: the baseline."""
    benchmark.group = f"{kind} caller, best backend"
    chosen = gemmzoo.best_backend(SHAPE, "float32", "cpu")
    benchmark.extra_info["backend"] = chosen.name
    a, b = operands("numpy")
    native_a, native_b = chosen.from_numpy(a, "float32"), chosen.from_numpy(b, "float32")
    benchmark(chosen.matmul, native_a, native_b)


@pytest.mark.parametrize("kind", ["numpy", "torch"])
def test_gemmzoo_matmul_best(benchmark, kind):
    """gemmzoo.matmul choosing through best_backend (cached), on the caller's arrays."""
    benchmark.group = f"{kind} caller, best backend"
    benchmark.extra_info["backend"] = gemmzoo.best_backend(SHAPE, "float32", "cpu").name
    a, b = operands(kind)
    benchmark(gemmzoo.matmul, a, b)


@pytest.mark.parametrize(("kind", "backend"), [("numpy", "torch-cpu"), ("torch", "numpy")])
def test_direct_named_backend(benchmark, kind, backend):
    """A named backend of the other library, on its own arrays: the baseline."""
    benchmark.group = f"{kind} caller, {backend} backend (DLPack crossing)"
    chosen = gemmzoo.get_backend(backend)
    if chosen.unavailable_reason():
        pytest.skip(chosen.unavailable_reason())
    a, b = operands("numpy")
    benchmark(chosen.matmul, chosen.from_numpy(a, "float32"), chosen.from_numpy(b, "float32"))


@pytest.mark.parametrize(("kind", "backend"), [("numpy", "torch-cpu"), ("torch", "numpy")])
def test_gemmzoo_matmul_named(benchmark, kind, backend):
    """gemmzoo.matmul with that backend named, crossing libraries both ways without copies."""
    benchmark.group = f"{kind} caller, {backend} backend (DLPack crossing)"
    if gemmzoo.get_backend(backend).unavailable_reason():
        pytest.skip(gemmzoo.get_backend(backend).unavailable_reason())
    a, b = operands(kind)
    benchmark(gemmzoo.matmul, a, b, backend)


def test_best_backend_cached(benchmark):
    """A repeated best_backend question."""
    benchmark.group = "best_backend"
    benchmark(gemmzoo.best_backend, SHAPE, "float32", "cpu")
