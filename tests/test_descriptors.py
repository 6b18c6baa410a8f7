"""TMA descriptors made per call from one validated per plan (gemmzoo_triton.core.descriptors)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from triton.tools.tensor_descriptor import TensorDescriptor  # noqa: E402

from gemmzoo_triton.core.descriptors import reusing  # noqa: E402


def _counting():
    made = []

    def make(view):
        made.append(view)
        return TensorDescriptor(view, [24, 40], [view.stride(0), 1], [8, 16])

    return made, make


def _fields(descriptor):
    return {name: value for name, value in vars(descriptor).items() if name != "base"}


def test_later_descriptors_copy_the_first_over_their_own_base():
    made, make = _counting()
    describe = reusing(make)
    operands = [torch.randn(24, 40, dtype=torch.float16) for _ in range(3)]
    descriptors = [describe(x) for x in operands]
    assert len(made) == 1  # only the first was made (and validated) in full
    for x, d in zip(operands, descriptors, strict=True):
        full = TensorDescriptor(x, [24, 40], [x.stride(0), 1], [8, 16])
        assert type(d) is TensorDescriptor and d.base is x and _fields(d) == _fields(full)
    assert len({id(d) for d in descriptors}) == 3


def test_a_base_of_another_row_stride_or_unaligned_start_is_described_in_full():
    made, make = _counting()
    describe = reusing(make)
    describe(torch.randn(24, 40, dtype=torch.float16))
    wide = torch.randn(24, 48, dtype=torch.float16)[:, :40]  # rows of 48: another row stride
    d = describe(wide)
    assert len(made) == 2 and d.strides == [48, 1] and d.base is wide
    flat = torch.randn(24 * 40 + 1, dtype=torch.float16)
    unaligned = flat[1:].view(24, 40)  # starts 2 bytes past an aligned address
    with pytest.raises(AssertionError, match="16-byte aligned"):
        describe(unaligned)
    assert len(made) == 3
