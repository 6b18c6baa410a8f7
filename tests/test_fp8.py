"""float8_e4m3fn: the host rounding, the numpy reference backend and the dtype's place in the grids."""

from __future__ import annotations

import numpy as np
import pytest

from gemmzoo.conformance import check_backend, run_input_check
from gemmzoo.contract.dtypes import result_dtype
from gemmzoo.contract.fp8 import BFLOAT16, CHUNK, E4M3, to_e4m3
from gemmzoo.problems.grids import get_grid, parse_point
from gemmzoo_numpy import NumpyBackend

_CODES = np.arange(256, dtype=np.uint8).view(E4M3).astype(np.float64)
_GRID = np.unique(_CODES[np.isfinite(_CODES)])


def _nearest(x: np.ndarray) -> np.ndarray:
    """The E4M3 values nearest to ``x`` (in range), found by search, with ties to an even code."""
    upper = np.clip(np.searchsorted(_GRID, x), 1, len(_GRID) - 1)
    lo, hi = _GRID[upper - 1], _GRID[upper]
    pick_hi = (hi - x < x - lo) | ((hi - x == x - lo) & (to_e4m3(hi).view(np.uint8) % 2 == 0))
    return np.where(pick_hi, hi, lo)


def test_in_range_values_round_to_the_nearest_e4m3_value():
    rng = np.random.default_rng(3)
    x = np.clip(rng.standard_normal(50_000) * 2.0 ** rng.integers(-12, 9, 50_000), -448, 448)
    ties = (_GRID[:-1] + _GRID[1:]) / 2
    values = np.concatenate([x, ties, ties + 2.0**-40, ties - 2.0**-40])
    got = to_e4m3(values).astype(np.float64)
    np.testing.assert_array_equal(got, _nearest(values))


def test_arrays_over_a_chunk_round_as_their_rows_do():
    """An operand larger than one chunk, as stored and transposed, specials included: every byte
    equals that of its row rounded alone, and in-range values are the nearest E4M3 values."""
    rng = np.random.default_rng(4)
    x = np.clip(rng.standard_normal((389, 521)) * 2.0 ** rng.integers(-12, 9, (389, 521)), -448, 448)
    assert x.size > 3 * CHUNK
    x[::97, ::13], x[5::101, 7::17], x[9::103, 2::19] = 1000.0, np.inf, -np.inf
    x[3::89, 4::23], x[6::83, 1::29] = np.nan, -np.nan
    for operand in (x, x.T):
        got = to_e4m3(operand)
        assert got.shape == operand.shape and got.flags.c_contiguous
        by_rows = np.stack([to_e4m3(row) for row in operand])
        np.testing.assert_array_equal(got.view(np.uint8), by_rows.view(np.uint8))
        in_range = np.abs(operand) <= 448
        np.testing.assert_array_equal(got.astype(np.float64)[in_range], _nearest(operand[in_range]))


@pytest.mark.parametrize("size", [1000, 3 * CHUNK + 7])
def test_float32_values_round_as_their_float64_selves(size):
    """float32 input takes one rounding from float32; every byte equals that of the same values
    given in float64 (which round to odd on the way), specials and ties included."""
    rng = np.random.default_rng(5)
    x = (rng.standard_normal(size) * 2.0 ** rng.integers(-12, 10, size)).astype(np.float32)
    ties = ((_GRID[:-1] + _GRID[1:]) / 2).astype(np.float32)
    x[:len(ties)] = ties
    x[len(ties)::97], x[len(ties) + 1::101], x[len(ties) + 2::103] = 1000.0, np.inf, -np.inf
    x[len(ties) + 3::107], x[len(ties) + 4::109], x[len(ties) + 5::113] = np.nan, -np.nan, -0.0
    np.testing.assert_array_equal(to_e4m3(x).view(np.uint8), to_e4m3(x.astype(np.float64)).view(np.uint8))


def test_out_of_range_saturates_and_infinities_become_nan():
    got = to_e4m3(np.array([448.0, 449.0, 470.0, 1e300, -500.0, np.inf, -np.inf, np.nan]))
    assert list(got[:5].astype(np.float64)) == [448.0, 448.0, 448.0, 448.0, -448.0]
    assert np.isnan(got[5:].astype(np.float64)).all()
    assert to_e4m3(np.array([-np.nan])).view(np.uint8)[0] == 0xFF  # the conformance poison relies on it


