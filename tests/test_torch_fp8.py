"""The torch backend's fp8 path (``torch._scaled_mm`` behind copies into its layout), on CPU here and
on CUDA where there is an fp8 GPU."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from gemmzoo.conformance import check_backend  # noqa: E402
from gemmzoo_torch import TorchBackend, TorchCpuBackend, fp8  # noqa: E402

pytestmark = pytest.mark.skipif(not hasattr(torch, "_scaled_mm"), reason="this torch has no _scaled_mm")


class ScaledMmOnCpu(TorchCpuBackend):
    """torch-cpu with fp8 routed as the torch backend routes it: the same copies and padding,
    with torch's CPU ``_scaled_mm`` doing the product."""

    name = "torch-cpu-scaled-mm"
    dtypes = frozenset({"float32", "float8_e4m3fn"})

    def matmul(self, a, b):
        self.check_operands(a, b)
        if fp8.is_fp8(a):
            return fp8.scaled_matmul(a, b)
        return super().matmul(a, b)


def _cpu_scaled_mm_works(rowwise: bool = False) -> bool:
    try:
        x = torch.zeros((16, 16)).to(torch.float8_e4m3fn)
        sa, sb = (torch.ones(16, 1), torch.ones(1, 16)) if rowwise else (torch.ones(()), torch.ones(()))
        torch._scaled_mm(x, x.t(), sa, sb, out_dtype=torch.bfloat16)
    except (RuntimeError, NotImplementedError):
        return False
    return True


cpu_scaled_mm = pytest.mark.skipif(not _cpu_scaled_mm_works(), reason="this torch has no CPU _scaled_mm")
#: torch 2.11's CPU ``_scaled_mm`` takes scalar scales only (an internal assert otherwise)
ROWWISE = pytest.param("rowwise", marks=pytest.mark.skipif(
    not _cpu_scaled_mm_works(rowwise=True), reason="this torch's CPU _scaled_mm takes no row-wise scales"))


@cpu_scaled_mm
def test_the_copies_and_padding_conform_for_every_shape_and_layout():
    report = check_backend(ScaledMmOnCpu(), dtypes=["float8_e4m3fn"])
    assert report.passed, [(r.check, r.detail) for r in report.failures]


@cpu_scaled_mm
@pytest.mark.parametrize(("m", "n", "k"), [(5, 16, 32), (5, 17, 32), (5, 32, 33), (1, 1, 1), (40, 48, 64)])
@pytest.mark.parametrize("layout", ["NN", "NT", "TN", "TT"])
def test_scaled_matmul_matches_the_numpy_reference(m, n, k, layout):
    from gemmzoo_numpy import NumpyBackend

    rng = np.random.default_rng(m * 1000 + n * 10 + k)
    a_values, b_values = rng.standard_normal((m, k)) * 8, rng.standard_normal((k, n))
    backend = ScaledMmOnCpu()

    def operand(x, transposed):
        return backend.from_numpy(np.ascontiguousarray(x.T), "float8_e4m3fn").T if transposed \
            else backend.from_numpy(x, "float8_e4m3fn")

    a, b = operand(a_values, layout[0] == "T"), operand(b_values, layout[1] == "T")
    c = fp8.scaled_matmul(a, b)
    assert c.dtype == torch.bfloat16 and tuple(c.shape) == (m, n) and c.is_contiguous()
    reference = NumpyBackend()
    expected = reference.to_numpy(reference.matmul(reference.from_numpy(a_values, "float8_e4m3fn"),
                                                   reference.from_numpy(b_values, "float8_e4m3fn")))
    got = backend.to_numpy(c)
    # Both round an fp32 sum once to bf16; the sums may differ in their last fp32 bits only.
    np.testing.assert_allclose(got, expected, rtol=2.0**-7, atol=1e-5)


@cpu_scaled_mm
def test_scales_multiply_the_product():
    backend = ScaledMmOnCpu()
    rng = np.random.default_rng(2)
    a = backend.from_numpy(rng.integers(-3, 4, (8, 32)), "float8_e4m3fn")
    b = backend.from_numpy(rng.integers(-3, 4, (32, 16)), "float8_e4m3fn")
    plain = fp8.scaled_matmul(a, b).float()
    scaled = fp8.scaled_matmul(a, b, scale_a=0.5, scale_b=torch.tensor([4.0])).float()
    torch.testing.assert_close(scaled, plain * 2, rtol=0, atol=0)


