"""gemmzoo.matmul under autograd: gradients of random problems checked element by element against
the conformance bound and against torch.matmul's, double backward, and the no-grad path."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from sessions import scoped  # noqa: E402

import gemmzoo  # noqa: E402
from gemmzoo.conformance.bounds import error_bound  # noqa: E402
from gemmzoo.errors import GemmInputError  # noqa: E402
from gemmzoo.tuning import state  # noqa: E402

pytestmark = pytest.mark.usefixtures("dispatch_route")


@pytest.fixture(autouse=True)
def fresh(tmp_path, monkeypatch):
    monkeypatch.setenv("GEMMZOO_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("GEMMZOO_BACKENDS", raising=False)
    with scoped():
        yield


def within_bound(got, x, y, dtype: str) -> np.ndarray:
    """Assert every element of ``got`` (a product of ``x`` and ``y``) is within the suite's bound of
    their float64 product; return the bound."""
    x64, y64 = (t.detach().double().numpy() for t in (x, y))
    ref = x64 @ y64
    bound = error_bound(dtype, x.shape[1], ref, np.abs(x64) @ np.abs(y64))
    value = got.detach().double().numpy()
    assert value.shape == ref.shape and np.all(np.isfinite(value))
    error = np.abs(value - ref)
    assert np.all(error <= bound), float(np.max(error / bound))
    return bound


def random(rows: int, cols: int, dtype, seed: int):
    return torch.from_numpy(np.random.default_rng(seed).standard_normal((rows, cols))).to(dtype)


def operand(rows: int, cols: int, dtype, seed: int, transposed: bool):
    """A leaf that requires grad, and the operand made of it: itself, or the transposed view of a
    (cols, rows) leaf (a column-major operand)."""
    if transposed:
        held = random(cols, rows, dtype, seed).requires_grad_()
        return held, held.T
    held = random(rows, cols, dtype, seed).requires_grad_()
    return held, held


def gradient(held, transposed: bool):
    return held.grad.T if transposed else held.grad


CASES = [(None, "float32"), ("torch-cpu", "float32"), ("numpy", "float32"),
         (None, "float16"), ("torch-cpu", "float16"), ("numpy", "float16"),
         (None, "bfloat16"), ("torch-cpu", "bfloat16"), (None, "float64"), ("numpy", "float64")]


@pytest.mark.parametrize(("backend", "dtype"), CASES)
@pytest.mark.parametrize("layout", ["NN", "TN", "NT"])
def test_gradients_match_torch_matmul_within_the_suite_bound(backend, dtype, layout):
    torch_dtype = getattr(torch, dtype)
    m, n, k = 23, 19, 37
    a_t, b_t = layout[0] == "T", layout[1] == "T"
    a_held, a = operand(m, k, torch_dtype, 1, a_t)
    b_held, b = operand(k, n, torch_dtype, 2, b_t)
    upstream = random(m, n, torch_dtype, 3)

    c = gemmzoo.matmul(a, b, backend)
    assert c.requires_grad and c.dtype == torch_dtype and c.grad_fn is not None
    within_bound(c, a, b, dtype)
    c.backward(upstream)

    x_held, x = operand(m, k, torch_dtype, 1, a_t)
    y_held, y = operand(k, n, torch_dtype, 2, b_t)
    torch.matmul(x, y).backward(upstream)

    checks = ((gradient(a_held, a_t), gradient(x_held, a_t), upstream, b.T),
              (gradient(b_held, b_t), gradient(y_held, b_t), a.T, upstream))
    for got, expected, left, right in checks:
        bound = within_bound(got, left, right, dtype)  # dA = dC·Bᵀ, dB = Aᵀ·dC, every element
        within_bound(expected, left, right, dtype)
        assert got.dtype == torch_dtype
        assert np.all(np.abs(got.double().numpy() - expected.double().numpy()) <= 2 * bound)


def test_only_the_gradients_required_are_computed(monkeypatch):
    a = random(6, 9, torch.float32, 4).requires_grad_()
    b = random(9, 5, torch.float32, 5)
    c = gemmzoo.matmul(a, b, "torch-cpu")
    products = []
    original = gemmzoo.dispatch.matmul.matmul

    def counting(x, y, *args, **kwargs):
        products.append((tuple(x.shape), tuple(y.shape)))
        return original(x, y, *args, **kwargs)

    monkeypatch.setattr(gemmzoo.dispatch.matmul, "matmul", counting)
    c.sum().backward()  # an expanded (stride 0) upstream gradient
    assert products == [((6, 5), (5, 9))]  # dA only: B does not require grad
    assert b.grad is None
    within_bound(a.grad, torch.ones(6, 5), b.T, "float32")


def test_the_gradient_of_a_column_major_operand_is_computed_in_its_layout_as_torch_does(monkeypatch):
    x = random(6, 9, torch.float32, 12).requires_grad_()
    w = random(5, 9, torch.float32, 13).requires_grad_()  # a weight stored out x in, used as w.t()
    products = []
    original = gemmzoo.dispatch.matmul.matmul

    def counting(a, b, *args, **kwargs):
        products.append((tuple(a.shape), a.is_contiguous(), tuple(b.shape), b.is_contiguous()))
        return original(a, b, *args, **kwargs)

    c = gemmzoo.matmul(x, w.t(), "torch-cpu")
    monkeypatch.setattr(gemmzoo.dispatch.matmul, "matmul", counting)
    upstream = random(6, 5, torch.float32, 14)
    c.backward(upstream)
    # dX = dC·W (NN) and dW = dCᵀ·X (TN), the latter W's own shape: no copy to W's strides
    assert products == [((6, 5), True, (5, 9), True), ((5, 6), False, (6, 9), True)]
    assert w.grad.is_contiguous() and x.grad.is_contiguous()
    within_bound(w.grad, upstream.T, x, "float32")
    within_bound(x.grad, upstream, w, "float32")
    y, v = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
    torch.matmul(y, v.t()).backward(upstream)
    assert w.grad.stride() == v.grad.stride() and x.grad.stride() == y.grad.stride()


def test_gradcheck_and_double_backward_in_float64():
    a = random(7, 5, torch.float64, 6).requires_grad_()
    b = random(5, 4, torch.float64, 7).requires_grad_()

    def product(x, y):
        return gemmzoo.matmul(x, y, "torch-cpu")

    assert torch.autograd.gradcheck(product, (a, b))
    assert torch.autograd.gradgradcheck(product, (a, b))

    # second derivatives against torch.matmul's
    weights = random(7, 4, torch.float64, 8)
    results = []
    for multiply in (product, torch.matmul):
        x, y = a.detach().clone().requires_grad_(), b.detach().clone().requires_grad_()
        (grad_x,) = torch.autograd.grad((multiply(x, y) * weights).sum(), x, create_graph=True)
        (grad_x * random(7, 5, torch.float64, 9)).sum().backward()
        results.append((grad_x.detach(), y.grad))
    torch.testing.assert_close(results[0][0], results[1][0], rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(results[0][1], results[1][1], rtol=1e-12, atol=1e-12)


def test_no_grad_gives_a_plain_result_and_the_plain_path_is_torch_mm_itself():
    a = random(8, 6, torch.float32, 10).requires_grad_()
    b = random(6, 3, torch.float32, 11)
    with torch.no_grad():
        c = gemmzoo.matmul(a, b, "torch-cpu")
    assert not c.requires_grad
    within_bound(c, a, b, "float32")
    with torch.inference_mode():
        assert not gemmzoo.matmul(a, b, "torch-cpu").requires_grad

    plain_a = a.detach()
    c = gemmzoo.matmul(plain_a, b, "torch-cpu")
    assert not c.requires_grad
    assert state.plan_cache.last[1] is torch.mm  # no autograd layer when nothing requires grad


def test_fp8_operands_that_require_grad_are_refused_clearly():
    a = torch.zeros(4, 16).to(torch.float8_e4m3fn).requires_grad_()
    b = torch.zeros(16, 8).to(torch.float8_e4m3fn)
    with pytest.raises(GemmInputError, match=r"require grad.*\(4, 16\)|\(4, 16\).*require grad"):
        gemmzoo.matmul(a, b, "numpy")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "tf32"])
def test_gradients_on_the_gpu_match_torch_matmul_within_the_suite_bound(dtype):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    tf32 = dtype == "tf32"
    torch_dtype = torch.float32 if tf32 else getattr(torch, dtype)
    m, n, k = 129, 257, 1031
    a = random(m, k, torch_dtype, 1).cuda().requires_grad_()
    b = random(k, n, torch_dtype, 2).cuda().requires_grad_()
    upstream = random(m, n, torch_dtype, 3).cuda()
    if tf32:
        c = gemmzoo.matmul(gemmzoo.TF32Array(a), gemmzoo.TF32Array(b)).data
    else:
        c = gemmzoo.matmul(a, b)
    assert c.requires_grad
    c.backward(upstream)
    for got, left, right in ((a.grad, upstream, b.T), (b.grad, a.T, upstream)):
        within_bound(got.cpu(), left.cpu(), right.cpu(), dtype)
