"""torch CUDA tensors through the ``cupy`` backend (gemmzoo.arrays.torch_cupy): right, bitwise equal to
CuPy on the same operands, on torch's current stream, views reused only where they are right.
GPU only (marked ``gpu``)."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from sessions import scoped  # noqa: E402

import gemmzoo  # noqa: E402
from gemmzoo.conformance.bounds import error_bound  # noqa: E402

pytestmark = pytest.mark.gpu


@pytest.fixture(autouse=True)
def fresh(tmp_path, monkeypatch):
    reason = gemmzoo.get_backend("cupy").unavailable_reason()
    if reason is not None:
        pytest.skip(f"cupy: {reason}")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device visible to torch")
    monkeypatch.setenv("GEMMZOO_CACHE_DIR", str(tmp_path / "cache"))
    with scoped():
        yield


def _operand(rows, cols, layout, dtype, generator):
    if layout == "T":
        return torch.randn(cols, rows, device="cuda", generator=generator).to(dtype).T
    if layout == "S":
        return torch.randn(2 * rows, 2 * cols, device="cuda", generator=generator).to(dtype)[::2, 1::2]
    return torch.randn(rows, cols, device="cuda", generator=generator).to(dtype)


def _check(c, a, b, dtype):
    import cupy

    a64, b64 = a.double().cpu().numpy(), b.double().cpu().numpy()
    ref = a64 @ b64
    bound = error_bound(dtype, a.shape[1], ref, np.abs(a64) @ np.abs(b64))
    assert isinstance(c, torch.Tensor) and c.is_cuda and c.dtype == a.dtype and c.shape == ref.shape
    assert np.all(np.abs(c.double().cpu().numpy() - ref) <= bound)
    expected = gemmzoo.get_backend("cupy").matmul(cupy.from_dlpack(a), cupy.from_dlpack(b))
    assert torch.equal(c, torch.from_dlpack(expected))  # the same product CuPy computes


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64"])
@pytest.mark.parametrize("layout", ["NN", "TN", "NT", "SS"])
def test_torch_tensors_through_cupy_are_right_and_bitwise_cupys(dtype, layout):
    torch_dtype = getattr(torch, dtype)
    generator = torch.Generator(device="cuda").manual_seed(1)
    m, n, k = 67, 45, 131
    for _ in range(3):  # new tensors at new addresses, then the same problem again
        a = _operand(m, k, layout[0], torch_dtype, generator)
        b = _operand(k, n, layout[1], torch_dtype, generator)
        c = gemmzoo.matmul(a, b, "cupy")
        torch.cuda.synchronize()
        _check(c, a, b, dtype)


def test_new_values_at_the_same_address_are_read_again():
    generator = torch.Generator(device="cuda").manual_seed(2)
    a = torch.randn(33, 40, device="cuda", generator=generator)
    b = torch.randn(40, 21, device="cuda", generator=generator)
    first = gemmzoo.matmul(a, b, "cupy").clone()
    a.copy_(torch.randn(33, 40, device="cuda", generator=generator))
    second = gemmzoo.matmul(a, b, "cupy")
    torch.cuda.synchronize()
    assert not torch.equal(first, second)
    _check(second, a, b, "float32")


def test_the_product_follows_torchs_current_stream():
    generator = torch.Generator(device="cuda").manual_seed(3)
    stream = torch.cuda.Stream()
    big = torch.randn(4096, 4096, device="cuda", generator=generator)
    with torch.cuda.stream(stream):
        # written on this stream just before: a product on another stream could read it early
        a = torch.mm(big, big)[:257, :300].contiguous()
        b = torch.randn(300, 129, device="cuda", generator=generator)
        c = gemmzoo.matmul(a, b, "cupy")
    stream.synchronize()
    _check(c, a, b, "float32")


def test_tf32_operands_through_cupy():
    generator = torch.Generator(device="cuda").manual_seed(4)
    a = torch.randn(64, 512, device="cuda", generator=generator)
    b = torch.randn(512, 48, device="cuda", generator=generator)
    c = gemmzoo.matmul(gemmzoo.TF32Array(a), gemmzoo.TF32Array(b), "cupy")
    assert isinstance(c, gemmzoo.TF32Array) and c.data.shape == (64, 48)
    reference = a.double() @ b.double()
    error = (c.data.double() - reference).abs().max().item()
    assert error < 0.1 * reference.abs().max().item()


def test_the_planned_views_are_used_not_the_dlpack_fallback():
    import cupy

    from gemmzoo.arrays.torch_cupy import bridged_or

    generator = torch.Generator(device="cuda").manual_seed(5)
    a = torch.randn(40, 72, device="cuda", generator=generator).half()
    b = torch.randn(72, 24, device="cuda", generator=generator).half().T.contiguous().T
    backend = gemmzoo.get_backend("cupy")
    run = backend.prepare(cupy.from_dlpack(a), cupy.from_dlpack(b))

    def fallback(x, y):
        return torch.from_dlpack(run(cupy.from_dlpack(x), cupy.from_dlpack(y)))

    plan = bridged_or(fallback, run, a, b, False)
    assert plan is not fallback
    c = plan(a, b)
    torch.cuda.synchronize()
    _check(c, a, b, "float16")
