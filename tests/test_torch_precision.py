"""The torch backend's precision switches: held per dtype for the launch only, safe across threads.

On the CPU the switches under ``torch.backends.cuda.matmul`` can be read and written but do not
change a product, so these tests put a spy in place of ``torch.mm`` that notes the switches
each launch saw. The GPU test runs real products of three dtypes from several threads.
"""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

import gemmzoo
from gemmzoo.conformance.bounds import error_bound
from gemmzoo.tuning import state

torch = pytest.importorskip("torch")

from gemmzoo_torch import precision  # noqa: E402 - needs torch, skipped above without it

SWITCHES = ("allow_tf32", "allow_fp16_reduced_precision_reduction", "allow_bf16_reduced_precision_reduction")


@pytest.fixture
def settings():
    """torch's switches, restored after the test."""
    matmul = torch.backends.cuda.matmul
    saved = {name: getattr(matmul, name) for name in SWITCHES}
    yield matmul
    for name, value in saved.items():
        setattr(matmul, name, value)


@pytest.fixture
def launches(monkeypatch, settings):
    """Replace torch.mm by a spy that records (dtype tag, switches seen) at every launch."""
    seen: list[tuple[str, dict[str, bool]]] = []

    def spy(a, b):
        tag = a.tag
        time.sleep(0.0005)  # give other threads the chance to flip switches mid-launch
        seen.append((tag, {name: bool(getattr(settings, name)) for name in SWITCHES}))
        return a

    monkeypatch.setattr(torch, "mm", spy)
    return seen


class Tagged:
    """Stands in for an operand: only the spy looks at it."""

    def __init__(self, tag: str) -> None:
        self.tag = tag
        self.data = self  # TF32Array-like for the tf32 launcher


def test_each_dtype_launches_with_its_switches_and_the_callers_come_back(settings, launches):
    settings.allow_tf32 = True
    settings.allow_fp16_reduced_precision_reduction = True
    settings.allow_bf16_reduced_precision_reduction = True
    for dtype in ("float32", "tf32", "float16", "bfloat16", "float64"):
        precision.runner(dtype)(Tagged(dtype), Tagged(dtype))
    seen = dict(launches)
    assert seen["float32"]["allow_tf32"] is False
    assert seen["tf32"]["allow_tf32"] is True
    assert seen["float16"]["allow_fp16_reduced_precision_reduction"] is False
    assert seen["bfloat16"]["allow_bf16_reduced_precision_reduction"] is False
    assert seen["float64"] == {name: True for name in SWITCHES}  # float64 touches nothing
    assert all(getattr(settings, name) is True for name in SWITCHES)  # the caller's values are back


def test_threads_of_different_dtypes_never_see_each_others_switches(settings, launches):
    settings.allow_tf32 = False
    settings.allow_fp16_reduced_precision_reduction = True
    wanted = {"float32": ("allow_tf32", False), "tf32": ("allow_tf32", True),
              "float16": ("allow_fp16_reduced_precision_reduction", False)}
    runs = {dtype: precision.runner(dtype) for dtype in wanted}
    errors: list[BaseException] = []

    def work(dtype: str) -> None:
        try:
            for _ in range(40):
                runs[dtype](Tagged(dtype), Tagged(dtype))
        except BaseException as error:  # reported below, not lost in the thread
            errors.append(error)

    threads = [threading.Thread(target=work, args=(dtype,)) for dtype in wanted for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert len(launches) == 40 * len(threads)
    for tag, seen in launches:
        name, value = wanted[tag]
        assert seen[name] is value, (tag, seen)
    assert settings.allow_tf32 is False and settings.allow_fp16_reduced_precision_reduction is True


@pytest.mark.gpu
def test_concurrent_products_of_three_dtypes_on_the_gpu(tmp_path, monkeypatch):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    monkeypatch.setenv("GEMMZOO_CACHE_DIR", str(tmp_path))
    state.reset()
    rng = np.random.default_rng(11)
    host = {d: (rng.standard_normal((96, 512)), rng.standard_normal((512, 80))) for d in ("a", "b", "c")}
    cases = {
        "float32": lambda a, b: (torch.tensor(a, dtype=torch.float32, device="cuda"),
                                 torch.tensor(b, dtype=torch.float32, device="cuda")),
        "tf32": lambda a, b: (gemmzoo.TF32Array(torch.tensor(a, dtype=torch.float32, device="cuda")),
                              gemmzoo.TF32Array(torch.tensor(b, dtype=torch.float32, device="cuda"))),
        "float16": lambda a, b: (torch.tensor(a, dtype=torch.float16, device="cuda"),
                                 torch.tensor(b, dtype=torch.float16, device="cuda")),
    }
    errors: list[str] = []

    def work(dtype: str, a_host: np.ndarray, b_host: np.ndarray) -> None:
        a, b = cases[dtype](a_host, b_host)
        data_a, data_b = (a.data, b.data) if dtype == "tf32" else (a, b)
        a64, b64 = data_a.double().cpu().numpy(), data_b.double().cpu().numpy()
        ref = a64 @ b64
        bound = error_bound(dtype, a64.shape[1], ref, np.abs(a64) @ np.abs(b64))
        for _ in range(50):
            c = gemmzoo.matmul(a, b, "torch")
            c = (c.data if dtype == "tf32" else c).double().cpu().numpy()
            if not np.all(np.abs(c - ref) <= bound):
                errors.append(f"{dtype}: {float(np.max(np.abs(c - ref) / bound)):.3g}x the bound")
                return

    threads = [threading.Thread(target=work, args=(dtype, *host[key]))
               for key, dtype in zip(host, cases, strict=True)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
