"""Triton configs that need more shared memory than the device gives a block are never launched:
tf32 at 4544^3 on an H100 once raised OutOfResources (required 262168, limit 232448)."""

from __future__ import annotations

import os
from types import SimpleNamespace

import pytest

os.environ.setdefault("TRITON_INTERPRET", "1")
torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from gemmzoo_triton.core import autotune, hopper  # noqa: E402
from gemmzoo_triton.grouped.tma_kernel import HOPPER_CONFIGS  # noqa: E402

H100_LIMIT = 232_448


def _named(size: int, dtype: torch.dtype, descriptor: bool) -> dict[str, object]:
    a = torch.empty(1, dtype=dtype)
    first = SimpleNamespace(base=a) if descriptor else a
    return {"a": first, "M": size, "N": size, "K": size}


def test_the_tf32_tma_configs_that_overflow_an_h100_are_dropped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hopper, "shared_memory_limit", lambda device: H100_LIMIT)
    kept = autotune.prune_configs(HOPPER_CONFIGS, _named(4544, torch.float32, descriptor=True))
    assert kept
    assert all(autotune.shared_memory_need(c, 4, True) <= H100_LIMIT for c in kept)
    shapes = {(c.kwargs["BLOCK_SIZE_M"], c.kwargs["BLOCK_SIZE_N"], c.kwargs["BLOCK_SIZE_K"], c.num_stages)
              for c in kept}
    assert (128, 128, 64, 3) not in shapes  # 196,608 B of stages + a 65,536 B C tile: over the limit
    assert (128, 128, 32, 4) in shapes  # the tf32 configs that fit stay
    quick = autotune.quick_prune(HOPPER_CONFIGS, _named(4544, torch.float32, descriptor=True))
    assert all(autotune.shared_memory_need(c, 4, True) <= H100_LIMIT for c in quick)


def test_sixteen_bit_configs_that_fit_are_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hopper, "shared_memory_limit", lambda device: H100_LIMIT)
    kept = autotune.prune_configs(HOPPER_CONFIGS, _named(4096, torch.float16, descriptor=True))
    shapes = {(c.kwargs["BLOCK_SIZE_M"], c.kwargs["BLOCK_SIZE_N"], c.kwargs["BLOCK_SIZE_K"], c.num_stages)
              for c in kept}
    assert (128, 256, 64, 3) in shapes and (128, 256, 64, 4) not in shapes  # 213 KiB fits, 257 KiB not
    assert all(autotune.shared_memory_need(c, 2, True) <= H100_LIMIT for c in kept)


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["triton-grouped", "triton-grouped-tma"])
@pytest.mark.parametrize("dtype", ["tf32", "float16", "bfloat16", "float32"])
def test_the_largest_problems_launch_on_this_gpu(name: str, dtype: str) -> None:
    """On a GPU: 4544^3 (tf32 there raised OutOfResources: required 262168, limit 232448), every
    config the pruning keeps launched by a full autotune, and the result right (Freivalds)."""
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    import numpy as np

    import gemmzoo

    backend = gemmzoo.get_backend(name)
    if dtype not in backend.dtypes:
        pytest.skip(f"{name} does not compute {dtype}")
    rng = np.random.default_rng(0)
    a_host, b_host = rng.standard_normal((4544, 4544)), rng.standard_normal((4544, 4544))
    a, b = backend.from_numpy(a_host, dtype), backend.from_numpy(b_host, dtype)
    c = backend.to_numpy(backend.matmul(a, b)).astype(np.float64)
    backend.synchronize()
    x = rng.standard_normal(4544)
    a64, b64 = backend.to_numpy(a).astype(np.float64), backend.to_numpy(b).astype(np.float64)
    scale = np.abs(a64) @ (np.abs(b64) @ np.abs(x))
    assert np.all(np.abs(c @ x - a64 @ (b64 @ x)) <= 0.05 * scale)
