"""Problem classes: text forms, the public entry points, and the suite's class cases with the
mutants it must catch (a wrong scale axis, a dropped group, an off-by-one offset, a batch
broadcast wrong)."""

from __future__ import annotations

import numpy as np
import pytest

import gemmzoo
from gemmzoo.conformance import check_backend
from gemmzoo.conformance.class_cases import class_cases, run_class_case
from gemmzoo.conformance.judge import CheckFailedError
from gemmzoo.contract.fp8 import BFLOAT16, E4M3, e4m3_to_float32, to_e4m3
from gemmzoo.errors import GemmInputError
from gemmzoo.problems.class_math import dequantized, group_bounds
from gemmzoo.problems.classes import Problem, parse_problem, scale_shapes
from gemmzoo_numpy import NumpyBackend

pytestmark = pytest.mark.usefixtures("empty_cache")


@pytest.mark.parametrize("text", ["128x256x64", "bmm:8x1024x1024x64", "bmm:4x8x16x16x8",
                                  "scaled:rowwise:8192x8192x8192", "scaled:blockwise:300x200x100",
                                  "scaled:tensorwise:1x2x3", "grouped:g8:4096x7168:m=512",
                                  "grouped:64x32:m=0,1,5"])
def test_text_forms_round_trip(text):
    problem = parse_problem(text)
    assert problem.text() == text
    assert parse_problem(problem.text()) == problem


def test_parsed_problems_hold_their_sizes():
    grouped = parse_problem("grouped:g4:256x512:m=3")
    assert (grouped.kind, grouped.groups, grouped.shape, grouped.offsets()) == (
        "grouped", (3, 3, 3, 3), (12, 256, 512), (3, 6, 9, 12))
    batched = parse_problem("bmm:2x3x5x7x11", dtype="float16")
    assert (batched.batch, batched.shape, batched.count, batched.dtype) == ((2, 3), (5, 7, 11), 6, "float16")
    assert batched.flops == 2 * 5 * 7 * 11 * 6
    scaled = parse_problem("scaled:rowwise:5x6x7")
    assert (scaled.dtype, scaled.scaling) == ("float8_e4m3fn", "rowwise")
    assert parse_problem("5x6x7") == Problem(5, 6, 7)


@pytest.mark.parametrize("text", ["5x6", "bmm:5x6x7", "scaled:colwise:5x6x7", "grouped:g2:4x4:m=1,2,3",
                                  "grouped:4x4", "warp:5x6x7", "grouped:4x4:m=a"])
def test_bad_text_forms_say_what_is_wrong(text):
    with pytest.raises(ValueError, match="problem"):
        parse_problem(text)


def test_scale_shapes_follow_the_block_layout():
    assert scale_shapes("rowwise", 5, 6, 7) == ((5, 1), (1, 6))
    assert scale_shapes("blockwise", 5, 300, 129) == ((5, 2), (2, 3))
    assert scale_shapes("tensorwise", 5, 6, 7) == ((), ())


def test_numpy_passes_every_class_case():
    report = check_backend(NumpyBackend(), dtypes=["float32", "float8_e4m3fn"])
    kinds = {r.check.split("-")[0] for r in report.results}
    assert {"batched", "scaled", "grouped"} <= kinds
    assert report.passed, [f.detail for f in report.failures]


# Mutants -----------------------------------------------------------------------------------


class SwappedRowwiseScales(NumpyBackend):
    """Applies A's row scales to C's columns and B's column scales to C's rows."""

    name = "wrong-scale-axis"

    def scaled_mm(self, a, b, scale_a, scale_b, out_dtype):
        sa, sb = np.asarray(scale_a), np.asarray(scale_b)
        if sa.shape == (a.shape[0], 1) and sb.shape == (1, b.shape[1]) and a.shape[0] == b.shape[1]:
            return super().scaled_mm(a, b, sb.reshape(-1, 1), sa.reshape(1, -1), out_dtype)
        return super().scaled_mm(a, b, scale_a, scale_b, out_dtype)


class TransposedBlockScales(NumpyBackend):
    """Reads B's 128×128 block scales as N-blocks × K-blocks."""

    name = "wrong-block-axis"

    def scaled_mm(self, a, b, scale_a, scale_b, out_dtype):
        sb = np.asarray(scale_b)
        if sb.ndim == 2 and sb.shape[0] == sb.shape[1] > 1:
            sb = np.ascontiguousarray(sb.T)
        return super().scaled_mm(a, b, scale_a, sb, out_dtype)


class DropsLastGroup(NumpyBackend):
    name = "wrong-dropped-group"

    def grouped_mm(self, a, b, offsets):
        c = super().grouped_mm(a, b, offsets)
        bounds = [(s, e) for s, e in group_bounds(np.asarray(offsets).tolist()) if e > s]
        if bounds:
            start, stop = bounds[-1]
            c[start:stop] = 0
        return c