def test_numpy_backend_fp8_product_is_the_bf16_rounding_of_the_exact_sum():
    backend = NumpyBackend()
    rng = np.random.default_rng(5)
    a = backend.from_numpy(rng.standard_normal((23, 40)) * 4, "float8_e4m3fn")
    b = backend.from_numpy(rng.standard_normal((40, 17)), "float8_e4m3fn")
    assert a.dtype == E4M3 and b.dtype == E4M3
    c = backend.matmul(a, b)
    assert c.dtype == BFLOAT16 and c.shape == (23, 17)
    exact = a.astype(np.float64) @ b.astype(np.float64)  # fp32 sums of these are within 1 ulp
    error = np.abs(backend.to_numpy(c).astype(np.float64) - exact)
    assert np.all(error <= 2.0**-8 * np.abs(exact) + 1e-6 * np.abs(a.astype(float)) @ np.abs(b.astype(float)))
    assert backend.to_numpy(c).dtype == np.float32


def test_numpy_backend_fp8_nan_propagates_and_saturated_values_multiply():
    backend = NumpyBackend()
    a = backend.from_numpy(np.array([[1000.0, 1.0], [np.nan, 2.0], [np.inf, 0.5]]), "float8_e4m3fn")
    b = backend.from_numpy(np.array([[0.5, 0.0], [2.0, 1.0]]), "float8_e4m3fn")
    c = backend.to_numpy(backend.matmul(a, b))
    assert c[0, 0] == 448 * 0.5 + 2 and c[0, 1] == 1.0  # 1000 saturated to 448
    assert np.isnan(c[1:]).all()


def test_numpy_backend_conforms_for_fp8():
    report = check_backend(NumpyBackend(), dtypes=["float8_e4m3fn"])
    assert report.passed, [(r.check, r.detail) for r in report.failures]
    checks = {r.check for r in report.results}
    assert "fp8-conversion" in checks
    assert any("extremes" in c for c in checks) and any("nonfinite" in c for c in checks)


def test_conversion_check_fails_truncating_rounding():
    class Truncates(NumpyBackend):
        name = "wrong-fp8-truncation"

        def from_numpy(self, x, dtype):
            if dtype != "float8_e4m3fn":
                return super().from_numpy(x, dtype)
            values = np.clip(np.asarray(x, dtype=np.float64), -448, 448)
            mantissa, exponent = np.frexp(values)
            return np.ldexp(np.trunc(mantissa * 16) / 16, exponent).astype(E4M3)

    result = run_input_check(Truncates(), "fp8-conversion")
    assert not result.passed and "nearest E4M3" in result.detail


def test_conversion_check_fails_wrapping_out_of_range_values():
    class Wraps(NumpyBackend):
        name = "wrong-fp8-overflow"

        def from_numpy(self, x, dtype):
            if dtype != "float8_e4m3fn":
                return super().from_numpy(x, dtype)
            values = np.asarray(x, dtype=np.float64)
            return to_e4m3(np.where(np.abs(values) > 448, 1.0, values))

    result = run_input_check(Wraps(), "fp8-conversion")
    assert not result.passed and "out of E4M3's range" in result.detail


def test_result_dtype_and_grid_points():
    assert result_dtype("float8_e4m3fn") == "bfloat16" and result_dtype("float16") == "float16"
    assert parse_point("4096x4096x4096-float8_e4m3fn-NT") == ((4096, 4096, 4096), "float8_e4m3fn", "NT")
    points = get_grid("fp8", dtypes=["float8_e4m3fn"], layouts=["NT"])
    assert (4096, 4096, 4096) in {p.shape for p in points} and (8192, 8192, 8192) in {p.shape for p in points}


@pytest.mark.parametrize("layout", ["NN", "NT", "TN", "TT"])
def test_measure_checks_fp8_points(layout):
    from gemmzoo.measure import check, make_problem
    from gemmzoo.problems.grids import GridPoint

    problem = make_problem(NumpyBackend(), GridPoint(33, 47, 70, "float8_e4m3fn", layout))
    assert 0 < check(problem) <= 1


def test_fp8_throughput_is_judged_against_the_fp8_peak():
    from gemmzoo.measure import Measurement, Timing
    from gemmzoo.measure.device import peak_tflops
    from gemmzoo.problems.grids import GridPoint
    from gemmzoo.scale.bench import BenchResult

    assert peak_tflops("NVIDIA H100 80GB HBM3", "float8_e4m3fn") == 1979
    point = GridPoint(4096, 4096, 4096, "float8_e4m3fn", "NT")
    seconds = point.flops / 989e12  # half the fp8 peak
    measurement = Measurement("x", point, Timing(seconds, seconds, seconds, 5, "events"), 0.5)
    result = BenchResult("x", "cuda", point, "ok", measurement, peak_tflops=1979.0)
    assert result.peak_percent == pytest.approx(49.97, abs=0.05)
