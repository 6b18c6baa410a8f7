"""Checks of a large matrix done in row blocks side by side (gemmzoo.conformance.rows): the same
verdicts, figures and messages as the whole matrix at once, every element looked at."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from gemmzoo.conformance import rows
from gemmzoo.conformance.bounds import class_bound
from gemmzoo.conformance.independence import check_held
from gemmzoo.conformance.judge import CheckFailedError, compare_elements, judge_result, reference_product
from gemmzoo_numpy.backend import NumpyBackend

#: More elements than one block: the row-block paths run (M x N and M x K alike).
M, N, K = 1100, 1000, 24


def test_blocks_cover_every_row_once_in_order():
    for count, cols, block in ((1100, 1000, rows.BLOCK_ELEMENTS), (7, 3, 5), (5, 100, 1), (0, 4, 8)):
        blocks = rows.row_blocks(count, cols, block)
        covered = [i for part in blocks for i in range(count)[part]]
        assert covered == list(range(count))
        assert all(part.stop - part.start >= 1 for part in blocks) or count == 0


def test_by_rows_keeps_the_order_of_the_blocks():
    got = rows.by_rows(lambda part: (part.start, part.stop), 10, 3, block=6)
    assert got == [(0, 2), (2, 4), (4, 6), (6, 8), (8, 10)]


@pytest.fixture(scope="module")
def product():
    rng = np.random.default_rng(11)
    a = rng.standard_normal((M, K)).astype(np.float32)
    b = rng.standard_normal((K, N)).astype(np.float32)
    return a, b, (a @ b).astype(np.float32)


def test_a_large_result_is_judged_by_rows_with_the_wholes_figures(product):
    a, b, c = product
    by_rows = judge_result(NumpyBackend(), "float32", a, c, a, b)
    ref, magnitude = reference_product(a, b)
    ratio, error = compare_elements(c, ref, class_bound("componentwise", "float32", a, b, ref, magnitude))
    assert by_rows.error_ratio == ratio and 0 < ratio <= 1
    assert by_rows.max_abs_error == error.max()
    assert by_rows.rel_error == pytest.approx(np.linalg.norm(error) / np.linalg.norm(ref), rel=1e-12)
    np.testing.assert_array_equal(by_rows.host, c)


@pytest.mark.parametrize("where", [(0, 0), (M // 2, 7), (M - 1, N - 1)])
def test_one_wrong_element_anywhere_fails_with_the_wholes_message(product, where):
    a, b, c = product
    wrong = c.copy()
    wrong[where] += np.float32(1e-2) * (1 + abs(wrong[where]))
    with pytest.raises(CheckFailedError, match=rf"1 of {M * N} elements outside the error bound; "
                                               rf"first at \({where[0]}, {where[1]}\)"):
        judge_result(NumpyBackend(), "float32", a, wrong, a, b)


def test_a_nan_in_one_block_fails_with_the_wholes_message(product):
    a, b, c = product
    wrong = c.copy()
    wrong[M - 3, 5] = np.nan
    with pytest.raises(CheckFailedError, match=rf"NaN pattern differs at 1 of {M * N} elements; "
                                               rf"first at \({M - 3}, 5\)"):
        judge_result(NumpyBackend(), "float32", a, wrong, a, b)


def test_an_exact_problem_stays_exact_by_rows():
    rng = np.random.default_rng(3)
    a = rng.integers(-2, 3, size=(M, K)).astype(np.float32)
    b = rng.integers(-2, 3, size=(K, N)).astype(np.float32)
    c = (a.astype(np.float64) @ b).astype(np.float32)
    assert judge_result(NumpyBackend(), "float32", a, c, a, b).error_ratio == 0
    c[M - 1, 0] += 1  # an exact product must be exact: one off by one fails
    with pytest.raises(CheckFailedError, match=rf"first at \({M - 1}, 0\)"):
        judge_result(NumpyBackend(), "float32", a, c, a, b)


@pytest.mark.parametrize(("dtype", "kind"), [("float16", np.float16), ("bfloat16", ml_dtypes.bfloat16),
                                             ("float32", np.float32)])
def test_held_values_of_a_large_operand_by_rows(dtype, kind):
    caller = np.random.default_rng(5).standard_normal((M, N))
    held = caller.astype(kind)
    check_held("A", caller, held, dtype)  # rounded once: passes
    through = caller.astype(np.float32).astype(kind)
    check_held("A", caller, through, dtype)  # through float32: passes too
    off = held.copy()
    off[M - 2, N - 3] = kind(float(off[M - 2, N - 3]) * 1.5)
    with pytest.raises(CheckFailedError, match=rf"A\[{M - 2}, {N - 3}\].*1 of {M * N} elements differ"):
        check_held("A", caller, off, dtype)


def test_held_values_truncated_in_one_block_are_caught():
    caller = np.random.default_rng(6).standard_normal((M, N))
    held = caller.astype(ml_dtypes.bfloat16)
    start = rows.row_blocks(M, N)[1].start
    bits = caller[start].astype(np.float32).view(np.uint32) & np.uint32(0xFFFF0000)  # truncated, not rounded
    held[start] = bits.view(np.float32).astype(ml_dtypes.bfloat16)
    with pytest.raises(CheckFailedError, match=rf"A\[{start}, "):
        check_held("A", caller, held, "bfloat16")


def test_same_values_finds_one_changed_element_and_equal_nans():
    x = np.random.default_rng(8).standard_normal((M, N))
    x[3, 3] = np.nan
    y = x.copy()
    assert rows.same_values(x, y)
    y[M - 1, N - 1] = 0.0
    assert not rows.same_values(x, y)
    assert not rows.same_values(x, y[:-1])


class _Normwise(NumpyBackend):
    """The numpy backend, declaring the weaker normwise accuracy class."""

    accuracy = "normwise"


def test_a_normwise_backend_is_judged_by_rows_against_the_whole_matrix_scale(product):
    a, b, c = product
    by_rows = judge_result(_Normwise(), "float32", a, c, a, b)
    ref, magnitude = reference_product(a, b)
    ratio, _error = compare_elements(c, ref, class_bound("normwise", "float32", a, b, ref, magnitude))
    assert by_rows.error_ratio == ratio and "normwise bound" in by_rows.detail
    wrong = c.copy()
    wrong[M - 1, 2] += np.float32(0.5) * (1 + abs(wrong[M - 1, 2]))  # far beyond even the normwise bound
    with pytest.raises(CheckFailedError, match=rf"first at \({M - 1}, 2\)"):
        judge_result(_Normwise(), "float32", a, wrong, a, b)
