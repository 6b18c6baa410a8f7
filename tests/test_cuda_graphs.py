"""gemmzoo.matmul inside ``torch.cuda.graph``: a captured plan replays bitwise as the eager call
(GPU only, marked ``gpu``)."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from sessions import scoped  # noqa: E402

import gemmzoo  # noqa: E402
from gemmzoo.conformance.bounds import error_bound  # noqa: E402
from gemmzoo.dispatch.matmul import choice_for  # noqa: E402
from gemmzoo.errors import GemmInputError  # noqa: E402
from gemmzoo.tuning.select import LIBRARY  # noqa: E402

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("dispatch_route")]

BACKENDS = [None, "torch", "torch-padded", "triton-grouped", "triton-splitk", "triton-decode"]
PROBLEMS = [((256, 384, 512), "float16"), ((257, 129, 193), "float16"), ((1, 4096, 1024), "bfloat16"),
            ((1025, 1025, 1025), "float16"), ((96, 80, 112), "float32")]


@pytest.fixture(autouse=True)
def fresh(tmp_path, monkeypatch):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    monkeypatch.setenv("GEMMZOO_CACHE_DIR", str(tmp_path / "cache"))
    with scoped():
        yield


def _usable(name):
    if name is None:
        return
    backend = gemmzoo.get_backend(name)
    reason = backend.unavailable_reason()
    if reason is not None:
        pytest.skip(f"{name}: {reason}")
    return backend


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(("shape", "dtype"), PROBLEMS)
def test_a_captured_plan_replays_bitwise_as_the_eager_call(backend, shape, dtype):
    found = _usable(backend)
    if found is not None and dtype not in found.dtypes:
        pytest.skip(f"{backend} does not compute {dtype}")
    m, n, k = shape
    torch_dtype = getattr(torch, dtype)
    generator = torch.Generator(device="cuda").manual_seed(0)

    def fill(*size):
        return torch.randn(*size, device="cuda", generator=generator).to(torch_dtype)

    a, b = fill(m, k), fill(k, n)
    # Warm up on a side stream, as torch asks before a capture: the plan is made (backend chosen,
    # kernels compiled and autotuned, buffers allocated) outside the graph.
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        try:
            for _ in range(3):
                gemmzoo.matmul(a, b, backend, by="device")
        except GemmInputError as refused:  # a specialised backend that does not take this problem
            pytest.skip(str(refused))
    torch.cuda.current_stream().wait_stream(side)

    # no backend named and nothing measured: the plan may be torch's own product (docs/drop-in.md),
    # as accurate as the call it replaces, which the suite's bound does not describe
    library_route = backend is None and choice_for(a, b, by="device").source == LIBRARY
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = gemmzoo.matmul(a, b, backend, by="device")
    for _ in range(2):  # new values in the captured inputs each time
        a.copy_(fill(m, k))
        b.copy_(fill(k, n))
        graph.replay()
        torch.cuda.synchronize()
        eager = gemmzoo.matmul(a, b, backend, by="device")
        torch.cuda.synchronize()
        assert torch.equal(captured, eager), f"{int((captured != eager).sum())} elements differ"
        if library_route:  # torch's own product under the caller's switches: torch.matmul's bits
            assert torch.equal(captured, torch.matmul(a, b))
            continue
        a64, b64 = a.double().cpu().numpy(), b.double().cpu().numpy()
        ref = a64 @ b64
        bound = error_bound(dtype, k, ref, np.abs(a64) @ np.abs(b64))
        assert np.all(np.abs(captured.double().cpu().numpy() - ref) <= bound)
