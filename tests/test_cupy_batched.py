"""CuPy's batched bfloat16 route (``cupy.matmul`` has no bfloat16 kernel), run here with NumPy
standing in for CuPy: the same broadcasting, one product per matrix of the batch."""

from __future__ import annotations

import sys

import numpy as np
import pytest


@pytest.mark.parametrize(("a_shape", "b_shape"), [
    ((7, 5), (2, 5, 6)),
    ((3, 1, 4, 5), (2, 5, 6)),
    ((2, 3, 4, 5), (2, 3, 5, 1)),
])
def test_one_dot_per_matrix_broadcasts_as_matmul(monkeypatch, a_shape, b_shape):
    from gemmzoo_cupy.backend import _dot_per_matrix

    monkeypatch.setitem(sys.modules, "cupy", np)
    rng = np.random.default_rng(11)
    a, b = rng.standard_normal(a_shape), rng.standard_normal(b_shape)
    got = _dot_per_matrix(a, b)
    expected = np.matmul(a, b)
    assert got.shape == expected.shape
    np.testing.assert_allclose(got, expected, rtol=1e-13, atol=1e-13)
