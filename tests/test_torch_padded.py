"""torch-padded: its plan (which operands are copied, into what) and its zero-padding copy.

The plan runs here with ``torch.mm`` on CPU tensors and ``torch.nn.functional.pad`` copies (the
path taken without Triton); the Triton copy kernel runs under the interpreter. On a GPU the
backend's own plans run through the conformance suite and ``test_gpu_backends``.
"""

from __future__ import annotations

import pytest

import gemmzoo

torch = pytest.importorskip("torch")

from gemmzoo_torch.padded import PaddedCopy, PaddedPair, padded_plan, rounded  # noqa: E402
from gemmzoo_triton.core.aligned import padded as padded_length  # noqa: E402


def operand(rows: int, cols: int, layout: str, dtype, seed: int):
    """A random normal rows x cols tensor: ``N`` row-major, ``T`` column-major, ``S`` a view of
    every other row and column of a larger tensor."""
    generator = torch.Generator().manual_seed(seed)
    if layout == "S":
        larger = torch.randn(2 * rows + 1, 2 * cols + 1, generator=generator, dtype=torch.float64)
        return larger[1::2, 1::2].to(dtype)
    values = torch.randn(rows, cols, generator=generator, dtype=torch.float64)
    return (values.T.contiguous().T if layout == "T" else values).to(dtype)


def calls(launch):
    """``launch`` and a record of the shapes and strides it was called with."""
    seen = []

    def recorded(a, b):
        seen.append((tuple(a.shape), a.stride(), tuple(b.shape), b.stride()))
        return launch(a, b)

    return recorded, seen


@pytest.mark.parametrize("layout", ["NN", "TN", "NT", "TT", "SN", "NS"])
@pytest.mark.parametrize(("m", "n", "k"), [(13, 11, 7), (16, 24, 9), (9, 16, 24), (16, 24, 32), (1, 5, 3)])
def test_plan_matches_the_float64_product_in_every_layout(layout, m, n, k):
    """Every element of C equals the float64 product within float32 rounding; cuBLAS (here
    torch.mm) only ever sees K and N padded to 16 bytes, with leading dimensions to match."""
    a = operand(m, k, layout[0], torch.float32, 1)
    b = operand(k, n, layout[1], torch.float32, 2)
    a_before, b_before = a.clone(), b.clone()
    launch, seen = calls(torch.mm)
    run = padded_plan(a, b, launch)
    c = run(a, b)
    expected = a.double() @ b.double()
    assert c.shape == (m, n) and c.dtype == torch.float32
    bound = 1e-5 * (a.double().abs() @ b.double().abs()) + 1e-30
    assert ((c.double() - expected).abs() <= bound).all()
    assert torch.equal(a, a_before) and torch.equal(b, b_before)
    for a_shape, a_strides, b_shape, b_strides in seen:
        assert a_shape[1] % 4 == 0 and b_shape[1] % 4 == 0  # K and N in whole 16-byte units
        assert max(a_strides) % 4 == 0 and max(b_strides) % 4 == 0
        assert 1 in a_strides and 1 in b_strides
    torch.testing.assert_close(run(a, b), c, rtol=0, atol=0)  # the same problem again: same bits


def test_plan_is_the_launcher_itself_when_nothing_needs_padding():
    a, b = operand(9, 16, "N", torch.float16, 1), operand(16, 24, "T", torch.float16, 2)
    assert padded_plan(a, b, torch.mm) is torch.mm  # M is free for a row-major A
    empty = operand(0, 16, "N", torch.float16, 1)
    assert padded_plan(empty, b, torch.mm) is torch.mm


