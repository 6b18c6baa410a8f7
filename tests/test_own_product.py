"""With nothing measured, ``gemmzoo.matmul`` is the caller's library's own product under the
caller's precision switches, where the shipped prior routes a problem to that library's plain
backend; the checked backends keep computing what their suites checked."""

from __future__ import annotations

import numpy as np
import pytest

import gemmzoo
from gemmzoo.dispatch import matmul as dispatch
from gemmzoo.tuning.select import LIBRARY, explain
from gemmzoo.tuning.tune import conformance_verdict

pytestmark = pytest.mark.usefixtures("empty_cache")


def _normal(rng: np.random.Generator, *shape: int) -> np.ndarray:
    return rng.standard_normal(shape)


def test_numpy_callers_get_numpy_matmul_itself_for_its_blas_dtypes(capsys):
    rng = np.random.default_rng(11)
    for dtype in (np.float32, np.float64):
        a, b = _normal(rng, 37, 53).astype(dtype), _normal(rng, 53, 29).astype(dtype)
        assert dispatch.choice_for(a, b).source == LIBRARY
        assert dispatch.make_plan(a, b) is np.matmul
        c = gemmzoo.matmul(a, b)
        assert c.dtype == dtype and np.array_equal(c, np.matmul(a, b))
    store = gemmzoo.session.current().store()
    numpy_backend = gemmzoo.get_backend("numpy")
    assert conformance_verdict(store, numpy_backend, "float32", run=False) is None  # no suite ran
    assert "conformance suite" not in capsys.readouterr().err


def test_numpy_float16_stays_on_the_checked_backend():
    """NumPy's own float16 product skips BLAS: the numpy backend's float32 detour (checked) serves it."""
    rng = np.random.default_rng(12)
    a, b = _normal(rng, 9, 70).astype(np.float16), _normal(rng, 70, 5).astype(np.float16)
    choice = dispatch.choice_for(a, b)
    assert choice.source != LIBRARY and choice.backend.name == "numpy"
    c = gemmzoo.matmul(a, b)
    expected = (a.astype(np.float32) @ b.astype(np.float32)).astype(np.float16)
    assert np.array_equal(c, expected)


def test_a_measured_answer_replaces_the_library_route(monkeypatch):
    monkeypatch.setenv("GEMMZOO_BACKENDS", "numpy")
    from sessions import restart

    restart()
    rng = np.random.default_rng(13)
    a, b = _normal(rng, 48, 32).astype(np.float32), _normal(rng, 32, 40).astype(np.float32)
    assert dispatch.choice_for(a, b).source == LIBRARY
    gemmzoo.best_backend((48, 40, 32), "float32", "cpu", measure=True)
    restart()  # a new process: the stored row answers
    choice = dispatch.choice_for(a, b)
    assert choice.source == "database" and choice.backend.name == "numpy"
    # the measured winner's product is the caller's library's own: the plan is that call itself
    assert dispatch.make_plan(a, b) is np.matmul
    assert np.array_equal(gemmzoo.matmul(a, b), np.matmul(a, b))


def test_a_subclass_with_its_own_product_does_not_claim_the_librarys():
    from gemmzoo_numpy.backend import NumpyBackend

    class Own(NumpyBackend):
        name = "own"

        def matmul(self, a, b):
            return np.matmul(a, b)

    assert gemmzoo.get_backend("numpy").library_product == "numpy"
    assert Own().library_product is None


torch = pytest.importorskip("torch")


def _tensors(seed: int, m: int, n: int, k: int, dtype=torch.float32):
    generator = torch.Generator().manual_seed(seed)
    a = torch.randn(m, k, generator=generator).to(dtype)
    b = torch.randn(k, n, generator=generator).to(dtype)
    return a, b


@pytest.fixture
def fp32_precision():
    """torch's CPU float32 matmul precision (oneDNN), restored after the test."""
    saved = torch.get_float32_matmul_precision()
    yield
    torch.set_float32_matmul_precision(saved)


def test_torch_callers_get_torch_mm_under_their_own_switches(fp32_precision, capsys):
    """The plan is torch.mm itself, so it reads the caller's switches at every call, as torch.matmul
    does: a product planned at "highest" and called at "medium" (bfloat16 passes where oneDNN has
    them) gives torch's bits at each setting."""
    a, b = _tensors(1, 64, 48, 300)
    choice = dispatch.choice_for(a, b)
    assert choice.source == LIBRARY and choice.backend.name == "torch-cpu"
    assert dispatch.make_plan(a, b) is torch.mm
    torch.set_float32_matmul_precision("highest")
    exact = gemmzoo.matmul(a, b)
    assert torch.equal(exact, torch.mm(a, b))
    for setting in ("medium", "high", "highest"):
        torch.set_float32_matmul_precision(setting)
        assert torch.equal(gemmzoo.matmul(a, b), torch.matmul(a, b)), setting
    store = gemmzoo.session.current().store()
    assert conformance_verdict(store, gemmzoo.get_backend("torch-cpu"), "float32", run=False) is None
    assert "conformance suite" not in capsys.readouterr().err


