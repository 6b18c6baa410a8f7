"""gemmzoo.matmul on float8_e4m3fn operands: NumPy (ml_dtypes) and torch arrays in, bfloat16 out."""

from __future__ import annotations

import numpy as np
import pytest

import gemmzoo
from gemmzoo.conformance.bounds import error_bound
from gemmzoo.contract.fp8 import BFLOAT16, E4M3, to_e4m3

torch = pytest.importorskip("torch")


pytestmark = pytest.mark.usefixtures("empty_cache")


def e4m3_operands(m: int, n: int, k: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return to_e4m3(rng.standard_normal((m, k)) * 4), to_e4m3(rng.standard_normal((k, n)))


def assert_fp8_product(c_host: np.ndarray, a: np.ndarray, b: np.ndarray) -> None:
    """Every element within the float8_e4m3fn bound of the float64 product of the E4M3 values."""
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    ref = a64 @ b64
    bound = error_bound("float8_e4m3fn", a.shape[1], ref, np.abs(a64) @ np.abs(b64))
    assert c_host.shape == ref.shape
    assert np.all(np.abs(c_host.astype(np.float64) - ref) <= bound)


@pytest.mark.parametrize("backend", [None, "numpy"])
def test_numpy_e4m3_arrays_give_a_bfloat16_array(backend):
    a, b = e4m3_operands(37, 29, 45, seed=1)
    for _ in range(2):  # the plan's first call and a cached one
        c = gemmzoo.matmul(a, b, backend)
        assert isinstance(c, np.ndarray) and c.dtype == BFLOAT16
        assert_fp8_product(c.astype(np.float32), a, b)


def test_torch_cpu_float8_tensors_give_a_bfloat16_tensor():
    a, b = e4m3_operands(21, 33, 64, seed=2)
    ta = torch.from_numpy(a.view(np.uint8)).view(torch.float8_e4m3fn)
    b_columns = np.ascontiguousarray(b.T).view(np.uint8)
    tb = torch.from_numpy(b_columns).view(torch.float8_e4m3fn).T  # column-major
    for _ in range(2):
        c = gemmzoo.matmul(ta, tb)  # no CPU torch backend declares fp8: numpy's, through host copies
        assert isinstance(c, torch.Tensor) and c.dtype == torch.bfloat16 and c.device.type == "cpu"
        assert_fp8_product(c.float().numpy(), a, b)


def test_nan_propagates_through_gemmzoo_matmul():
    a, b = e4m3_operands(8, 6, 16, seed=3)
    a[2, 5] = np.float64("nan")
    c = gemmzoo.matmul(a, b).astype(np.float32)
    assert np.isnan(c[2]).all() and not np.isnan(np.delete(c, 2, axis=0)).any()


def test_mixed_fp8_and_float32_is_a_clear_error():
    a, b = e4m3_operands(4, 5, 6, seed=4)
    with pytest.raises(gemmzoo.GemmInputError, match=r"\(4, 6\).*\(6, 5\)"):
        gemmzoo.matmul(a, b.astype(np.float32))
    assert a.dtype == E4M3


@pytest.mark.gpu
@pytest.mark.parametrize("backend", [None, "torch", "triton-fp8"])
def test_cuda_float8_tensors_give_a_cuda_bfloat16_tensor(backend):
    if "float8_e4m3fn" not in gemmzoo.get_backend("torch").dtypes:
        pytest.skip("the GPU has no fp8 tensor cores")
    a, b = e4m3_operands(64, 80, 96, seed=5)
    ta = torch.from_numpy(a.view(np.uint8)).view(torch.float8_e4m3fn).cuda()
    tb = torch.from_numpy(b.view(np.uint8)).view(torch.float8_e4m3fn).cuda()
    c = gemmzoo.matmul(ta, tb, backend)
    assert c.dtype == torch.bfloat16 and c.is_cuda
    assert_fp8_product(c.float().cpu().numpy(), a, b)


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(1040, 1030, 1009), (2100, 2050, 2047)])
def test_triton_fp8_pads_rows_that_are_not_16_bytes_and_stays_right(shape):
    """Past 2^30 multiply-adds, under the TMA kernels' threshold and past it, K not a multiple of
    16 and N not of 8: the plan multiplies zero-padded copies, and every element is right."""
    from gemmzoo_triton.fp8.backend import PAD_MIN_WORK

    backend = gemmzoo.get_backend("triton-fp8")
    if backend.unavailable_reason() is not None or backend.device != "cuda":
        pytest.skip(f"triton-fp8 does not run on a GPU here: {backend.unavailable_reason()}")
    m, n, k = shape
    assert m * n * k > PAD_MIN_WORK
    a, b = e4m3_operands(m, n, k, seed=7)
    ta = torch.from_numpy(a.view(np.uint8)).view(torch.float8_e4m3fn).cuda()
    tb = torch.from_numpy(b.view(np.uint8)).view(torch.float8_e4m3fn).cuda()
    plan = backend.prepare(ta, tb)
    assert "_padded_plan" in plan.__qualname__
    for _ in range(2):  # the first call binds the aligned problem's plan, the second reuses it
        c = plan(ta, tb)
        assert c.shape == (m, n) and c.dtype == torch.bfloat16
        assert_fp8_product(c.float().cpu().numpy(), a, b)
