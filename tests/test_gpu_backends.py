"""GPU-only behaviour of the bundled CUDA backends (marked ``gpu``: skipped without a GPU)."""

from __future__ import annotations

import numpy as np
import pytest

import gemmzoo

pytestmark = pytest.mark.gpu


def _available(name: str):
    backend = gemmzoo.get_backend(name)
    reason = backend.unavailable_reason()
    if reason:
        pytest.skip(reason)
    return backend


def test_torch_float32_is_ieee_even_when_the_caller_enabled_tf32():
    import torch

    backend = gemmzoo.get_backend("torch")
    rng = np.random.default_rng(3)
    a_host, b_host = rng.standard_normal((256, 4096)), rng.standard_normal((4096, 256))
    settings = torch.backends.cuda.matmul
    saved = settings.allow_tf32
    settings.allow_tf32 = True
    try:
        ieee = backend.to_numpy(
            backend.matmul(backend.from_numpy(a_host, "float32"), backend.from_numpy(b_host, "float32"))
        )
        tf32 = backend.to_numpy(
            backend.matmul(backend.from_numpy(a_host, "tf32"), backend.from_numpy(b_host, "tf32"))
        )
        assert settings.allow_tf32 is True  # the caller's switch is restored
    finally:
        settings.allow_tf32 = saved
    a32, b32 = a_host.astype(np.float32).astype(np.float64), b_host.astype(np.float32).astype(np.float64)
    reference = a32 @ b32
    ieee_error = np.abs(ieee - reference).max()
    tf32_error = np.abs(tf32 - reference).max()
    assert ieee_error < 1e-3  # fp32 accumulation of 4096 terms of size ~1
    assert tf32_error > 10 * ieee_error  # TF32 really was used for the tf32 mode


def test_tf32_mode_leaves_the_global_switch_off():
    import torch

    backend = gemmzoo.get_backend("torch")
    settings = torch.backends.cuda.matmul
    saved = settings.allow_tf32
    settings.allow_tf32 = False
    try:
        x = backend.from_numpy(np.random.default_rng(0).standard_normal((64, 64)), "tf32")
        backend.matmul(x, x)
        assert settings.allow_tf32 is False
    finally:
        settings.allow_tf32 = saved


def test_cupy_fp16_accumulates_in_fp32():
    backend = _available("cupy")
    rng = np.random.default_rng(5)
    a_host, b_host = rng.standard_normal((64, 8192)), rng.standard_normal((8192, 64))
    c = backend.to_numpy(
        backend.matmul(backend.from_numpy(a_host, "float16"), backend.from_numpy(b_host, "float16"))
    )
    a16 = a_host.astype(np.float16).astype(np.float64)
    b16 = b_host.astype(np.float16).astype(np.float64)
    reference = a16 @ b16
    # fp32 accumulation leaves only the final fp16 rounding: half an ulp of |C| ~ 90 is under 0.04
    assert np.abs(c - reference).max() <= np.abs(reference).max() * 2.0**-11 + 1e-3


def test_cupy_tf32_mode_uses_tf32_and_float32_stays_ieee():
    backend = _available("cupy")
    rng = np.random.default_rng(4)
    a_host, b_host = rng.standard_normal((256, 4096)), rng.standard_normal((4096, 256))
    results = {}
    for mode in ("float32", "tf32"):
        a, b = backend.from_numpy(a_host, mode), backend.from_numpy(b_host, mode)
        results[mode] = backend.to_numpy(backend.matmul(a, b))
    reference = a_host.astype(np.float32).astype(np.float64) @ b_host.astype(np.float32).astype(np.float64)
    ieee_error = np.abs(results["float32"] - reference).max()
    assert ieee_error < 1e-3
    assert np.abs(results["tf32"] - reference).max() > 10 * ieee_error
