"""triton-grouped's copying routes after their first call: the aligned copies go into buffers the
plan keeps per thread and CUDA stream (one launch when A and B are both copied), their TMA
descriptors are made once per buffer, and a call makes nothing new but C (and C's descriptor).

Runs where the TMA kernels run: under the interpreter on CPU tensors, or on a GPU with TMA; the
route is forced (the shapes are small), as in test_triton_tma, and the Triton TMA kernel takes the
products (``gluon=False``), so that the descriptors counted are its own.
"""

from __future__ import annotations

import threading

import pytest
from test_triton_tma import check_product, force_route, strided_operand, tma_backend

from gemmzoo_triton.core import hopper, stream_buffers
from gemmzoo_triton.core.launch import BoundLaunch
from gemmzoo_triton.grouped import plan as grouped_plan
from gemmzoo_triton.grouped import tma_kernel
from gemmzoo_triton.grouped.backend import TritonGroupedBackend

torch = pytest.importorskip("torch")
pytest.importorskip("triton")


@pytest.fixture
def aligned_route(monkeypatch):
    """Every problem on the aligned route, every device taken for one with TMA."""
    return force_route(monkeypatch, "aligned").device


class Spies:
    """Counts, from :meth:`start` on: kernel launches through bound launches, TMA descriptors made
    for the TMA kernel (``full``: of those, the ones made and validated by ``TensorDescriptor``
    itself rather than copied from the plan's first), and ``torch.empty`` calls (what the copy
    buffers are made with)."""

    def __init__(self, monkeypatch):
        self.launches = self.descriptors = self.full = self.empties = 0
        self._on = False
        real_call, real_descriptor = BoundLaunch.__call__, tma_kernel.TensorDescriptor
        real_reusing, real_empty = tma_kernel.reusing, torch.empty
        spies = self

        def call(self, *args):
            spies.launches += spies._on
            return real_call(self, *args)

        def descriptor(*args, **kwargs):
            spies.full += spies._on
            return real_descriptor(*args, **kwargs)

        def reusing(make):
            describe = real_reusing(make)

            def counted(base):
                spies.descriptors += spies._on
                return describe(base)

            return counted

        def empty(*args, **kwargs):
            spies.empties += spies._on
            return real_empty(*args, **kwargs)

        monkeypatch.setattr(BoundLaunch, "__call__", call)
        monkeypatch.setattr(tma_kernel, "TensorDescriptor", descriptor)
        monkeypatch.setattr(tma_kernel, "reusing", reusing)
        monkeypatch.setattr(torch, "empty", empty)

    def start(self) -> None:
        self._on = True
        self.launches = self.descriptors = self.full = self.empties = 0


def operands(m: int, n: int, k: int, layout: str, device: str, seed: int):
    return (strided_operand(m, k, layout[0], torch.float16, device, seed),
            strided_operand(k, n, layout[1], torch.float16, device, seed + 100))


@pytest.mark.parametrize("layout", ["NN", "SS", "TN"])
def test_kept_copies_compute_each_calls_own_operands(aligned_route, layout):
    """Three calls on new values through one plan: each result within the float64 bound, and
    the results of earlier calls untouched by later ones (C is never a kept buffer)."""
    m, n, k = 37, 43, 53  # rows of A, B and C unaligned
    backend = TritonGroupedBackend(gluon=False)
    x, y = operands(m, n, k, layout, aligned_route, 0)
    run = backend.prepare(x, y)
    assert run.route == "aligned"
    results = []
    for seed in range(3):
        x, y = operands(m, n, k, layout, aligned_route, seed)
        c = run(x, y)
        check_product(c, x, y, "float16", None)
        results.append((c, c.clone(), x, y))
    for c, kept, x, y in results:
        assert torch.equal(c, kept)
        check_product(c, x, y, "float16", None)


