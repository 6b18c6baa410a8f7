"""The blocking itself: tiles that do not divide the shapes, views, and registration."""

from __future__ import annotations

import numpy as np
import pytest
from gemmzoo_blocked import BlockedBackend

import gemmzoo
from gemmzoo.plugins.registry import get_registry

SHAPES = [(1, 1, 1), (5, 7, 3), (13, 11, 17), (16, 24, 8), (0, 4, 3), (4, 0, 3), (4, 3, 0)]
BLOCKS = [(1, 1, 1), (4, 5, 3), (16, 16, 16), (128, 128, 128)]


@pytest.mark.parametrize("blocks", BLOCKS, ids=lambda b: "x".join(map(str, b)))
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_matches_float64_reference(dtype, shape, blocks):
    m, n, k = shape
    backend = BlockedBackend(*blocks)
    rng = np.random.default_rng(sum(shape) * 31 + sum(blocks))
    a_host, b_host = rng.standard_normal((m, k)), rng.standard_normal((k, n))
    a, b = backend.from_numpy(a_host, dtype), backend.from_numpy(b_host, dtype)

    c = backend.matmul(a, b)

    assert c.shape == (m, n) and c.dtype == np.dtype(dtype)
    reference = a.astype(np.float64) @ b.astype(np.float64)
    tolerance = (1e-5 if dtype == "float32" else 1e-13) * np.sqrt(max(k, 1))
    magnitude = np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64))
    assert np.all(np.abs(c - reference) <= tolerance * magnitude + 1e-30)


def test_views_are_read_through_their_strides():
    backend = BlockedBackend(3, 4, 5)
    rng = np.random.default_rng(11)
    big_a = backend.from_numpy(rng.standard_normal((40, 30)), "float64")
    big_b = backend.from_numpy(rng.standard_normal((26, 50)), "float64")
    a = big_a[1::2, ::3]  # 20 x 10, every other row and every third column
    b = big_b[::2, 5::3][:10]  # 10 x 15
    b_t = backend.from_numpy(rng.standard_normal((15, 10)), "float64").T  # a transposed view
    assert not a.flags.c_contiguous and not b.flags.c_contiguous and not b_t.flags.c_contiguous

    for right in (b, b_t):
        c = backend.matmul(a, right)
        expected = np.ascontiguousarray(a) @ np.ascontiguousarray(right)
        np.testing.assert_allclose(c, expected, rtol=1e-12, atol=1e-12)


def test_float32_accumulates_in_float32_in_k_order():
    # With block_k = 1 every step adds one rounded fp32 rank-1 product to an fp32 tile, so the
    # result must equal that sum computed directly, bit for bit.
    backend = BlockedBackend(4, 4, 1)
    rng = np.random.default_rng(3)
    a = backend.from_numpy(rng.standard_normal((9, 50)), "float32")
    b = backend.from_numpy(rng.standard_normal((50, 7)), "float32")
    expected = np.zeros((9, 7), dtype=np.float32)
    for p in range(50):
        expected += np.outer(a[:, p], b[p, :])

    c = backend.matmul(a, b)

    assert c.dtype == np.float32
    assert np.array_equal(c, expected)
    assert not np.array_equal(c, (a.astype(np.float64) @ b.astype(np.float64)).astype(np.float32))


def test_operands_are_left_unchanged_and_c_is_new():
    backend = BlockedBackend(2, 2, 2)
    rng = np.random.default_rng(5)
    a = backend.from_numpy(rng.standard_normal((6, 5)), "float32")
    b = backend.from_numpy(rng.standard_normal((5, 7)), "float32")
    a_before, b_before = a.copy(), b.copy()

    c = backend.matmul(a, b)

    assert np.array_equal(a, a_before) and np.array_equal(b, b_before)
    assert not np.shares_memory(c, a) and not np.shares_memory(c, b)


@pytest.mark.parametrize("bad", [0, -1, 2.5, True, None])
def test_block_sizes_must_be_positive_ints(bad):
    with pytest.raises(ValueError, match="numpy-blocked: block_k must be a positive int"):
        BlockedBackend(block_k=bad)


def test_registered_through_the_entry_point():
    backend = gemmzoo.get_backend("numpy-blocked")
    provider = get_registry().provider("numpy-blocked")
    assert isinstance(backend, BlockedBackend)
    assert backend.unavailable_reason() is None
    assert provider.distribution == "gemmzoo-blocked"