@pytest.mark.parametrize("dtype", ["float64", "bfloat16", "float16"])
def test_torch_callers_get_torchs_bits_in_every_dtype(dtype):
    a, b = _tensors(2, 33, 17, 129, getattr(torch, dtype))
    assert dispatch.choice_for(a, b).source == LIBRARY
    c = gemmzoo.matmul(a, b)
    assert c.dtype == a.dtype and torch.equal(c, torch.matmul(a, b))


def test_gradients_through_the_library_route_are_torchs():
    a, b = _tensors(3, 12, 10, 40, torch.float64)
    a.requires_grad_(True)
    b.requires_grad_(True)
    gemmzoo.matmul(a, b).pow(2).sum().backward()
    x, y = a.detach().clone().requires_grad_(True), b.detach().clone().requires_grad_(True)
    torch.matmul(x, y).pow(2).sum().backward()
    assert torch.equal(a.grad, x.grad) and torch.equal(b.grad, y.grad)


def test_a_mismatched_b_is_still_refused_with_the_shapes():
    a, _ = _tensors(4, 8, 8, 8)
    gemmzoo.matmul(a, a)
    said = r"A \(8, 8\), B \(8, 8\): A is torch.float32 and B is torch.float64"
    with pytest.raises(gemmzoo.GemmInputError, match=said):
        gemmzoo.matmul(a, a.double())


def test_cuda_problems_route_to_torchs_own_product_except_the_padded_ones():
    """Decided without a GPU: the prior's routes and the backends' declarations alone."""
    for shape, dtype in (((4096, 4096, 4096), "float16"), ((64, 64, 65536), "float16"),
                         ((2048, 2048, 2048), "float32"), ((16, 4096, 4096), "bfloat16")):
        choice = explain(shape, dtype, "cuda", measure=False, library="torch")
        assert (choice.source, choice.backend.name) == (LIBRARY, "torch"), (shape, dtype)
    assert gemmzoo.get_backend("torch").library_product == "torch"
    assert gemmzoo.get_backend("torch-padded").library_product is None  # its copies are its own
    from gemmzoo.arrays.libraries import has_own_product

    assert not has_own_product("torch", "tf32") and not has_own_product("torch", "float8_e4m3fn")


@pytest.mark.gpu
@pytest.mark.parametrize(("shape", "dtype"), [
    ((64, 64, 65536), "float16"), ((32, 4608, 3584), "float16"), ((16, 4096, 4096), "bfloat16"),
    ((1000, 1000, 1000), "float32"),
])
def test_on_cuda_the_untuned_call_is_torchs_and_the_torch_backend_keeps_fp32_reduction(shape, dtype):
    m, n, k = shape
    generator = torch.Generator(device="cuda").manual_seed(6)
    a = torch.randn(m, k, device="cuda", generator=generator).to(getattr(torch, dtype))
    b = torch.randn(k, n, device="cuda", generator=generator).to(getattr(torch, dtype))
    settings = torch.backends.cuda.matmul
    switch = {"float16": "allow_fp16_reduced_precision_reduction",
              "bfloat16": "allow_bf16_reduced_precision_reduction", "float32": "allow_tf32"}[dtype]
    saved = getattr(settings, switch)
    try:
        for allowed in (True, False):
            setattr(settings, switch, allowed)
            assert dispatch.choice_for(a, b).source == LIBRARY
            assert torch.equal(gemmzoo.matmul(a, b), torch.matmul(a, b)), allowed
            assert getattr(settings, switch) is allowed
        setattr(settings, switch, False)
        checked = torch.matmul(a, b)  # fp32 reduction, IEEE float32: what the torch backend computes
        setattr(settings, switch, True)
        assert torch.equal(gemmzoo.matmul(a, b, "torch"), checked)
        assert getattr(settings, switch) is True
    finally:
        setattr(settings, switch, saved)


def _recorded_here() -> set[tuple[tuple[int, int, int], str]]:
    store = gemmzoo.session.current().store()
    from gemmzoo.tuning.fingerprint import device_fingerprint

    return {((p.m, p.n, p.k), p.layout) for p, _count in store.recorded(device_fingerprint("cpu"))}


def test_differentiable_library_products_are_torch_mm_under_torchs_own_autograd():
    """With the forward and both backward products the library's own, the plan is torch.mm on the
    operands: torch's autograd runs its own backward (no Python layer in the step), the gradients
    are torch's bits, and all three products are recorded for `gemmzoo tune --recorded`."""
    from gemmzoo.dispatch.autograd import backward_problems

    generator = torch.Generator().manual_seed(5)
    x = torch.randn(37, 53, generator=generator).requires_grad_(True)
    w = torch.randn(29, 53, generator=generator).requires_grad_(True)  # stored out x in, used as w.t()
    assert dispatch.make_plan(x, w.t()) is torch.mm
    c = gemmzoo.matmul(x, w.t())
    assert type(c.grad_fn).__name__ == "MmBackward0"
    upstream = torch.randn(37, 29, generator=generator)
    c.backward(upstream)
    y, v = x.detach().clone().requires_grad_(True), w.detach().clone().requires_grad_(True)
    torch.matmul(y, v.t()).backward(upstream)
    assert torch.equal(c, torch.matmul(y, v.t()))
    assert torch.equal(x.grad, y.grad) and torch.equal(w.grad, v.grad)
    expected = {((37, 29, 53), "NT"), *backward_problems(x, w.t())}
    assert len(expected) == 3 and expected <= _recorded_here()


