"""triton-fp8's route for sizes that keep a problem off the TMA kernels: zero-padded copies."""

from __future__ import annotations

import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from gemmzoo.contract.fp8 import e4m3_to_float32, to_e4m3  # noqa: E402
from gemmzoo_triton.fp8.backend import PAD_MIN_WORK, _padded_plan, padding_pays  # noqa: E402


class _Recording:
    """Stands in for the backend: its plan multiplies the padded operands it is given, exactly."""

    def __init__(self):
        self.seen = []

    def prepare(self, x, y):
        self.seen.append((tuple(x.shape), tuple(y.shape), y.stride()))
        self.operands = (x, y)

        def run(x, y):
            return (x.float() @ y.float()).to(torch.bfloat16)

        return run


def _fp8(values):
    return torch.from_numpy(to_e4m3(values).view(np.uint8)).view(torch.float8_e4m3fn)


def test_padded_operands_give_the_product_of_the_unpadded_ones():
    """K padded to 16 and N to 8 by one copy launch into a kept buffer (zeros in the padding, also
    where the buffer held NaN bytes), the aligned plan made once, C the M×N view; new operands
    each call."""
    rng = np.random.default_rng(3)
    m, n, k = 5, 13, 21
    device = "cpu" if os.environ.get("TRITON_INTERPRET") == "1" else "cuda"  # where the copy kernel runs

    def operands():
        a_np, b_np = rng.standard_normal((m, k)) * 4, rng.standard_normal((k, n)) * 4
        return a_np, b_np, _fp8(a_np).to(device), _fp8(b_np).to(device)

    *_, like_a, like_b = operands()
    backend = _Recording()
    plan = _padded_plan(backend, like_a, like_b)
    for call in range(3):
        a_np, b_np, a, b = operands()
        c = plan(a, b)
        if call == 0:  # NaN bytes in the kept buffer: every copy writes its zeros again
            x, y = backend.operands
            x.view(torch.uint8).fill_(0x7F)
            y.view(torch.uint8).fill_(0x7F)
        assert backend.seen == [((5, 32), (32, 16), (1, 32))]  # K to 16, N to 8, B column-major
        assert tuple(c.shape) == (m, n)
        expected = e4m3_to_float32(to_e4m3(a_np)) @ e4m3_to_float32(to_e4m3(b_np))
        np.testing.assert_allclose(c.float().cpu().numpy(), expected, rtol=2**-8, atol=1e-6)


def test_padding_is_for_misaligned_rows_of_enough_work_on_a_gpu():
    cuda = torch.device("cuda")  # a device object only: nothing runs on it
    assert not padding_pays(3000, 5000, 7000, torch.device("cpu"))
    # under the TMA kernels' threshold too: the pointer kernel's unaligned rows are the slow part
    assert padding_pays(777, 5555, 1234, cuda) and padding_pays(2047, 4093, 1021, cuda)
    assert padding_pays(3000, 5000, 7000, cuda) and padding_pays(4096, 4092, 4096, cuda)  # N not of 8
    assert not padding_pays(2048, 4096, 1024, cuda)  # aligned already
    assert not padding_pays(1000, 1000, 1000 + 1, cuda) and 1000 * 1000 * 1001 <= PAD_MIN_WORK


@pytest.mark.parametrize(("a_layout", "b_layout"), [("row", "column"), ("row", "row"), ("column", "row")])
def test_k_major_copies_keep_the_product_and_align_the_rows(a_layout, b_layout):
    """One copy each, from any layout, into K-major operands with K zero-padded to 32: A row-major
    and B column-major, the values exact and zeros past K on every call (the buffer is kept from
    call to call, and starts as NaN bytes)."""
    from gemmzoo_triton.fp8.backend import k_major_copies

    rng = np.random.default_rng(4)
    device = "cpu" if os.environ.get("TRITON_INTERPRET") == "1" else "cuda"  # where the copy kernel runs

    def operands():
        a_np, b_np = rng.standard_normal((3, 21)) * 4, rng.standard_normal((21, 5)) * 4
        a = _fp8(a_np) if a_layout == "row" else _fp8(np.ascontiguousarray(a_np.T)).t()
        b = _fp8(b_np) if b_layout == "row" else _fp8(np.ascontiguousarray(b_np.T)).t()
        return a_np, b_np, a.to(device), b.to(device)

    *_, like_a, like_b = operands()
    copies = k_major_copies(like_a, like_b)
    seen = set()
    for _ in range(2):  # new values into the kept buffer
        a_np, b_np, a, b = operands()
        x, y, _ = copies(a, b)
        if not seen:  # NaN bytes where the zeros go: each copy writes them
            x.view(torch.uint8).fill_(0x7F)
            y.view(torch.uint8).fill_(0x7F)
            x, y, _ = copies(a, b)
        assert tuple(x.shape) == (3, 32) and x.stride() == (32, 1)
        assert tuple(y.shape) == (32, 5) and y.stride() == (1, 32)
        assert torch.equal(x[:, :21].view(torch.uint8), a.view(torch.uint8))
        assert torch.equal(y[:21].view(torch.uint8), b.view(torch.uint8))
        assert not x.view(torch.uint8)[:, 21:].any() and not y.view(torch.uint8)[21:].any()
        expected = e4m3_to_float32(to_e4m3(a_np)) @ e4m3_to_float32(to_e4m3(b_np))
        np.testing.assert_allclose((x.float() @ y.float()).cpu().numpy(), expected, rtol=1e-6, atol=1e-6)
        seen.add(x.data_ptr())
    assert len(seen) == 1