def test_operands_already_in_scaled_mm_form_are_not_copied():
    a = torch.zeros((8, 32), dtype=torch.uint8).view(torch.float8_e4m3fn)
    b = torch.zeros((48, 32), dtype=torch.uint8).view(torch.float8_e4m3fn).t()
    assert fp8._a_operand(a) is a and fp8._b_operand(b) is b
    row_major_b = torch.zeros((32, 48), dtype=torch.uint8).view(torch.float8_e4m3fn)
    copied = fp8._b_operand(row_major_b)
    assert copied is not row_major_b and copied.t().is_contiguous() and tuple(copied.shape) == (32, 48)
    padded = fp8._b_operand(torch.zeros((33, 20), dtype=torch.uint8).view(torch.float8_e4m3fn))
    assert tuple(padded.shape) == (48, 32) and padded.view(torch.uint8)[33:].eq(0).all()


def test_torch_backend_declares_fp8_only_on_an_fp8_gpu():
    has_fp8_gpu = torch.cuda.is_available() and torch.cuda.get_device_capability() >= (8, 9)
    assert ("float8_e4m3fn" in TorchBackend().dtypes) == has_fp8_gpu


@pytest.mark.gpu
def test_torch_backend_conforms_for_fp8_on_the_gpu():
    backend = TorchBackend()
    if "float8_e4m3fn" not in backend.dtypes:
        pytest.skip("the GPU has no fp8 tensor cores (capability < 8.9)")
    report = check_backend(backend, dtypes=["float8_e4m3fn"])
    assert report.passed, [(r.check, r.detail) for r in report.failures]


@cpu_scaled_mm
def test_torch_backend_rejects_a_k_that_the_fp8_padding_would_hide():
    from gemmzoo import GemmInputError

    class Fp8OnCpu(TorchBackend):
        name = "torch-fp8-on-cpu"
        dtypes = frozenset({"float8_e4m3fn"})

    backend = Fp8OnCpu()
    rng = np.random.default_rng(7)

    def operand(rows, cols):  # on the CPU: integers, exact in E4M3
        return torch.from_numpy(rng.integers(-3, 4, (rows, cols)).astype(np.float32)).to(torch.float8_e4m3fn)

    a, b = operand(8, 20), operand(20, 16)
    expected = a.float() @ b.float()
    torch.testing.assert_close(backend.matmul(a, b).float(), expected, rtol=0, atol=0)
    # K 20 against 24: both pad to 32, so _scaled_mm alone would take them
    with pytest.raises(GemmInputError, match=r"torch-fp8-on-cpu.*\(8, 20\).*\(24, 16\)"):
        backend.matmul(a, operand(24, 16))


class Fp8PlanOnCpu(TorchBackend):
    """The torch backend's fp8 plan (fp8.scaled_plan, what prepare returns) with torch's CPU
    ``_scaled_mm`` doing the product."""

    name = "torch-fp8-plan-on-cpu"
    device = "cpu"
    dtypes = frozenset({"float8_e4m3fn"})

    def unavailable_reason(self):
        return None

    def synchronize(self):
        return None


@cpu_scaled_mm
def test_the_fp8_plan_conforms_for_every_shape_and_layout():
    report = check_backend(Fp8PlanOnCpu(), dtypes=["float8_e4m3fn"])
    assert report.passed, [(r.check, r.detail) for r in report.failures]


def _fp8(rng, rows, cols, offset=0):
    """Integers in E4M3 (exact), row-major, at ``offset`` bytes past an aligned allocation."""
    values = torch.from_numpy(rng.integers(-3, 4, (rows, cols)).astype(np.float32)).to(torch.float8_e4m3fn)
    storage = torch.empty(offset + rows * cols, dtype=torch.uint8)
    view = storage[offset:].view(torch.float8_e4m3fn).view(rows, cols)
    view.copy_(values)
    return view


