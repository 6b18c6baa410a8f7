"""The bundled ``torch-compile`` backend (Inductor max-autotune on the CPU) and
``torch-compile-cuda`` (marked ``gpu``)."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("torch")

from backends_here import available

import gemmzoo
from gemmzoo.conformance import check_backend

# The whole suite on every dtype is `gemmzoo check torch-compile` (slow on a small CPU: one
# compilation per problem). CI runs float32 and bfloat16.
CI_DTYPES = ["float32", "bfloat16"]

#: Seconds each case may take here: the product is under test, not the host's speed. A process's
#: first Inductor compile took over the default 60 s with eight test workers compiling at once.
COMPILE_LIMIT_S = 600


@pytest.mark.parametrize("dtype", CI_DTYPES)
def test_torch_compile_conforms_on_the_cpu(dtype):
    report = check_backend(available("torch-compile"), dtypes=[dtype], timeout=COMPILE_LIMIT_S)
    assert report.passed, [(r.check, r.detail) for r in report.failures]


def test_each_problem_compiles_once_in_prepare_and_never_in_a_call():
    import torch
    from torch._dynamo.utils import counters

    backend = available("torch-compile")
    rng = np.random.default_rng(5)
    shape_a, shape_b = (29, 47), (47, 13)
    before = counters["stats"]["unique_graphs"]
    run = backend.prepare(backend.from_numpy(rng.standard_normal(shape_a), "float32"),
                          backend.from_numpy(rng.standard_normal(shape_b), "float32"))
    assert counters["stats"]["unique_graphs"] == before + 1
    for _ in range(3):
        a = torch.from_numpy(rng.standard_normal(shape_a).astype(np.float32))
        b = torch.from_numpy(rng.standard_normal(shape_b).astype(np.float32))
        c = run(a, b)
        assert torch.equal(c, torch.mm(a, b))
    assert counters["stats"]["unique_graphs"] == before + 1


def test_many_problems_stay_compiled_past_dynamos_recompile_limit():
    import torch
    import torch._dynamo

    backend = available("torch-compile")
    rng = np.random.default_rng(6)
    limit = torch._dynamo.config.recompile_limit
    before = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    for k in range(1, limit + 4):
        a = torch.from_numpy(rng.standard_normal((5, k)).astype(np.float32))
        b = torch.from_numpy(rng.standard_normal((k, 3)).astype(np.float32))
        c = backend.matmul(a, b)
        torch.testing.assert_close(c, a.double().mm(b.double()).float(), rtol=1e-5, atol=1e-5)
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == before + limit + 3


def test_torch_compile_cuda_is_registered_on_the_cuda_device():
    backend = gemmzoo.get_backend("torch-compile-cuda")
    assert backend.device == "cuda" and "tf32" in backend.dtypes
    assert backend.mode == "max-autotune-no-cudagraphs"


@pytest.mark.gpu
def test_torch_compile_cuda_conforms_on_the_gpu():
    report = check_backend(available("torch-compile-cuda"), dtypes=["float16", "bfloat16", "float32", "tf32"],
                           timeout=COMPILE_LIMIT_S)
    assert report.passed, [(r.check, r.detail) for r in report.failures]
