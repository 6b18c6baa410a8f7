"""triton-fp8: the conformance suite under Triton's interpreter here, on an fp8 GPU there."""

from __future__ import annotations

import numpy as np
import pytest

import gemmzoo
from gemmzoo.conformance import check_backend

pytest.importorskip("triton")
torch = pytest.importorskip("torch")


def _backend():
    backend = gemmzoo.get_backend("triton-fp8")
    reason = backend.unavailable_reason()
    if reason is not None:
        pytest.skip(f"triton-fp8 unavailable: {reason}")
    return backend


def test_declares_fp8_only():
    assert gemmzoo.get_backend("triton-fp8").dtypes == frozenset({"float8_e4m3fn"})


def test_conforms():
    report = check_backend(_backend())
    assert report.passed, [(r.check, r.detail) for r in report.failures]


def test_nan_of_a_propagates_along_its_row_and_b_along_its_column():
    backend = _backend()
    rng = np.random.default_rng(9)
    a_values, b_values = rng.standard_normal((20, 40)), rng.standard_normal((40, 24))
    a_values[4, 7] = np.nan
    b_values[11, 9] = np.nan
    c = backend.to_numpy(backend.matmul(backend.from_numpy(a_values, "float8_e4m3fn"),
                                        backend.from_numpy(b_values, "float8_e4m3fn")))
    expected = np.zeros(c.shape, dtype=bool)
    expected[4, :] = True
    expected[:, 9] = True
    np.testing.assert_array_equal(np.isnan(c), expected)


def test_a_bfloat16_result_on_the_operands_device():
    backend = _backend()
    a = backend.from_numpy(np.ones((3, 5)), "float8_e4m3fn")
    c = backend.matmul(a, backend.from_numpy(np.full((5, 2), 0.5), "float8_e4m3fn"))
    assert c.dtype == torch.bfloat16 and c.device == a.device
    assert backend.to_numpy(c).tolist() == [[2.5, 2.5]] * 3