@pytest.mark.parametrize("layout", ["NN", "TN", "NT", "TT"])
def test_backward_problems_name_the_products_the_autograd_function_computes(layout, monkeypatch):
    from gemmzoo.dispatch.autograd import backward_problems

    m, n, k = 11, 7, 13
    generator = torch.Generator().manual_seed(8)
    def operand(rows, cols, letter):
        if letter == "T":
            return torch.randn(cols, rows, generator=generator).T
        return torch.randn(rows, cols, generator=generator)

    a, b = operand(m, k, layout[0]), operand(k, n, layout[1])
    a, b = a.requires_grad_(True), b.requires_grad_(True)
    assert dispatch._layout(a, b, "torch") == layout
    c = gemmzoo.matmul(a, b, "torch-cpu")  # named: the autograd function's own backward products
    seen = []
    original = dispatch.matmul

    def counting(x, y, *args, **kwargs):
        seen.append(((x.shape[0], y.shape[1], x.shape[1]), dispatch._layout(x, y, "torch")))
        return original(x, y, *args, **kwargs)

    monkeypatch.setattr(dispatch, "matmul", counting)
    c.backward(torch.randn(m, n, generator=generator))
    assert seen == backward_problems(a, b)


def test_a_backward_product_off_the_library_keeps_gemmzoos_autograd_function():
    """The prior sends one backward product (dX of x·wᵀ) to a torch backend whose product is its
    own: the forward plan is then gemmzoo's autograd function, whose backward computes that
    product on that backend and the others on torch's own product."""
    from sessions import scoped
    from tuning_fakes import registry_with

    from gemmzoo.dispatch.autograd import backward_problems
    from gemmzoo.tuning.prior import shipped
    from gemmzoo_torch.backend import TorchCpuBackend

    calls = []

    class Twin(TorchCpuBackend):
        name = "torch-cpu-twin"

        def matmul(self, a, b):
            calls.append((tuple(a.shape), tuple(b.shape)))
            return super().matmul(a, b)

    generator = torch.Generator().manual_seed(9)
    x = torch.randn(21, 34, generator=generator).requires_grad_(True)
    w = torch.randn(15, 34, generator=generator).requires_grad_(True)
    d_x = backward_problems(x, w.t())[0]

    def prior(problem):
        return "torch-cpu-twin" if (problem.shape, problem.layout) == d_x else shipped(problem)

    upstream = torch.randn(21, 15, generator=generator)
    with scoped(prior=prior, registry=registry_with(TorchCpuBackend(), Twin())):
        c = gemmzoo.matmul(x, w.t())
        assert type(c.grad_fn).__name__ != "MmBackward0"
        calls.clear()  # the twin's suite ran while the forward was planned
        c.backward(upstream)
    assert calls == [((21, 15), (15, 34))]  # dX = dC·W on the twin, nothing else
    y, v = x.detach().clone().requires_grad_(True), w.detach().clone().requires_grad_(True)
    torch.matmul(y, v.t()).backward(upstream)
    assert torch.equal(c, torch.matmul(y, v.t()))
    assert torch.equal(x.grad, y.grad) and torch.equal(w.grad, v.grad)


def test_batched_products_with_nothing_measured_are_the_librarys_own_matmul():
    """3-D operands, no backend named, nothing stored: the plan is torch.matmul or numpy.matmul
    itself (broadcasting, the caller's switches and torch's autograd its own), and no class
    cases run for it."""
    generator = torch.Generator().manual_seed(10)
    x = torch.randn(3, 1, 17, 23, generator=generator)
    y = torch.randn(4, 23, 9, generator=generator)
    assert dispatch.make_plan(x, y) is torch.matmul
    assert torch.equal(gemmzoo.matmul(x, y), torch.matmul(x, y))
    x.requires_grad_(True)
    y.requires_grad_(True)
    upstream = torch.randn(3, 4, 17, 9, generator=generator)
    gemmzoo.matmul(x, y).backward(upstream)
    u, v = x.detach().clone().requires_grad_(True), y.detach().clone().requires_grad_(True)
    torch.matmul(u, v).backward(upstream)
    assert torch.equal(x.grad, u.grad) and torch.equal(y.grad, v.grad)
    rng = np.random.default_rng(14)
    a, b = _normal(rng, 5, 6, 7).astype(np.float32), _normal(rng, 7, 3).astype(np.float32)
    assert dispatch.make_plan(a, b) is np.matmul
    assert np.array_equal(gemmzoo.matmul(a, b), np.matmul(a, b))
    store = gemmzoo.session.current().store()
    for name in ("torch-cpu", "numpy"):
        verdict = conformance_verdict(store, gemmzoo.get_backend(name), "float32", run=False, cls="batched")
        assert verdict is None