@pytest.mark.parametrize(("n", "contiguous_c", "descriptors"), [
    (43, False, 1),  # C a view with padded rows, stored through its descriptor
    (43, True, 0),  # C contiguous with unaligned rows: stored through pointers
])
def test_after_the_first_call_a_call_makes_only_c(aligned_route, monkeypatch, n, contiguous_c, descriptors):
    """Both operands copied: the second call makes the kept buffer and its descriptors; from
    then on, per call one copy launch (both copies), the product's launch, C's descriptor where C
    has one, and no other allocation."""
    spies = Spies(monkeypatch)
    backend = TritonGroupedBackend(gluon=False, contiguous_c=contiguous_c)
    x, y = operands(37, n, 53, "NN", aligned_route, 1)
    run = backend.prepare(x, y)
    first = run(x, y)  # binds the kernel
    spies.start()
    assert torch.equal(run(x, y), first)
    assert spies.empties == 1 and spies.descriptors == 2 + descriptors  # A's, B's (kept) and C's
    spies.start()
    for _ in range(3):
        assert torch.equal(run(x, y), first)
    assert spies.launches == 2 * 3
    assert spies.descriptors == descriptors * 3
    assert spies.full == 0  # every one copied from the plan's first over its new base
    assert spies.empties == 0


def test_an_operand_not_copied_gets_its_descriptor_per_call(aligned_route, monkeypatch):
    """K a multiple of 8: A's rows are aligned and A is read as it is (its address changes from
    call to call, so its descriptor is made per call); B and C are copied and padded."""
    spies = Spies(monkeypatch)
    backend = TritonGroupedBackend(gluon=False)
    x, y = operands(37, 43, 48, "NN", aligned_route, 2)
    run = backend.prepare(x, y)
    first = run(x, y)
    run(x, y)  # makes the kept buffer
    spies.start()
    for _ in range(2):
        assert torch.equal(run(x, y), first)
    assert spies.launches == 2 * 2 and spies.descriptors == 2 * 2 and spies.empties == 0
    assert spies.full == 0
    check_product(first, x, y, "float16", None)


def test_calls_while_a_graph_is_captured_use_fresh_buffers(aligned_route, monkeypatch):
    capturing = [False]
    monkeypatch.setattr(stream_buffers, "_capture_reader", lambda device: lambda: capturing[0])
    spies = Spies(monkeypatch)
    x, y = operands(37, 43, 53, "SS", aligned_route, 3)
    run = TritonGroupedBackend(gluon=False).prepare(x, y)
    first = run(x, y)
    capturing[0] = True
    spies.start()
    for _ in range(2):
        assert torch.equal(run(x, y), first)
    assert spies.empties == 2  # a buffer per call: kept buffers are not shared with a graph
    capturing[0] = False
    spies.start()
    assert torch.equal(run(x, y), first) and spies.empties == 1  # the first kept buffer
    spies.start()
    assert torch.equal(run(x, y), first) and spies.empties == 0


def test_each_thread_and_stream_keeps_its_own_buffer(aligned_route, monkeypatch):
    stream = ["first"]
    monkeypatch.setattr(stream_buffers, "_stream_reader", lambda device: lambda: stream[0])
    spies = Spies(monkeypatch)
    x, y = operands(37, 43, 53, "NN", aligned_route, 4)
    run = TritonGroupedBackend(gluon=False).prepare(x, y)
    first = run(x, y)
    run(x, y)  # the first kept buffer
    spies.start()
    stream[0] = "second"
    assert torch.equal(run(x, y), first) and spies.empties == 1
    results = []
    worker = threading.Thread(target=lambda: results.append(run(x, y)))
    worker.start()
    worker.join()
    assert torch.equal(results[0], first) and spies.empties == 2
    assert torch.equal(run(x, y), first) and spies.empties == 2  # this thread's, this stream's


