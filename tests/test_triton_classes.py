"""The Triton kernels of the problem classes: triton-fp8's scaled kernel (block-wise scales in the
accumulator loop, row-wise and tensor-wise in the epilogue) and the persistent grouped kernel of
triton-grouped and triton-fp8. Under Triton's interpreter here (fp16/fp32 for the structure, fp8
widened exactly); on a GPU with ``-m gpu``."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

import gemmzoo  # noqa: E402
from gemmzoo.conformance.class_cases import class_cases, run_class_case  # noqa: E402
from gemmzoo.errors import GemmInputError  # noqa: E402
from gemmzoo.problems.class_math import dequantized, group_bounds  # noqa: E402
from gemmzoo.problems.classes import scale_shapes  # noqa: E402


def _available(name):
    backend = gemmzoo.get_backend(name)
    reason = backend.unavailable_reason()
    if reason is not None:
        pytest.skip(f"{name}: {reason}")
    return backend


@pytest.mark.parametrize("scaling, shape", [("tensorwise", (20, 36, 40)), ("rowwise", (33, 47, 64)),
                                            ("blockwise", (40, 200, 300))])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_scaled_kernel_structure_on_plain_floats(scaling, shape, dtype):
    _available("triton-fp8")
    from gemmzoo_triton.fp8 import scaled_kernel

    m, n, k = shape
    gen = torch.Generator().manual_seed(11)
    a = torch.randn(m, k, generator=gen).to(getattr(torch, dtype))
    b = torch.randn(k, n, generator=gen).to(getattr(torch, dtype))
    sa_shape, sb_shape = scale_shapes(scaling, m, n, k)
    sa, sb = torch.rand(sa_shape, generator=gen) + 0.5, torch.rand(sb_shape, generator=gen) + 0.5
    c = torch.empty(m, n, dtype=torch.float32, device=a.device)
    scaled_kernel.launch(a, b, sa, sb, scaling, c)
    deq_a = dequantized(a.float().numpy(), sa.numpy(), scaling, "A")
    ref = deq_a @ dequantized(b.float().numpy(), sb.numpy(), scaling, "B")
    np.testing.assert_allclose(c.numpy(), ref, rtol=1e-5, atol=1e-4 * np.abs(ref).max())


@pytest.mark.parametrize("name, kinds", [("triton-fp8", {"scaled", "grouped"}),
                                         ("triton-grouped", {"grouped"})])
def test_triton_backends_pass_their_class_cases(name, kinds):
    backend = _available(name)
    cases = [c for c in class_cases(backend) if c.kind in kinds]
    assert {c.kind for c in cases} == kinds
    for case in cases:
        run_class_case(backend, case)  # raises with what is wrong


def test_grouped_kernel_leaves_rows_of_other_groups_alone_and_checks_offsets():
    backend = _available("triton-grouped")
    gen = torch.Generator().manual_seed(12)
    a, b = torch.randn(9, 24, generator=gen), torch.randn(4, 24, 10, generator=gen)
    ends = [2, 2, 7, 9]
    c = backend.grouped_mm(a, b, np.asarray(ends, np.int32))
    for g, (start, stop) in enumerate(group_bounds(ends)):
        torch.testing.assert_close(c[start:stop], a[start:stop] @ b[g], rtol=1e-5, atol=1e-5)
    with pytest.raises(GemmInputError, match=r"triton-grouped: grouped_mm .*\(9, 24\).*must not decrease"):
        backend.grouped_mm(a, b, np.asarray([3, 2, 7, 9], np.int32))


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["triton-fp8", "triton-grouped"])
def test_triton_class_cases_on_the_gpu(name):
    backend = _available(name)
    for case in class_cases(backend):
        run_class_case(backend, case)


def test_grouped_fp8_operands_are_padded_to_aligned_rows():
    from gemmzoo_triton.core.grouped_mm_kernel import _k_major_padded

    gen = torch.Generator().manual_seed(13)
    a = (torch.randn(6, 20, generator=gen) * 4).to(torch.float8_e4m3fn)
    b = (torch.randn(2, 20, 7, generator=gen) * 4).to(torch.float8_e4m3fn)
    x, y = _k_major_padded(a, b)
    assert tuple(x.shape) == (6, 32) and tuple(y.shape) == (2, 32, 7) and y.stride() == (224, 1, 32)
    for g in range(2):
        torch.testing.assert_close(x.float() @ y[g].float(), a.float() @ b[g].float())
