"""gemmzoo.conformance.verify: the float64 reference computed where the operands are, judged by
the suite's judge.

No GPU here: the torch path runs on CPU tensors (the code a CUDA tensor takes), and measure.judge_problem
is driven with it in place of the device dispatch.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest

from gemmzoo import get_backend, measure
from gemmzoo.conformance import verify
from gemmzoo.conformance.bounds import error_bound, reference
from gemmzoo.conformance.judge import CheckFailedError, judge_result
from gemmzoo.measure import reference as measure_reference
from gemmzoo.problems.grids import GridPoint

torch = pytest.importorskip("torch")


def _torch_cpu():
    backend = get_backend("torch-cpu")
    if backend.unavailable_reason() is not None:
        pytest.skip(backend.unavailable_reason())
    return backend


@pytest.mark.parametrize(("dtype", "layout"), [("float32", "NN"), ("float16", "TN"), ("bfloat16", "NT"),
                                               ("float64", "TT")])
def test_the_torch_reference_is_the_host_reference(dtype, layout):
    backend = _torch_cpu()
    problem = measure.make_problem(backend, GridPoint(37, 53, 301, dtype, layout), seed=3)

    product, magnitude = verify.torch_reference(problem.a, problem.b)
    host_product, host_magnitude = reference(problem.a_host, problem.b_host)

    # both float64 products of the same values; they differ only by float64 summation order
    scale = host_magnitude.max()
    np.testing.assert_allclose(product, host_product, rtol=0, atol=1e-13 * scale)
    np.testing.assert_allclose(magnitude, host_magnitude, rtol=1e-13)
    c = backend.matmul(problem.a, problem.b)
    on_device = judge_result(backend, dtype, problem.a, c, problem.a_host, problem.b_host,
                             reference=(product, magnitude))
    on_host = judge_result(backend, dtype, problem.a, c, problem.a_host, problem.b_host)
    assert on_device.error_ratio <= 1
    # float64 results: the two references differ by the size of the result's own rounding
    close = 0.1 if dtype == "float64" else 1e-9
    assert on_device.error_ratio == pytest.approx(on_host.error_ratio, abs=close)


def test_non_finite_operands_give_the_host_references_pattern():
    a = np.random.default_rng(1).standard_normal((9, 12))
    b = np.random.default_rng(2).standard_normal((12, 7))
    a[2, 3], b[4, 5] = np.nan, np.inf
    product, magnitude = verify.torch_reference(torch.from_numpy(a), torch.from_numpy(b))
    host_product, host_magnitude = reference(a, b)
    np.testing.assert_array_equal(np.isnan(product), np.isnan(host_product))
    np.testing.assert_array_equal(np.isinf(product), np.isinf(host_product))
    np.testing.assert_allclose(magnitude, host_magnitude, rtol=1e-14)


def test_a_wrong_element_is_caught_with_the_device_reference():
    backend = _torch_cpu()
    problem = measure.make_problem(backend, GridPoint(64, 48, 200, "float32"), seed=5)
    c = backend.matmul(problem.a, problem.b)
    product, magnitude = verify.torch_reference(problem.a, problem.b)
    bound = error_bound("float32", 200, product, magnitude)
    c[5, 9] += float(3 * bound[5, 9])  # three times its own bound: a row sum would hide it
    outside = r"1 of 3072 elements outside the error bound; first at \(5, 9\)"
    with pytest.raises(CheckFailedError, match=outside):
        judge_result(backend, "float32", problem.a, c, problem.a_host, problem.b_host,
                     reference=(product, magnitude))


def test_compare_takes_the_device_reference_for_a_cuda_backend(monkeypatch):
    backend = _torch_cpu()
    asked = []

    def reference_here(a, b):
        asked.append((tuple(a.shape), tuple(b.shape)))
        return verify.torch_reference(a, b)

    monkeypatch.setattr(verify, "device_reference", reference_here)
    monkeypatch.setattr(measure_reference, "host_reference",
                        lambda a, b: pytest.fail("the host reference was computed"))
    problem = measure.make_problem(backend, GridPoint(40, 24, 56, "float32"), seed=0)
    problem.backend = copy.copy(backend)
    # as a GPU backend: judge_problem asks gemmzoo.conformance.verify for the reference
    problem.backend.device = "cuda"
    checked = measure.judge_problem(problem)
    assert asked == [((40, 56), (56, 24))] and 0 < checked.error_ratio <= 1


def test_the_host_reference_when_the_device_cannot():
    a, b = np.ones((3, 4)), np.ones((4, 5))
    assert verify.device_reference(a, b) is None  # numpy arrays: the host computes it
    if not torch.cuda.is_available():
        assert verify.device_reference(torch.ones(3, 4), torch.ones(4, 5)) is None


@pytest.mark.parametrize("layout", ["NN", "NT", "TN", "TT"])
def test_operands_are_drawn_in_the_order_their_layout_stores_them(layout):
    """Random normal, read-only host operands; a T operand is the transpose of a C-ordered array,
    and a backend's operands hold exactly those values in that layout."""
    a, b = measure.host_operands(70, 90, 110, 5, layout)
    assert a.shape == (70, 110) and b.shape == (110, 90)
    for operand, letter in ((a, layout[0]), (b, layout[1])):
        assert not operand.flags.writeable
        assert (operand.T if letter == "T" else operand).flags.c_contiguous
        assert abs(operand.mean()) < 0.05 and 0.95 < operand.std() < 1.05
    problem = measure.make_problem(get_backend("numpy"), GridPoint(70, 90, 110, "float64", layout), seed=5)
    np.testing.assert_array_equal(problem.a, a)
    np.testing.assert_array_equal(problem.b, b)
    assert not np.shares_memory(problem.a, a) and not np.shares_memory(problem.b, b)
    assert problem.a.T.flags.c_contiguous is (layout[0] == "T")
    assert problem.b.T.flags.c_contiguous is (layout[1] == "T")