def test_the_launcher_is_planned_for_the_padded_operands_cublas_gets():
    """``launcher`` sees operands shaped and strided as the calls' padded copies (so a per-problem
    decision such as the precision probe is made for the product cuBLAS runs), once per plan."""
    a, b = operand(13, 7, "N", torch.float32, 1), operand(7, 9, "N", torch.float32, 2)
    planned = []

    def launcher(x, y):
        planned.append((tuple(x.shape), x.stride(), tuple(y.shape), y.stride()))
        return torch.mm

    launch, seen = calls(torch.mm)
    run = padded_plan(a, b, launch, launcher=launcher)
    c = run(a, b)
    assert planned == [((13, 32), (32, 1), (32, 32), (32, 1))] and not seen  # launcher's launch runs
    bound = 1e-5 * (a.double().abs() @ b.double().abs())
    assert ((c.double() - a.double() @ b.double()).abs() <= bound).all()
    aligned_a, aligned_b = operand(13, 4, "N", torch.float32, 3), operand(4, 8, "N", torch.float32, 4)
    assert padded_plan(aligned_a, aligned_b, launch, launcher=lambda x, y: "unpadded") == "unpadded"


def test_only_the_operands_that_need_it_are_copied():
    """K aligned but N odd: only B is copied, its N rounded up to 128 bytes (K stays: A is not
    copied); K odd: both are, and K too is rounded up to 128 bytes."""
    a, b = operand(5, 8, "N", torch.float16, 1), operand(8, 9, "N", torch.float16, 2)
    launch, seen = calls(torch.mm)
    c = padded_plan(a, b, launch)(a, b)
    assert seen[0][0] == (5, 8) and seen[0][1] == a.stride()  # A as it was
    assert seen[0][2] == (8, 64)
    assert c.shape == (5, 9) and not c.is_contiguous() and c.stride() == (64, 1)
    torch.testing.assert_close(c.float(), a.float() @ b.float(), rtol=2e-3, atol=2e-3)

    a, b = operand(5, 9, "N", torch.float16, 3), operand(9, 16, "N", torch.float16, 4)
    launch, seen = calls(torch.mm)
    c = padded_plan(a, b, launch)(a, b)
    assert seen[0][0] == (5, 64) and seen[0][2] == (64, 64)
    assert c.shape == (5, 16)
    torch.testing.assert_close(c.float(), a.float() @ b.float(), rtol=2e-3, atol=2e-3)


def test_a_column_major_a_keeps_its_layout_and_c_is_cut_in_m_too():
    a, b = operand(13, 7, "T", torch.float32, 1), operand(7, 5, "N", torch.float32, 2)
    launch, seen = calls(torch.mm)
    c = padded_plan(a, b, launch)(a, b)
    (a_shape, a_strides, b_shape, _), = seen
    assert a_shape == (16, 32) and a_strides == (1, 16)  # column-major, M and K padded
    assert b_shape == (32, 32)
    assert c.shape == (13, 5)
    torch.testing.assert_close(c, a @ b, rtol=1e-5, atol=1e-5)


def test_padding_is_zeros_even_where_the_buffer_held_nan():
    """The copies write zeros, not whatever memory held: NaN in a reused block would otherwise
    reach C through 0 x NaN."""
    x = operand(5, 7, "N", torch.float16, 3)
    copy = PaddedCopy(x, 5, 8, column_major=False)
    padded = copy(x)
    assert padded.shape == (5, 8) and torch.equal(padded[:, :7], x) and (padded[:, 7] == 0).all()


def test_tf32_operands_come_and_go_wrapped():
    from gemmzoo import TF32Array

    a, b = operand(6, 5, "N", torch.float32, 1), operand(5, 3, "N", torch.float32, 2)

    def launch(x, y):
        assert isinstance(x, TF32Array) and isinstance(y, TF32Array)
        return TF32Array(torch.mm(x.data, y.data))

    c = padded_plan(TF32Array(a), TF32Array(b), launch, tf32=True)(TF32Array(a), TF32Array(b))
    assert isinstance(c, TF32Array) and c.data.shape == (6, 3)
    torch.testing.assert_close(c.data, a @ b, rtol=1e-5, atol=1e-5)