def test_large_buffers_are_not_kept(aligned_route, monkeypatch):
    spies = Spies(monkeypatch)
    x, y = operands(37, 43, 53, "NN", aligned_route, 5)
    run = TritonGroupedBackend(gluon=False, reused_buffer_bytes=0).prepare(x, y)
    first = run(x, y)
    spies.start()
    assert torch.equal(run(x, y), first) and torch.equal(run(x, y), first)
    assert spies.empties == 2


def test_the_tf32_route_keeps_its_copies_too(monkeypatch):
    """The tf32 route on the TMA kernel: A copied into row-major and B into column-major (a
    transposing copy, torch's, so no two-copy launch), both kept; each call's result right."""
    backend = tma_backend()
    if backend.device == "cuda":
        pytest.skip("the route is forced here; test_triton_tma covers the GPU's own")
    monkeypatch.setattr(grouped_plan, "route", lambda x, y, precision, gluon=True, policy=None: "tf32")
    monkeypatch.setattr(hopper, "tma_device", lambda device: True)
    spies = Spies(monkeypatch)
    m, n, k = 24, 36, 20
    x = strided_operand(m, k, "T", torch.float32, "cpu", 1)
    y = strided_operand(k, n, "N", torch.float32, "cpu", 2)
    run = backend.prepare(x, y)
    run(x, y)
    run(x, y)
    for seed in (3, 4):
        x = strided_operand(m, k, "T", torch.float32, "cpu", seed)
        y = strided_operand(k, n, "N", torch.float32, "cpu", seed + 1)
        spies.start()
        check_product(run(x, y), x, y, "tf32", None)
        assert spies.empties == 0 and spies.descriptors == 1  # C's


class RecordingKernel:
    """Stands in for a kernel under the interpreter's launch path: records each launch."""

    def __init__(self):
        self.launches: list[tuple[tuple, dict]] = []

    def __getitem__(self, grid):
        return lambda *args, **constexprs: self.launches.append((args, constexprs))


def describe(argument):
    """A descriptor's base, shape, strides and block shape, or the argument itself."""
    if hasattr(argument, "block_shape"):
        return (argument.base.data_ptr(), list(argument.shape), list(argument.strides),
                list(argument.block_shape))
    return argument


@pytest.mark.parametrize(("a_t", "b_t"), [(False, False), (True, False), (False, True)])
def test_gluon_launches_make_the_same_descriptors_apart(monkeypatch, a_t, b_t):
    """The Gluon kernels' bound launch called whole and called with A's and B's descriptors made
    apart (as a plan with kept copies does) launch the same arguments."""
    gluon_parts = pytest.importorskip("gemmzoo_triton.core.gluon_parts")  # Triton 3.6 or later
    if tma_backend().device == "cuda":
        pytest.skip("the launch is recorded through the interpreter's launch path")
    config = gluon_parts.GluonConfig(block_m=64, block_n=32, block_k=16, stages=2, operand_bytes=2)
    m, n, k = 64, 96, 48
    x = strided_operand(m, k, "T" if a_t else "N", torch.float16, "cpu", 1)
    y = strided_operand(k, n, "T" if b_t else "N", torch.float16, "cpu", 2)
    c = torch.empty(m, n, dtype=torch.float16)
    kernel = RecordingKernel()
    run = gluon_parts.bind(kernel, m, n, k, a_t, b_t, 132, config, extra=lambda: (7, 8))
    run(x, y, c)
    run.launch(run.a_desc(x), run.b_desc(y), c)
    (whole, constexprs), (apart, _) = kernel.launches
    assert [describe(a) for a in whole] == [describe(a) for a in apart]
    assert describe(whole[0])[3] == ([16, 64] if a_t else [64, 16])
    assert describe(whole[1])[3] == ([32, 16] if b_t else [16, 32])
    assert describe(whole[2])[1:] == ([m, n], [n, 1], [64, 32]) and whole[3:] == (m, n, k, 7, 8)
    assert constexprs["STAGES"] == 2 and constexprs["num_warps"] == 8