@cpu_scaled_mm
@pytest.mark.parametrize(("m", "n", "k"), [(8, 32, 48), (5, 17, 33)])
def test_an_fp8_plan_reuses_its_buffers_and_copies_an_unaligned_operand(m, n, k):
    backend = Fp8PlanOnCpu()
    rng = np.random.default_rng(m + n + k)
    a, b = _fp8(rng, m, k), _fp8(rng, k, n)  # B row-major: always copied (transposed)
    run = backend.prepare(a, b)
    results = []
    for offset in (0, 1, 0):  # A at an unaligned address in the second call
        a, b = _fp8(rng, m, k, offset), _fp8(rng, k, n)
        assert (a.data_ptr() % 16 != 0) == (offset == 1)
        c = run(a, b)
        assert c.dtype == torch.bfloat16 and c.shape == (m, n)
        torch.testing.assert_close(c.float(), a.float() @ b.float(), rtol=0, atol=0)
        results.append(c)
    assert not torch.equal(results[0], results[2])  # new values each call were read


@cpu_scaled_mm
@pytest.mark.parametrize("scaling", ["tensorwise", ROWWISE])
@pytest.mark.parametrize(("m", "n", "k", "layout"), [(8, 32, 48, "NT"), (8, 32, 48, "NN"), (5, 17, 33, "NN"),
                                                     (5, 17, 33, "TT"), (9, 16, 20, "NT"), (7, 20, 32, "NT")])
def test_a_scaled_plan_pads_once_and_keeps_its_buffers(scaling, m, n, k, layout):
    """The torch backend's scaled plan on torch's CPU ``_scaled_mm``: K and N not multiples of 16,
    each layout, three calls with new values (the second with scales of 1 on odd columns, so a
    widened scale of B read at the wrong columns shows); every element exact against the scaled
    product of the integer operands, C the M×N view of the padded product."""
    from gemmzoo_torch.fp8 import class_scaled_plan

    rng = np.random.default_rng(m * n + k)

    def operand(rows, cols, transposed):
        return _fp8(rng, cols, rows).t() if transposed else _fp8(rng, rows, cols)

    def scales(size, column):
        if scaling == "tensorwise":
            return torch.tensor(float(rng.integers(1, 4)))
        values = torch.from_numpy(2.0 ** rng.integers(-2, 3, size).astype(np.float32))
        return values.reshape(1, size) if column else values.reshape(size, 1)

    given = []

    def op(x, y, **kwargs):  # torch's CPU _scaled_mm, noting whether it was given A and B themselves
        given.append((x.data_ptr() == a.data_ptr(), y.data_ptr() == b.data_ptr()))
        # what cuBLASLt takes (the CPU's _scaled_mm takes more): A row-major, B column-major, K and N
        # multiples of 16
        assert x.stride(1) == 1 and y.stride(0) == 1 and x.shape[1] % 16 == 0 and y.shape[1] % 16 == 0, \
            (x.stride(), y.stride(), x.shape, y.shape)
        return torch._scaled_mm(x, y, **kwargs)

    a, b = operand(m, k, layout[0] == "T"), operand(k, n, layout[1] == "T")
    run = class_scaled_plan(op, a, b, scaling, torch.float32)
    copies = (k % 16 != 0 or layout[0] == "T", k % 16 != 0 or n % 16 != 0 or layout[1] == "N")
    seen = []
    for call in range(3):
        a, b = operand(m, k, layout[0] == "T"), operand(k, n, layout[1] == "T")
        sa, sb = scales(m, False), scales(n, True)
        if call == 1 and scaling == "rowwise":
            sb = torch.where(torch.arange(n) % 2 == 1, torch.ones(n), sb.reshape(n)).reshape(1, n)
        c = run(a, b, sa, sb)
        assert given[-1] == (not copies[0], not copies[1])
        expected = (a.double() * sa.double()) @ (b.double() * sb.double())
        assert c.shape == (m, n) and c.dtype == torch.float32
        assert torch.equal(c.double(), expected)  # small integers times powers of two: exact
        seen.append(c)
    assert not torch.equal(seen[0], seen[2])


@pytest.mark.skipif(not _cpu_scaled_mm_works(rowwise=True),
                    reason="this torch's CPU _scaled_mm takes no row-wise scales")