def test_copied_lengths_are_rounded_to_128_byte_units():
    assert [rounded(n, 2) for n in (1, 64, 65, 1025, 4097)] == [64, 64, 128, 1088, 4160]
    assert [rounded(n, 4) for n in (1, 32, 33)] == [32, 32, 64]
    assert rounded(3, 256) == 3


def test_padded_length_counts_16_byte_units():
    assert [padded_length(n, 2) for n in (0, 1, 8, 9, 4097)] == [0, 8, 8, 16, 4104]
    assert [padded_length(n, 4) for n in (3, 4, 5)] == [4, 4, 8]
    assert padded_length(3, 8) == 4


def test_backend_is_registered_and_needs_cuda():
    backend = gemmzoo.get_backend("torch-padded")
    assert backend.device == "cuda"
    assert backend.dtypes == {"float16", "bfloat16", "float32", "tf32", "float64"}
    if not torch.cuda.is_available():
        assert "CUDA" in backend.unavailable_reason()
    # its copies are Triton kernels where Triton is installed: its suite compiles, torch's does not
    import importlib.util

    assert backend.suite_compiles is (importlib.util.find_spec("triton") is not None)
    assert gemmzoo.get_backend("torch").suite_compiles is False


@pytest.mark.parametrize("layout", ["row", "strided", "transposed"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
def test_copy_kernel_writes_values_then_zeros_to_the_buffer_edge(layout, dtype):
    """Every element of the destination: the source's value inside its extent, 0 past it (the
    destination starts as NaN), for sources with odd rows, strided views and transposes."""
    pytest.importorskip("triton")
    from gemmzoo_triton.core import copy_kernel

    device = "cuda" if torch.cuda.is_available() else "cpu"
    values = torch.randn(2 * 19 + 1, 2 * 37 + 1, generator=torch.Generator().manual_seed(5)).to(dtype)
    source = {"row": values[:19, :37], "strided": values[1::2, 1::2][:19, :37],
              "transposed": values[:37, :19].T}[layout].to(device)
    rows, cols = padded_length(19, 8) + 16, padded_length(37, source.element_size()) + 256
    destination = torch.full((rows, cols), float("nan"), dtype=dtype, device=device)
    copy_kernel.copy(source, destination)
    assert torch.equal(destination[:19, :37], source)
    outside = torch.ones(rows, cols, dtype=torch.bool, device=device)
    outside[:19, :37] = False
    assert (destination[outside] == 0).all()


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
def test_pair_copies_both_operands_in_one_launch(dtype):
    """A row-major A and a column-major B, odd in every dimension, copied by one launch into one
    allocation: each padded operand holds the values top left and zeros elsewhere."""
    pytest.importorskip("triton")
    device = "cuda" if torch.cuda.is_available() else "cpu"
    a = operand(13, 21, "N", dtype, 1).to(device)
    b = operand(21, 11, "T", dtype, 2).to(device)
    kp, np_ = padded_length(21, a.element_size()), padded_length(11, a.element_size())
    pair = PaddedPair(PaddedCopy(a, 13, kp, column_major=False), PaddedCopy(b, kp, np_, column_major=True))
    padded_a, padded_b = pair(a, b)
    assert padded_a.shape == (13, kp) and padded_b.shape == (kp, np_)
    assert padded_b.stride(0) == 1  # B stays column-major
    assert padded_b.data_ptr() % 16 == 0 and padded_b.stride(1) % (16 // a.element_size()) == 0
    for padded, original in ((padded_a, a), (padded_b, b)):
        rows, cols = original.shape
        assert torch.equal(padded[:rows, :cols], original)
        assert (padded[rows:] == 0).all() and (padded[:, cols:] == 0).all()


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "tf32"])
@pytest.mark.parametrize("layout", ["NN", "TT", "SN"])
def test_backend_on_the_gpu_matches_the_float64_product(dtype, layout):
    """On CUDA (Triton copies): every element within the conformance bound's scale of the
    float64 product, for odd K and N, and the same bits as ``torch`` where nothing is padded."""
    import numpy as np

    from gemmzoo import TF32Array

    backend = gemmzoo.get_backend("torch-padded")
    if backend.unavailable_reason():
        pytest.skip(backend.unavailable_reason())
    stored = torch.float32 if dtype == "tf32" else getattr(torch, dtype)
    m, n, k = 257, 263, 131
    a = operand(m, k, layout[0], stored, 1).cuda()
    b = operand(k, n, layout[1], stored, 2).cuda()
    wrap = TF32Array if dtype == "tf32" else (lambda t: t)
    c = backend.matmul(wrap(a), wrap(b))
    c = backend.to_numpy(c)
    exact = a.double().cpu().numpy() @ b.double().cpu().numpy()
    scale = np.abs(a.double().cpu().numpy()) @ np.abs(b.double().cpu().numpy())
    # C's rounding (the operands' rounding to tf32 for tf32) and fp32 accumulation of K terms
    rounding = {"float16": 2**-11, "bfloat16": 2**-8, "float32": 2**-24, "tf32": 2**-10}[dtype]
    bound = 2 * (rounding + k * 2**-24) * scale
    assert c.shape == (m, n) and (np.abs(c - exact) <= bound).all()
    aligned_a, aligned_b = a[:, :128].contiguous(), b[:128, :256].contiguous()
    # nothing to pad: the torch backend's own launcher for this problem
    from gemmzoo_torch.precision import needless_switches

    expected = backend._run(dtype, needless_switches(dtype, wrap(aligned_a), wrap(aligned_b)))
    assert backend.prepare(wrap(aligned_a), wrap(aligned_b)) is expected


def _on_copy_device(*tensors):
    """``tensors`` where the Triton copy runs: the GPU when there is one, else the CPU (under the
    interpreter)."""
    device = "cuda" if torch.cuda.is_available() else "cpu"
    return tuple(t.to(device) for t in tensors)


def test_a_plan_reuses_its_copy_buffer_per_thread_and_stays_right():
    """Calls of one plan write the same buffer (nothing allocated but C), each call's C is right
    for its own operands, and another thread gets a buffer of its own."""
    import threading

    pytest.importorskip("triton")
    x, y = _on_copy_device(operand(13, 21, "N", torch.float32, 1), operand(21, 11, "T", torch.float32, 2))
    kp, np_ = padded_length(21, 4), padded_length(11, 4)
    pair = PaddedPair(PaddedCopy(x, 13, kp, column_major=False), PaddedCopy(y, kp, np_, column_major=True))
    first = pair(x, y)[0].data_ptr()
    run = padded_plan(x, y, torch.mm)
    for seed in range(3):
        a, b = _on_copy_device(operand(13, 21, "N", torch.float32, 10 + seed),
                               operand(21, 11, "T", torch.float32, 20 + seed))
        padded_a, padded_b = pair(a, b)
        assert padded_a.data_ptr() == first
        assert torch.equal(padded_a[:, :21], a) and torch.equal(padded_b[:21, :11], b)
        c = run(a, b)
        torch.testing.assert_close(c, (a.double() @ b.double()).float(), rtol=1e-5, atol=1e-5)
    other = []
    thread = threading.Thread(target=lambda: other.append(pair(x, y)[0].data_ptr()))
    thread.start()
    thread.join()
    assert other and other[0] != first


def test_large_copy_buffers_are_not_kept():
    pytest.importorskip("triton")
    x, y = _on_copy_device(operand(13, 21, "N", torch.float32, 1), operand(21, 11, "N", torch.float32, 2))
    kp, np_ = padded_length(21, 4), padded_length(11, 4)
    pair = PaddedPair(PaddedCopy(x, 13, kp, column_major=False), PaddedCopy(y, kp, np_, column_major=False),
                      reused_buffer_bytes=0)
    kept = [pair(x, y) for _ in range(2)]
    assert kept[0][0].data_ptr() != kept[1][0].data_ptr()
    assert all(torch.equal(a[:, :21], x) and torch.equal(b[:21, :11], y) for a, b in kept)