class OffByOneOffsets(NumpyBackend):
    name = "wrong-offset"

    def grouped_mm(self, a, b, offsets):
        ends = np.asarray(offsets).copy()
        ends[:-1] = np.maximum(ends[:-1] - 1, np.concatenate([[0], ends[:-2]]))
        return super().grouped_mm(a, b, ends)


class CyclicBatch(NumpyBackend):
    """Pairs the i-th matrix of C with A's and B's matrices cyclically instead of broadcasting."""

    name = "wrong-broadcast"

    def bmm(self, a, b):
        batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
        flat_a, flat_b = a.reshape(-1, *a.shape[-2:]), b.reshape(-1, *b.shape[-2:])
        count = int(np.prod(batch))
        if count == 0:
            return super().bmm(a, b)
        out = [super(CyclicBatch, self).matmul(flat_a[i % len(flat_a)], flat_b[i % len(flat_b)])
               for i in range(count)]
        return np.stack(out).reshape(*batch, a.shape[-2], b.shape[-1])


class ScaledIgnoresScales(NumpyBackend):
    name = "wrong-ignores-scales"

    def scaled_mm(self, a, b, scale_a, scale_b, out_dtype):
        return super().scaled_mm(a, b, np.float32(1), np.float32(1), out_dtype)


@pytest.mark.parametrize("mutant, kind", [(SwappedRowwiseScales, "scaled"), (TransposedBlockScales, "scaled"),
                                          (ScaledIgnoresScales, "scaled"), (DropsLastGroup, "grouped"),
                                          (OffByOneOffsets, "grouped"), (CyclicBatch, "batched")])
def test_the_class_cases_catch_each_mutant(mutant, kind):
    backend = mutant()
    failed = []
    for case in class_cases(backend, {"float32", "float8_e4m3fn"}):
        if case.kind != kind:
            continue
        try:
            run_class_case(backend, case)
        except CheckFailedError as failure:
            failed.append((case.id, str(failure)))
    assert failed, f"{mutant.name} passed every {kind} case"


# Public API --------------------------------------------------------------------------------


def _fp8(rng, shape):
    return to_e4m3(rng.standard_normal(shape) * 4)


def test_scaled_mm_on_numpy_matches_the_dequantized_product():
    rng = np.random.default_rng(1)
    a, b = _fp8(rng, (20, 200)), _fp8(rng, (200, 140))
    sa, sb = (2.0 ** rng.uniform(-2, 2, (20, 2))).astype(np.float32), \
        (2.0 ** rng.uniform(-2, 2, (2, 2))).astype(np.float32)
    c = gemmzoo.scaled_mm(a, b, sa, sb, backend="numpy")
    assert c.dtype == BFLOAT16 and c.shape == (20, 140)
    ref = dequantized(e4m3_to_float32(a), sa, "blockwise", "A") @ dequantized(e4m3_to_float32(b), sb,
                                                                               "blockwise", "B")
    np.testing.assert_allclose(c.astype(np.float64), ref, rtol=2**-7, atol=1e-3 * np.abs(ref).max())
    c16 = gemmzoo.scaled_mm(a, b, sa, sb, out_dtype="float16", backend="numpy")
    assert c16.dtype == np.float16


def test_scaled_mm_errors_name_the_shapes():
    rng = np.random.default_rng(2)
    a, b = _fp8(rng, (8, 16)), _fp8(rng, (16, 4))
    with pytest.raises(GemmInputError, match=r"\(8, 3\).*fit no scaling"):
        gemmzoo.scaled_mm(a, b, np.ones((8, 3), np.float32), np.ones((1, 4), np.float32))
    with pytest.raises(GemmInputError, match="float8_e4m3fn"):
        gemmzoo.scaled_mm(a.astype(np.float32), b, 1.0, 1.0)
    with pytest.raises(GemmInputError, match="out_dtype"):
        gemmzoo.scaled_mm(a, b, 1.0, 1.0, out_dtype="float64")