def test_scaled_plans_are_kept_per_problem_and_layout_and_copy_an_unaligned_start():
    backend = TorchCpuBackend()
    rng = np.random.default_rng(9)
    a, b = _fp8(rng, 5, 32), _fp8(rng, 32, 16).t().contiguous().t()  # as _scaled_mm takes them
    plan = backend._scaled_launch(torch._scaled_mm, a, b, "rowwise", torch.bfloat16)
    # an unaligned start of A is the same problem: the plan copies such an operand on the call
    unaligned = _fp8(rng, 5, 32, 1)
    assert unaligned.data_ptr() % 16 != 0
    assert backend._scaled_launch(torch._scaled_mm, unaligned, b, "rowwise", torch.bfloat16) is plan
    sa, sb = torch.full((5, 1), 0.5), torch.full((1, 16), 2.0)
    c = plan(unaligned, b, sa, sb)
    torch.testing.assert_close(c.float(), unaligned.float() @ b.float(), rtol=0, atol=0)
    # B row-major, another N; then the other scaling
    variants = ((a, _fp8(rng, 32, 16)), (_fp8(rng, 5, 32), _fp8(rng, 32, 18)))
    others = [backend._scaled_launch(torch._scaled_mm, *operands, "rowwise", torch.bfloat16)
              for operands in variants]
    others.append(backend._scaled_launch(torch._scaled_mm, a, b, "tensorwise", torch.bfloat16))
    assert len({id(p) for p in [plan, *others]}) == 4



def _rounding_cases(dtype: type) -> np.ndarray:
    """Random values over E4M3's whole range and past it, every tie between neighbouring E4M3
    values (and values a hair either side), subnormals, and the specials, in ``dtype``."""
    from gemmzoo.contract.fp8 import E4M3

    codes = np.arange(256, dtype=np.uint8).view(E4M3).astype(np.float64)
    grid = np.unique(codes[np.isfinite(codes)])
    ties = (grid[:-1] + grid[1:]) / 2
    rng = np.random.default_rng(11)
    spread = rng.standard_normal(20_000) * 2.0 ** rng.integers(-14, 11, 20_000)
    specials = [0.0, -0.0, 449.0, 464.0, 480.0, -1e30, 2.0**-10, -2.0**-10, np.inf, -np.inf, np.nan, -np.nan]
    near = ties * (1 + 2.0**-20) if dtype == np.float32 else ties + 2.0**-40
    with np.errstate(over="ignore"):
        return np.concatenate([spread, grid, ties, -ties, near, specials]).astype(dtype)


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_device_rounding_gives_the_host_roundings_bytes(device, dtype):
    """``from_numpy`` rounds fp8 operands where the tensor lives; every byte equals the host's
    :func:`to_e4m3`, ties, subnormals, saturation and the signs of NaN and zero included."""
    from gemmzoo.arrays.torch_tensors import e4m3_tensor
    from gemmzoo.contract.fp8 import to_e4m3

    values = _rounding_cases(dtype)
    got = e4m3_tensor(torch.from_numpy(values).to(device))
    assert got.dtype == torch.float8_e4m3fn and got.device.type == device
    np.testing.assert_array_equal(got.view(torch.uint8).cpu().numpy(), to_e4m3(values).view(np.uint8))


def test_from_numpy_rounds_a_transposed_operand_into_c_order():
    from gemmzoo.contract.fp8 import to_e4m3

    values = _rounding_cases(np.float64)[:3000].reshape(60, 50).T
    tensor = ScaledMmOnCpu().from_numpy(values, "float8_e4m3fn")
    assert tensor.shape == (50, 60) and tensor.is_contiguous()
    np.testing.assert_array_equal(tensor.view(torch.uint8).numpy(), to_e4m3(values).view(np.uint8))


def test_from_numpy_rounds_a_read_only_float32_operand_without_a_warning():
    from gemmzoo.contract.fp8 import to_e4m3

    values = _rounding_cases(np.float32)[:2000].reshape(40, 50)
    values.flags.writeable = False
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tensor = ScaledMmOnCpu().from_numpy(values, "float8_e4m3fn")
    np.testing.assert_array_equal(tensor.view(torch.uint8).numpy(), to_e4m3(values).view(np.uint8))
