"""triton-grouped's copied route: one launch that copies A and B into aligned buffers the plan
keeps and multiplies from them (:mod:`gemmzoo_triton.grouped.copied_kernel`).

Runs under the interpreter on CPU tensors (the two phases launched one after the other) and on a
GPU with TMA (one cooperative launch, its programs meeting at a grid-wide barrier). Small shapes
reach the route by forcing it, as in test_triton_tma; on the GPU a mid-sized shape reaches it by
itself.
"""

from __future__ import annotations

import numpy as np
import pytest
from test_triton_tma import check_product, force_route, kernel_dtypes, strided_operand, tma_backend

from gemmzoo_triton.grouped import copied_kernel
from gemmzoo_triton.grouped.backend import TritonGroupedBackend

torch = pytest.importorskip("torch")
pytest.importorskip("triton")


@pytest.fixture
def copied_route(monkeypatch):
    """Every problem on the copied route, every device taken for one with TMA."""
    return force_route(monkeypatch, "copied")


@pytest.mark.parametrize("layout", ["NN", "TN", "NT", "TT", "SS"])
@pytest.mark.parametrize(("m", "n", "k"), [(37, 43, 53), (70, 33, 65)])  # tiles cut by every edge
def test_each_call_computes_its_own_operands(copied_route, layout, m, n, k):
    """Three calls on new values through one plan, every element within the float64 bound, C
    contiguous, and an earlier call's C untouched by later calls (the buffers are kept, C never)."""
    backend = TritonGroupedBackend()
    sixteen_bit = kernel_dtypes(copied_route)[:-1]
    assert sixteen_bit
    for seed, (name, dtype) in enumerate(sixteen_bit):
        run, results = None, []
        for call in range(3):
            x = strided_operand(m, k, layout[0], dtype, copied_route.device, 10 * seed + call)
            y = strided_operand(k, n, layout[1], dtype, copied_route.device, 10 * seed + call + 50)
            if run is None:
                run = backend.prepare(x, y)
            assert run.route == "copied"
            c = run(x, y)
            assert c.shape == (m, n) and c.is_contiguous() and c.dtype == dtype
            check_product(c, x, y, name, None)
            results.append((c.clone(), c))
        for kept, c in results:
            assert torch.equal(kept, c)


def _refusing_bind(message: str):
    def bind(*args, **kwargs):
        def launch(x, y, c):
            raise RuntimeError(message)

        return launch

    return bind


def test_a_refused_cooperative_launch_moves_the_plan_to_the_pointer_route(copied_route, monkeypatch):
    """A GPU that cannot hold every program at once (shared under MPS, say) refuses the cooperative
    launch: that first call, and every later one, computes on the pointer route instead."""
    if "float16" not in copied_route.dtypes:
        pytest.skip("this mode computes no float16")
    monkeypatch.setattr(copied_kernel, "bind", _refusing_bind(
        "Triton Error [CUDA]: too many blocks in cooperative launch"))
    device = copied_route.device
    run = TritonGroupedBackend().prepare(strided_operand(37, 53, "N", torch.float16, device, 3),
                                         strided_operand(53, 43, "N", torch.float16, device, 4))
    assert run.route == "copied"
    for call in range(2):
        x = strided_operand(37, 53, "N", torch.float16, device, 10 + call)
        y = strided_operand(53, 43, "N", torch.float16, device, 20 + call)
        check_product(run(x, y), x, y, "float16", None)
        assert run.route == "pointer"


def test_another_launch_error_of_the_copied_route_is_raised(copied_route, monkeypatch):
    if "float16" not in copied_route.dtypes:
        pytest.skip("this mode computes no float16")
    monkeypatch.setattr(copied_kernel, "bind", _refusing_bind("Triton Error [CUDA]: out of memory"))
    x = strided_operand(37, 53, "N", torch.float16, copied_route.device, 5)
    y = strided_operand(53, 43, "N", torch.float16, copied_route.device, 6)
    run = TritonGroupedBackend().prepare(x, y)
    with pytest.raises(RuntimeError, match="out of memory"):
        run(x, y)
    assert run.route == "copied"


def test_a_fused_activation_takes_the_pointer_route(copied_route):
    """The one-launch kernel fuses no activation: a plan with one computes on the pointer route."""
    x = strided_operand(37, 53, "N", torch.float16, copied_route.device, 1)
    y = strided_operand(53, 43, "N", torch.float16, copied_route.device, 2)
    if "float16" not in copied_route.dtypes:
        pytest.skip("this mode computes no float16")
    run = TritonGroupedBackend().prepare(x, y, activation="relu")
    assert run.route == "pointer"
    check_product(run(x, y), x, y, "float16", "relu")


@pytest.mark.parametrize(("m", "n", "sms", "expected"), [
    (1023, 1023, 132, (64, 128)),  # 128 tiles of 64x128: one wave
    (1025, 1025, 132, (128, 128)),  # 153 tiles of 64x128 take two waves, 81 of 128x128 one
    (4000, 4000, 132, (128, 128)),
    (100, 100, 132, (64, 128)),
])
def test_the_tile_shape_takes_the_fewest_waves(m, n, sms, expected):
    config = copied_kernel.pick_config(m, n, sms)
    assert (config.block_m, config.block_n) == expected


def test_buffers_keep_the_operands_layout_in_whole_tiles():
    a = torch.empty(37, 53)
    row = copied_kernel.operand_buffer(a, 64, 32)
    assert (row.column_major, row.rows, row.cols, row.row_stride, row.numel) == (False, 37, 53, 64, 64 * 64)
    column = copied_kernel.operand_buffer(torch.empty(53, 37).T, 64, 32)
    assert (column.column_major, column.rows, column.cols, column.row_stride) == (True, 53, 37, 64)
    assert column.numel == 64 * 64


@pytest.mark.gpu
@pytest.mark.parametrize(("m", "n", "k", "dtype"), [
    (1025, 1025, 1025, "float16"),
    (777, 1234, 555, "bfloat16"),
])
def test_mid_sized_unaligned_problems_take_the_copied_route_on_gpu(m, n, k, dtype):
    """Reached by the shapes themselves: every element against the float64 bound, the plan and
    matmul bitwise identical, and a product captured in a CUDA graph replays the eager result."""
    backend = tma_backend()
    rng = np.random.default_rng(m + n + k)
    a = backend.from_numpy(rng.standard_normal((m, k)), dtype)
    b = backend.from_numpy(rng.standard_normal((k, n)), dtype)
    run = backend.prepare(a, b)
    assert run.route == "copied"
    first = run(a, b)
    check_product(first, a, b, dtype, None)
    assert torch.equal(backend.matmul(a, b), first) and torch.equal(run(a, b), first)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        run(a, b)  # warm the side stream's buffers
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = run(a, b)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(captured, first)
