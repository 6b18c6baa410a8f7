"""triton-fp8's Gluon kernel on a Hopper GPU: its results against torch._scaled_mm and the
conformance suite through it (its build without a GPU: tests/test_gluon_kernels.py)."""

from __future__ import annotations

import pytest

pytest.importorskip("triton")
pytest.importorskip("gemmzoo_triton.core.gluon_parts")  # Triton 3.6 or later, with Gluon


def _hopper() -> bool:
    torch = pytest.importorskip("torch")
    return torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)


@pytest.mark.gpu
@pytest.mark.parametrize("m, n, k, b_row_major", [
    (4096, 4096, 4096, False), (1000, 1040, 2064, False), (129, 4112, 400, True),
    (300, 272, 16, False), (2112, 2080, 2064, True),
])
def test_results_are_scaled_mm_bitwise_on_hopper(m, n, k, b_row_major):
    if not _hopper():
        pytest.skip("needs a GPU of capability 9.0")
    import torch

    from gemmzoo_triton import TritonFp8Backend
    from gemmzoo_triton.fp8.backend import gluon_fp8_config

    g = torch.Generator(device="cuda").manual_seed(m + n + k)
    a = torch.randn(m, k, device="cuda", generator=g).to(torch.float8_e4m3fn)
    b_t = torch.randn(n, k, device="cuda", generator=g).to(torch.float8_e4m3fn)
    b = b_t.T.contiguous() if b_row_major else b_t.T
    assert gluon_fp8_config(a, b_t.T) is not None
    one = torch.ones((), device="cuda")
    expected = torch._scaled_mm(a, b_t.T, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
    backend = TritonFp8Backend()
    first, second = backend.matmul(a, b), backend.matmul(a, b)
    assert first.dtype == torch.bfloat16 and first.shape == (m, n)
    assert torch.equal(first, expected)  # same numerics: every element, bit for bit
    assert torch.equal(first, second)


@pytest.mark.gpu
def test_conforms_on_hopper_through_the_gluon_kernel():
    if not _hopper():
        pytest.skip("needs a GPU of capability 9.0")
    from gemmzoo.conformance import Case, check_backend, run_case
    from gemmzoo_triton import TritonFp8Backend

    backend = TritonFp8Backend()
    report = check_backend(backend, dtypes=["float8_e4m3fn"])
    assert report.results and report.passed, [r.detail for r in report.failures][:3]
    for layout in ("NN", "NT", "TN", "TT"):  # past the TMA threshold, tails in M, N and K
        result = run_case(backend, Case("random", 2112, 2080, 2064, "float8_e4m3fn", layout))
        assert result.passed, result.detail
