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

torch = pytest.importorskip("torch")

from sessions import restart  # noqa: E402

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


def test_a_caller_who_allows_fp16_accumulation_gets_it_back_after_a_float16_launch(monkeypatch, settings):
    """float16 holds two switches: where the caller changed the second (fp16 accumulation, off
    by default), both are set for the launch and both come back."""
    if not hasattr(settings, "allow_fp16_accumulation"):
        pytest.skip("this torch has no fp16 accumulation switch")
    seen = []

    def spy(a, b):
        seen.append((settings.allow_fp16_accumulation, settings.allow_fp16_reduced_precision_reduction))
        return a

    monkeypatch.setattr(torch, "mm", spy)
    saved = settings.allow_fp16_accumulation
    try:
        settings.allow_fp16_reduced_precision_reduction = True
        run = precision.runner("float16")
        for accumulation in (True, False, True):
            settings.allow_fp16_accumulation = accumulation
            run(Tagged("float16"), Tagged("float16"))
            assert seen[-1] == (False, False)
            assert settings.allow_fp16_accumulation is accumulation
            assert settings.allow_fp16_reduced_precision_reduction is True
    finally:
        settings.allow_fp16_accumulation = saved


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
    restart()
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


def test_a_switch_left_alone_is_never_written_and_the_others_still_are(settings, launches):
    settings.allow_fp16_reduced_precision_reduction = True
    settings.allow_bf16_reduced_precision_reduction = True
    precision.runner("float16", without=("allow_fp16_reduced_precision_reduction",))(
        Tagged("float16"), Tagged("float16"))
    settings.allow_tf32 = True
    precision.runner("float32", without=("allow_fp16_reduced_precision_reduction",))(
        Tagged("float32"), Tagged("float32"))
    seen = dict(launches)
    assert seen["float16"]["allow_fp16_reduced_precision_reduction"] is True  # the caller's, untouched
    assert seen["float32"]["allow_tf32"] is False  # a switch not named is still held


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("sensitive", [True, False])
def test_the_probe_says_whether_the_switch_changes_the_product(monkeypatch, settings, dtype, sensitive):
    attribute = precision.REDUCED_PRECISION[dtype]
    setattr(settings, attribute, True)
    real_mm = torch.mm
    seen: list[bool] = []

    def product(x, y):  # a BLAS whose split-K kernel adds in 16 bits when the switch allows it
        allowed = bool(getattr(settings, attribute))
        seen.append(allowed)
        c = real_mm(x.float(), y.float())
        return (c + 1.0 if sensitive and allowed else c).to(x.dtype)

    monkeypatch.setattr(torch, "mm", product)
    a = torch.randn(7, 300, dtype=getattr(torch, dtype))
    b = torch.randn(11, 300, dtype=getattr(torch, dtype)).t()  # column-major B: strides are kept
    rng_before = torch.random.get_rng_state()
    assert precision.reduced_precision_matters(dtype, a, b) is sensitive
    assert set(seen) == {False, True}  # launched both ways
    assert bool(getattr(settings, attribute)) is True  # the caller's value is back
    assert torch.equal(torch.random.get_rng_state(), rng_before)  # its own generator


def test_the_probe_keeps_strides_and_skips_what_it_cannot_probe():
    x = torch.randn(41, 30)[1:].t()[::2]  # 15 x 40, strides (2, 30), 120 bytes into its storage
    y = precision._random_like(x, torch.Generator().manual_seed(3))
    assert y.shape == x.shape and y.stride() == x.stride() and y.dtype == x.dtype
    assert y.data_ptr() % 64 == x.data_ptr() % 64  # torch aligns CPU storage to 64 bytes, CUDA's to more
    assert precision._extent(x) == 1 + 14 * 2 + 39 * 30
    half = torch.randn(8, 8, dtype=torch.float16)
    assert not precision._probeable(half, half)  # CPU tensors: cuBLAS's switches do not apply
    assert precision.needless_switches("float16", half, half) == ()
    assert precision.needless_switches("float32", half, half) == ()


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_the_torch_plan_gives_the_bits_of_the_switched_launch(dtype):
    """Where the plan leaves the reduced-precision switch alone, its product is the one launched
    with the switch held; on a small product it leaves it alone (cuBLAS splits no K there)."""
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    backend = gemmzoo.get_backend("torch")
    full = precision.runner(dtype)
    torch_dtype = getattr(torch, dtype)
    generator = torch.Generator(device="cuda").manual_seed(5)
    left_alone = {}
    for m, n, k, b_rows in ((128, 128, 128, True), (512, 512, 512, True), (300, 7, 9000, False),
                            (2, 4096, 11008, False), (16, 16, 65536, True)):
        a = torch.randn(m, k, generator=generator, device="cuda", dtype=torch_dtype)
        b = (torch.randn(k, n, generator=generator, device="cuda", dtype=torch_dtype) if b_rows
             else torch.randn(n, k, generator=generator, device="cuda", dtype=torch_dtype).t())
        plan = backend.prepare(a, b)
        left_alone[m, n, k] = precision.needless_switches(dtype, a, b) != ()
        assert torch.equal(plan(a, b), full(a, b)), (m, n, k)
    assert left_alone[128, 128, 128] and left_alone[512, 512, 512]


@pytest.mark.gpu
def test_a_problem_first_met_inside_a_cuda_graph_capture_is_planned_without_a_probe():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    backend = gemmzoo.get_backend("torch")
    a = torch.randn(96, 80, device="cuda", dtype=torch.float16)
    b = torch.randn(80, 72, device="cuda", dtype=torch.float16)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(side):
        torch.mm(a, b)  # torch's own warm-up before a capture
        with torch.cuda.graph(graph):
            plan = backend.prepare(a, b)
            c = plan(a, b)
    torch.cuda.current_stream().wait_stream(side)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(c, precision.runner("float16")(a, b))
