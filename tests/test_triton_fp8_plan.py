"""triton-fp8's plans: the kernel chosen and bound once per problem, so that a call after the
first only copies what the layouts need, allocates C and launches the compiled kernel."""

from __future__ import annotations

import os

import numpy as np
import pytest

import gemmzoo

triton = pytest.importorskip("triton")
torch = pytest.importorskip("torch")

from gemmzoo_triton.fp8 import backend as fp8_backend  # noqa: E402
from gemmzoo_triton.fp8 import pointer_kernel as fp8_pointer_kernel  # noqa: E402

interpreter_only = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1",
                                      reason="the pointer route, as the interpreter runs it")


def _backend(**options):
    backend = fp8_backend.TritonFp8Backend(**options)
    reason = backend.unavailable_reason()
    if reason is not None:
        pytest.skip(f"triton-fp8 unavailable: {reason}")
    return backend


def operands(backend, m, n, k, seed, b_column_major=False):
    rng = np.random.default_rng(seed)
    a = backend.from_numpy(rng.standard_normal((m, k)), "float8_e4m3fn")
    b_values = rng.standard_normal((k, n))
    if b_column_major:
        return a, backend.from_numpy(np.ascontiguousarray(b_values.T), "float8_e4m3fn").T
    return a, backend.from_numpy(b_values, "float8_e4m3fn")


def exact(a, b):
    return a.double() @ b.double()


def within_bf16(c, a, b):
    """Every element within one bfloat16 unit of the exact fp64 sum (the interpreter's rounding)."""
    want = exact(a, b)
    unit = 2.0 ** (torch.floor(torch.log2(want.abs().clamp(min=2.0**-100))) - 7)
    return bool(torch.all((c.double().cpu() - want.cpu()).abs() <= unit + 1e-6))


@interpreter_only
@pytest.mark.parametrize("b_column_major", [False, True])
def test_the_plan_tunes_once_then_launches_its_bound_kernel(monkeypatch, b_column_major):
    backend = _backend()
    tuned = []
    real = fp8_pointer_kernel.launch

    def spy(*args, **kwargs):
        tuned.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(fp8_pointer_kernel, "launch", spy)
    n = 29 + b_column_major  # a problem of each case's own: nothing tuned for it before
    a, b = operands(backend, 37, n, 45, 1, b_column_major)
    plan = backend.prepare(a, b)
    results = []
    for seed in range(3):
        a, b = operands(backend, 37, n, 45, seed, b_column_major)
        c = plan(a, b)
        assert c.dtype == torch.bfloat16 and c.shape == (37, n) and within_bf16(c, a, b)
        results.append((c, c.clone()))
    assert len(tuned) == 1  # the first call alone went through the autotuning launch
    assert all(torch.equal(c, kept) for c, kept in results)  # no call wrote an earlier C
    assert torch.equal(backend.compute(a, b), results[-1][0])  # the plan computes what compute does


@interpreter_only
def test_matmul_goes_through_the_remembered_plan():
    backend = _backend()
    a, b = operands(backend, 20, 24, 40, 5)
    first = backend.matmul(a, b)
    assert len(backend._plans) == 1 and within_bf16(first, a, b)
    assert torch.equal(backend.matmul(a, b), first) and len(backend._plans) == 1


def test_an_empty_problem_plan_gives_the_empty_or_zero_result():
    backend = _backend()
    a, b = operands(backend, 3, 4, 0, 2)
    c = backend.prepare(a, b)(a, b)
    assert c.shape == (3, 4) and c.dtype == torch.bfloat16 and not c.any()


def test_a_descriptor_plan_sends_an_unaligned_start_to_the_fallback():
    launched, fell_back = [], []
    allocate = lambda: torch.empty(2, 3)  # noqa: E731
    plan = fp8_backend._plan(lambda x, y, c: launched.append((x, y)), False, False, True, allocate,
                             lambda a, b: fell_back.append((a, b)) or "fallback")
    storage = torch.zeros(64, dtype=torch.uint8)
    aligned, shifted = storage[:32].view(4, 8), storage[1:33].view(4, 8)
    assert torch.is_tensor(plan(aligned, aligned)) and len(launched) == 1
    assert plan(shifted, aligned) == "fallback" and len(launched) == 1 and len(fell_back) == 1


def test_a_plan_makes_operands_k_major_where_the_layout_needs_it():
    seen = []
    plan = fp8_backend._plan(lambda x, y, c: seen.append((x, y)), True, True, False,
                             lambda: torch.empty(1), lambda a, b: None)
    a = torch.arange(12.0).view(3, 4).T  # column-major A: copied row-major
    b = torch.arange(20.0).view(4, 5)  # row-major B: copied column-major
    plan(a, b)
    x, y = seen[0]
    assert x.stride(1) == 1 and torch.equal(x, a) and y.stride(0) == 1 and torch.equal(y, b)


@interpreter_only
def test_the_tma_kernels_bound_launch_matches_its_tuned_launch():
    """The TMA kernel bound with a config (block shapes on the descriptors, the persistent grid)
    computes what the kernel computes under the interpreter, every element written."""
    from gemmzoo_triton.core.autotune import make_config
    from gemmzoo_triton.fp8 import tma_kernel

    m, n, k = 70, 88, 80
    generator = torch.Generator().manual_seed(3)
    a = torch.randn((m, k), generator=generator).to(torch.float8_e4m3fn)
    b = torch.randn((n, k), generator=generator).to(torch.float8_e4m3fn).t()  # column-major
    config = make_config(32, 32, 32, 1, 4, group=2)
    config.kwargs.update({"SPLIT_M": 1, "SPLIT_N": 2, "FLATTEN": True, "PROGRAMS_PER_SM": 1})
    run = tma_kernel.bind(m, n, k, 0, config, sms=3)
    for _ in range(2):
        c = torch.full((m, n), float("nan"), dtype=torch.bfloat16)
        run(a, b, c)
        assert within_bf16(c, a, b)


def test_the_registered_backend_is_a_plan_user():
    assert isinstance(gemmzoo.get_backend("triton-fp8"), fp8_backend.TritonFp8Backend)