@pytest.mark.parametrize("layout", ["NT", "TN"])
def test_fp8_operands_are_rounded_once_in_their_layouts_order(layout):
    """An fp8 point's operands: E4M3 values held in float32, read-only, stored as the layout says;
    a backend's operands hold exactly those values."""
    from gemmzoo.contract.fp8 import to_e4m3

    a, b = measure.e4m3_operands(70, 90, 110, 5, layout)
    for operand, letter in ((a, layout[0]), (b, layout[1])):
        assert operand.dtype == np.float32 and not operand.flags.writeable
        assert (operand.T if letter == "T" else operand).flags.c_contiguous
        np.testing.assert_array_equal(to_e4m3(operand).astype(np.float32), operand)
        assert 0.9 < operand.std() < 1.1
    point = GridPoint(70, 90, 110, "float8_e4m3fn", layout)
    problem = measure.make_problem(get_backend("numpy"), point, seed=5)
    np.testing.assert_array_equal(problem.a.astype(np.float32), a)
    np.testing.assert_array_equal(problem.b.astype(np.float32), b)


@pytest.mark.parametrize(("dtype", "precision"), [("float64", np.float64), ("float32", np.float32),
                                                  ("float16", np.float32), ("bfloat16", np.float32)])
def test_operands_reach_from_numpy_in_float64_only_for_float64_points(dtype, precision):
    """A backend's from_numpy receives the point's values in float64 for a float64 point and in
    float32 otherwise, and holds those values (rounded, for a 16-bit point)."""
    received = []
    backend = get_backend("numpy")
    if dtype not in backend.dtypes:
        backend = _torch_cpu()

    class Spy:
        def __getattr__(self, name):
            return getattr(backend, name)

        def from_numpy(self, x, dtype):
            received.append(x)
            return backend.from_numpy(x, dtype)

    problem = measure.make_problem(Spy(), GridPoint(30, 20, 40, dtype, "NT"), seed=2)
    assert [x.dtype for x in received] == [np.dtype(precision)] * 2
    rtol = {"float16": 2.0**-11, "bfloat16": 2.0**-8}.get(dtype, 0.0)
    np.testing.assert_allclose(problem.a_host, received[0], rtol=rtol, atol=0)
    np.testing.assert_allclose(problem.b_host, received[1].T, rtol=rtol, atol=0)


class _AsCuda:
    """torch-cpu's backend posing as a CUDA one (the suite then asks for the GPU reference), with
    C off by ``nudge`` at one element when ``nudge`` is set."""

    def __init__(self, backend, nudge: float = 0.0) -> None:
        self._backend, self._nudge = backend, nudge
        self.device = "cuda"

    def __getattr__(self, name):
        return getattr(self._backend, name)

    def prepare(self, a, b):
        run = self._backend.prepare(a, b)

        def nudged(x, y):
            c = run(x, y)
            if self._nudge and c.numel():
                c[c.shape[0] // 2, c.shape[1] // 3] += self._nudge
            return c

        return nudged


def test_the_suite_takes_the_device_reference_for_large_cuda_cases(monkeypatch):
    from gemmzoo.conformance import judge, runner
    from gemmzoo.conformance.cases import Case

    asked = []

    def reference_here(a, b):
        asked.append((tuple(a.shape), tuple(b.shape)))
        return verify.torch_reference(a, b)

    monkeypatch.setattr(verify, "device_reference", reference_here)
    host = judge.reference_product
    monkeypatch.setattr(judge, "reference_product", lambda *args, **kwargs: pytest.fail("host reference"))
    large = Case("random", 512, 520, 256, "float32", "TN")
    assert large.m * large.n * large.k >= runner.DEVICE_REFERENCE_WORK
    result = runner.run_case(_AsCuda(_torch_cpu()), large)
    assert result.passed, result.detail
    assert asked == [((512, 256), (256, 520))]
    # one element off by a tenth: caught against the device reference as against the host one
    wrong = runner.run_case(_AsCuda(_torch_cpu(), nudge=0.1), large)
    assert not wrong.passed and "1 of 266240 elements outside the error bound" in wrong.detail
    # small cases, float64 and NaN/Inf cases keep the host reference
    monkeypatch.setattr(judge, "reference_product", host)
    for case in (Case("random", 64, 48, 40, "float32"), Case("random", 512, 520, 256, "float64"),
                 Case("nonfinite", 512, 520, 256, "float32")):
        assert runner.run_case(_AsCuda(_torch_cpu()), case).passed
    assert len(asked) == 2
