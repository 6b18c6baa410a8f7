"""The judge's exact-IEEE reference: the same NaN/Inf pattern and values as elementwise products
summed plainly over all of A·B, computed only where non-finite values reach, in bounded memory."""

from __future__ import annotations

import numpy as np
import pytest

from gemmzoo.conformance import judge
from gemmzoo.conformance.judge import plain_product, reference_product


def _full_plain(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        return (a64[:, :, None] * b64[None, :, :]).sum(axis=1)


def _planted(rng: np.random.Generator, m: int, n: int, k: int, dtype: type) -> tuple[np.ndarray, np.ndarray]:
    a = rng.standard_normal((m, k)).astype(dtype)
    b = rng.standard_normal((k, n)).astype(dtype)
    for x in (a, b):
        for value in (np.nan, np.inf, -np.inf, np.inf):
            x[rng.integers(x.shape[0]), rng.integers(x.shape[1])] = value
    a[rng.integers(m), :] = 0  # 0·Inf where an Inf column of B meets it: NaN under IEEE rules
    return a, b


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_exact_reference_matches_plain_sums_everywhere(seed, dtype):
    rng = np.random.default_rng(seed)
    m, n, k = rng.integers(2, 40, size=3)
    a, b = _planted(rng, m, n, k, dtype)
    ref, magnitude = reference_product(a, b, exact_ieee=True)
    expected = _full_plain(a, b)
    np.testing.assert_array_equal(np.isnan(ref), np.isnan(expected))
    np.testing.assert_array_equal(np.isposinf(ref), np.isposinf(expected))
    np.testing.assert_array_equal(np.isneginf(ref), np.isneginf(expected))
    finite = np.isfinite(expected)
    np.testing.assert_allclose(ref[finite], expected[finite], rtol=1e-12, atol=1e-12)
    assert np.isfinite(magnitude).all()


def test_plain_product_slices_k_under_its_memory_bound():
    rng = np.random.default_rng(7)
    a, b = _planted(rng, 9, 11, 300, np.float32)
    sliced = plain_product(a, b, chunk=9 * 11 * 7)  # slices of 7 along K
    expected = _full_plain(a, b)
    np.testing.assert_array_equal(np.isnan(sliced), np.isnan(expected))
    finite = np.isfinite(expected)
    np.testing.assert_array_equal(np.isinf(sliced), np.isinf(expected))
    np.testing.assert_allclose(sliced[finite], expected[finite], rtol=1e-12, atol=1e-12)


def test_a_large_problem_with_a_few_non_finite_values_stays_small(monkeypatch):
    """M·K·N = 2.4e9 (19 GB as one temporary): only the affected rows and columns are summed."""
    rng = np.random.default_rng(3)
    m, n, k = 1200, 1000, 2000
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    a[5, 17], b[40, 900] = np.inf, np.nan
    sizes = []
    original = judge.plain_product

    def counting(x: np.ndarray, y: np.ndarray) -> np.ndarray:
        sizes.append(x.shape[0] * y.shape[1])
        return original(x, y)

    monkeypatch.setattr(judge, "plain_product", counting)
    ref, _ = reference_product(a, b, exact_ieee=True)
    assert sizes == [n, m]  # one row of A, one column of B
    assert np.isnan(ref[:, 900]).all()
    row = ref[5, np.arange(n) != 900]
    sign = np.sign(b[17, np.arange(n) != 900])
    np.testing.assert_array_equal(row, sign * np.inf)  # +Inf times each B[17, j], summed with finite terms
    rest = np.ones((m, n), dtype=bool)
    rest[5, :], rest[:, 900] = False, False
    expected = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_array_equal(ref[rest], expected[rest])


@pytest.mark.parametrize("integral", [False, True])
@pytest.mark.parametrize("accuracy", ["componentwise", "normwise"])
def test_b_is_copied_back_only_when_its_values_are_needed(monkeypatch, integral, accuracy):
    """With the reference given (computed where the operands are), the judge reads B's host
    values only to tell an exact product (an integral A) or for the normwise class's scale."""
    from gemmzoo.conformance import bounds

    backend = _numpy_backend()
    monkeypatch.setattr(judge, "accuracy_of", lambda _backend: accuracy)
    rng = np.random.default_rng(3)
    a = rng.integers(-3, 4, size=(7, 5)) if integral else rng.standard_normal((7, 5))
    a = a.astype(np.float32)
    b = rng.integers(-3, 4, size=(5, 6)).astype(np.float32)
    reference = bounds.reference(a, b)
    copies = []

    def b_host() -> np.ndarray:
        copies.append(1)
        return b

    c = backend.matmul(a, b)
    verdict = judge.judge_result(backend, "float32", a, c, a, b_host, reference=reference)
    assert len(copies) == (1 if integral or accuracy == "normwise" else 0)
    np.testing.assert_array_equal(verdict.host, c)
    wrong = c.copy()
    wrong[rng.integers(7), rng.integers(6)] += 1.0  # one wrong element is still caught
    with pytest.raises(judge.CheckFailedError, match="outside the error bound"):
        judge.judge_result(backend, "float32", a, wrong, a, b_host, reference=reference)


def _numpy_backend():
    import gemmzoo

    return gemmzoo.get_backend("numpy")
