"""The torch backends' host copies (``to_numpy``): a C-ordered array of the values, never the
caller's own memory, in float32 for the 16-bit and fp8 types."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import gemmzoo  # noqa: E402


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("transposed", [False, True])
def test_to_numpy_is_a_c_ordered_copy(dtype, transposed):
    backend = gemmzoo.get_backend("torch-cpu")
    values = np.random.default_rng(7).standard_normal((6, 9))
    y = torch.from_numpy(values).to(dtype)
    y = y.T.contiguous().T if transposed else y  # a column-major view when transposed
    expected = y.float().numpy() if dtype in (torch.bfloat16, torch.float16) else y.numpy()
    host = backend.to_numpy(y)
    assert host.flags.c_contiguous and host.flags.writeable
    assert host.dtype == expected.dtype and np.array_equal(host, expected)
    before = y.clone()
    host += 1.0  # the copy is the backend's own: the tensor does not change
    assert torch.equal(y, before)
