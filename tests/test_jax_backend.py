"""The bundled ``jax`` backend (XLA on the CPU) and ``jax-cuda`` (XLA on a GPU, marked ``gpu``)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from backends_here import available

import gemmzoo
from gemmzoo.conformance import check_backend

pytest.importorskip("jax")


def test_building_the_backends_does_not_import_jax():
    code = ("import sys, gemmzoo; names = [b.name for b in gemmzoo.backends()]; "
            "assert 'jax' in names and 'jax-cuda' in names, names; "
            "assert 'jax' not in sys.modules, 'jax was imported'")
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "float64"])
def test_jax_conforms_on_the_cpu(dtype):
    report = check_backend(available("jax"), dtypes=[dtype])
    assert report.passed, [(r.check, r.detail) for r in report.failures]


def test_float64_leaves_the_global_x64_switch_as_it_was():
    import jax

    backend = available("jax")
    before = jax.config.jax_enable_x64
    x = backend.from_numpy(np.random.default_rng(1).standard_normal((5, 6)), "float64")
    c = backend.prepare(x, x.T)(x, x.T)
    backend.synchronize()
    assert str(c.dtype) == "float64"
    assert jax.config.jax_enable_x64 == before


def test_a_plan_never_compiles_and_matches_the_float64_product():
    import jax

    backend = available("jax")
    rng = np.random.default_rng(2)
    compiles: list[str] = []

    def listen(event: str, *args, **kwargs) -> None:
        if "compile" in event:
            compiles.append(event)

    jax.monitoring.register_event_duration_secs_listener(listen)
    try:
        shape_a, shape_b = (23, 31), (31, 17)
        run = backend.prepare(backend.from_numpy(rng.standard_normal(shape_a), "float32"),
                              backend.from_numpy(rng.standard_normal(shape_b), "float32"))
        assert compiles, "prepare compiled nothing"
        compiled_in_prepare = len(compiles)
        for _ in range(3):
            a_host, b_host = rng.standard_normal(shape_a), rng.standard_normal(shape_b)
            a, b = backend.from_numpy(a_host, "float32"), backend.from_numpy(b_host, "float32")
            c = run(a, b)
            backend.synchronize()
            assert c.is_ready()
            f32 = [x.astype(np.float32).astype(np.float64) for x in (a_host, b_host)]
            reference = f32[0] @ f32[1]
            np.testing.assert_allclose(backend.to_numpy(c), reference, rtol=1e-5, atol=1e-5)
        assert len(compiles) == compiled_in_prepare, compiles[compiled_in_prepare:]
    finally:
        jax.monitoring.clear_event_listeners()


def test_gemmzoo_matmul_takes_numpy_arrays_through_jax():
    rng = np.random.default_rng(4)
    a, b = rng.standard_normal((19, 40)).astype(np.float32), rng.standard_normal((40, 9)).astype(np.float32)
    c = gemmzoo.matmul(a, b, backend="jax")
    assert isinstance(c, np.ndarray) and c.dtype == np.float32
    np.testing.assert_allclose(c, a.astype(np.float64) @ b.astype(np.float64), rtol=1e-5, atol=1e-5)


def test_jax_cuda_is_registered_on_the_cuda_device_with_tf32():
    backend = gemmzoo.get_backend("jax-cuda")
    assert backend.device == "cuda" and "tf32" in backend.dtypes


@pytest.mark.gpu
def test_jax_cuda_conforms_on_the_gpu():
    report = check_backend(available("jax-cuda"))
    assert report.passed, [(r.check, r.detail) for r in report.failures]


@pytest.mark.gpu
def test_jax_cuda_float32_is_ieee_and_tf32_is_tf32():
    backend = available("jax-cuda")
    rng = np.random.default_rng(3)
    a_host, b_host = rng.standard_normal((256, 4096)), rng.standard_normal((4096, 256))
    reference = a_host.astype(np.float32).astype(np.float64) @ b_host.astype(np.float32).astype(np.float64)

    def error(dtype: str) -> float:
        c = backend.matmul(backend.from_numpy(a_host, dtype), backend.from_numpy(b_host, dtype))
        return float(np.abs(backend.to_numpy(c) - reference).max())

    ieee, tf32 = error("float32"), error("tf32")
    assert ieee < 1e-3
    assert tf32 > 10 * ieee