def test_grouped_mm_on_numpy_multiplies_each_group_by_its_b():
    rng = np.random.default_rng(3)
    groups = [3, 0, 1, 6]
    a, b = rng.standard_normal((10, 7)).astype(np.float32), rng.standard_normal((4, 7, 5)).astype(np.float32)
    offsets = np.cumsum(groups).astype(np.int32)
    c = gemmzoo.grouped_mm(a, b, offsets)
    for g, (start, stop) in enumerate(group_bounds(offsets.tolist())):
        np.testing.assert_allclose(c[start:stop], a[start:stop] @ b[g], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("offsets, match", [([3, 1, 5, 10], "must not decrease"), ([1, 2, 3, 11], "past A"),
                                            ([1, 2, 3], "one end row per group")])
def test_grouped_mm_errors_name_the_shapes(offsets, match):
    a, b = np.ones((10, 7), np.float32), np.ones((4, 7, 5), np.float32)
    with pytest.raises(GemmInputError, match=match) as error:
        gemmzoo.grouped_mm(a, b, np.asarray(offsets, np.int32), backend="numpy")
    assert "(10, 7)" in str(error.value) and "(4, 7, 5)" in str(error.value)


def test_batched_matmul_broadcasts_as_numpy_does():
    rng = np.random.default_rng(4)
    a = rng.standard_normal((2, 1, 6, 5)).astype(np.float32)
    b = rng.standard_normal((3, 5, 4)).astype(np.float32)
    c = gemmzoo.matmul(a, b)
    assert c.shape == (2, 3, 6, 4) and c.dtype == np.float32
    np.testing.assert_allclose(c, np.matmul(a, b), rtol=1e-5, atol=1e-5)
    with pytest.raises(GemmInputError, match="do not broadcast"):
        gemmzoo.matmul(np.ones((2, 3, 4), np.float32), np.ones((3, 4, 5), np.float32))


def test_batched_matmul_through_a_backend_without_the_class_loops_its_products():
    class GemmOnly(NumpyBackend):
        name = "gemm-only"
        classes = frozenset({"gemm"})

    rng = np.random.default_rng(5)
    a, b = rng.standard_normal((3, 4, 5)).astype(np.float32), rng.standard_normal((5, 2)).astype(np.float32)
    c = gemmzoo.matmul(a, b, backend=GemmOnly())
    np.testing.assert_allclose(c, np.matmul(a, b), rtol=1e-5, atol=1e-5)


def test_fp8_grouped_mm_returns_bfloat16():
    rng = np.random.default_rng(6)
    a, b = _fp8(rng, (5, 8)), _fp8(rng, (2, 8, 3))
    c = gemmzoo.grouped_mm(a, b, np.array([2, 5], np.int32), backend="numpy")
    assert c.dtype == BFLOAT16 and a.dtype == E4M3
    wide_a, wide_b = e4m3_to_float32(a), e4m3_to_float32(b)
    ref = np.concatenate([wide_a[:2] @ wide_b[0], wide_a[2:] @ wide_b[1]])
    np.testing.assert_allclose(c.astype(np.float32), ref, rtol=2**-7, atol=1e-2)


# torch --------------------------------------------------------------------------------------


def test_torch_cpu_passes_its_class_cases():
    pytest.importorskip("torch")
    report = check_backend(gemmzoo.get_backend("torch-cpu"), dtypes=["bfloat16", "float32"])
    assert {r.check.split("-")[0] for r in report.results} >= {"batched", "grouped"}
    assert report.passed, [f.detail for f in report.failures]


def test_torch_grouped_and_batched_calls_return_tensors():
    torch = pytest.importorskip("torch")
    gen = torch.Generator().manual_seed(7)
    a = torch.randn(12, 16, generator=gen, dtype=torch.bfloat16)
    b = torch.randn(3, 16, 8, generator=gen, dtype=torch.bfloat16)
    offs = torch.tensor([4, 4, 12], dtype=torch.int32)
    c = gemmzoo.grouped_mm(a, b, offs)
    assert isinstance(c, torch.Tensor) and c.dtype == torch.bfloat16 and c.shape == (12, 8)
    expected = torch.cat([a[:4].float() @ b[0].float(), a[4:].float() @ b[2].float()])
    torch.testing.assert_close(c.float(), expected, rtol=2**-7, atol=0.05)
    x = torch.randn(2, 1, 5, 6, generator=gen)
    y = torch.randn(3, 6, 4, generator=gen)
    torch.testing.assert_close(gemmzoo.matmul(x, y), torch.matmul(x, y))


def test_batched_matmul_on_tensors_that_require_grad_is_differentiable():
    torch = pytest.importorskip("torch")
    gen = torch.Generator().manual_seed(8)
    x = torch.randn(3, 5, 6, generator=gen, dtype=torch.float64, requires_grad=True)
    y = torch.randn(6, 4, generator=gen, dtype=torch.float64, requires_grad=True)
    c = gemmzoo.matmul(x, y)
    assert c.requires_grad
    c.sum().backward()
    gx, gy = x.grad.clone(), y.grad.clone()
    x.grad = y.grad = None
    torch.matmul(x, y).sum().backward()
    torch.testing.assert_close(gx, x.grad)
    torch.testing.assert_close(gy, y.grad)


def test_scaled_mm_takes_torch_fp8_tensors_on_the_cpu_through_the_reference():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(9)
    a8, b8 = _fp8(rng, (6, 32)), _fp8(rng, (32, 5))
    a = torch.from_numpy(a8.view(np.uint8)).view(torch.float8_e4m3fn)
    b = torch.from_numpy(np.ascontiguousarray(b8.T).view(np.uint8)).view(torch.float8_e4m3fn).t()
    sa = torch.rand(6, 1) + 0.5
    sb = torch.rand(1, 5) + 0.5
    c = gemmzoo.scaled_mm(a, b, sa, sb, out_dtype=torch.float32)
    assert isinstance(c, torch.Tensor) and c.dtype == torch.float32
    ref = dequantized(e4m3_to_float32(a8), sa.numpy(), "rowwise", "A") @ dequantized(
        e4m3_to_float32(b8), sb.numpy(), "rowwise", "B")
    np.testing.assert_allclose(c.numpy(), ref, rtol=1e-5, atol=1e-4)


@pytest.mark.gpu
def test_torch_cuda_passes_its_class_cases():
    report = check_backend(gemmzoo.get_backend("torch"), dtypes=["bfloat16", "float32", "float8_e4m3fn"])
    assert {r.check.split("-")[0] for r in report.results} >= {"batched", "scaled", "grouped"}
    assert report.passed, [f.detail for f in report.failures]


# Model grids -------------------------------------------------------------------------------


def test_model_grids_count_each_product_of_a_forward_pass():
    from gemmzoo.problems.model_grids import MODELS, model_grid, weighted_summary

    llama = {p.role: p for p in model_grid("llama3-8b", tokens=16)}
    assert llama["qkv"].problem.shape == (16, 6144, 4096) and llama["qkv"].count == 32
    assert llama["attn-scores"].problem.text() == "bmm:32x16x16x128"
    mixtral = {p.role: p for p in model_grid("mixtral-8x7b", tokens=16)}
    assert mixtral["moe-down"].problem.groups == (4,) * 8
    deepseek = {p.role: p for p in model_grid("deepseek-v3", tokens=64)}
    assert deepseek["q-down"].problem.scaling == "blockwise"
    assert len(deepseek["moe-gate-up"].problem.groups) == 256
    for name in MODELS:
        assert all(parse_problem(p.problem.text(), dtype=p.problem.dtype) == p.problem
                   for p in model_grid(name, tokens=8))
    points = model_grid("qwen2.5-7b", tokens=8)[:2]
    times = {points[0].problem.text(): {"base": 2.0, "fast": 1.0}, points[1].problem.text(): {"base": 1.0}}
    summary = weighted_summary(points, times, "base")
    assert summary.ratio == pytest.approx((2.0 * 28 + 1.0 * 28) / (1.0 * 28 + 1.0 * 28))
    with pytest.raises(ValueError, match="known"):
        model_grid("gpt-5")


def test_a_backend_declaring_a_class_without_its_method_is_refused():
    from gemmzoo.contract.validation import backend_problem

    class Claims(NumpyBackend):
        name = "claims-classes"

    Claims.bmm = gemmzoo.Backend.bmm
    assert "does not implement bmm" in backend_problem(Claims())
    Claims.classes = frozenset({"gemm", "sparse"})
    assert "'sparse' unknown" in backend_problem(Claims())
    Claims.classes = "batched"
    assert "must be a set" in backend_problem(Claims())
    assert backend_problem(NumpyBackend()) is None


def test_jax_passes_its_batched_cases():
    pytest.importorskip("jax")
    backend = gemmzoo.get_backend("jax")
    if backend.unavailable_reason() is not None:
        pytest.skip(backend.unavailable_reason())
    cases = [c for c in class_cases(backend, {"float32", "bfloat16"}) if c.kind == "batched"]
    assert cases
    for case in cases:
        run_class_case(backend, case)


@pytest.mark.gpu
def test_every_cuda_backend_passes_the_cases_of_its_classes():
    checked = []
    for backend in gemmzoo.backends():
        if backend.device != "cuda" or backend.unavailable_reason() is not None:
            continue
        for case in class_cases(backend):
            run_class_case(backend, case)
            checked.append((backend.name, case.kind))
    assert {kind for _, kind in checked} >= {"batched", "scaled", "grouped"}


def test_a_numpy_batched_call_loads_no_framework():
    import subprocess
    import sys

    code = ("import sys, numpy as np, gemmzoo\n"
            "c = gemmzoo.matmul(np.ones((2, 3, 4), np.float32), np.ones((4, 5), np.float32))\n"
            "assert c.shape == (2, 3, 5)\n"
            "print(sorted(m for m in ('torch', 'jax', 'cupy', 'triton') if m in sys.modules))\n")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         check=False)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.strip() == "[]"
