"""``nvmath-cublaslt`` (cuBLASLt through nvmath-python, autotuned per problem): registration,
availability and declared traits on any machine; its plans on the CPU through a test double of
nvmath's ``Matmul`` (:mod:`fake_nvmath`); the conformance suite and random products against the
float64 reference on a GPU (marked ``gpu``)."""

from __future__ import annotations

import gc
import importlib.util
import sys
import threading
import weakref

import numpy as np
import pytest

import gemmzoo
from gemmzoo.errors import GemmInputError

torch = pytest.importorskip("torch")

import fake_nvmath  # noqa: E402
from backends_here import available  # noqa: E402

from gemmzoo import TF32Array  # noqa: E402
from gemmzoo.conformance import check_backend  # noqa: E402
from gemmzoo_torch import nvmath_cublaslt  # noqa: E402
from gemmzoo_torch.nvmath_cublaslt import NvmathCublasLtBackend, alignment, in_place  # noqa: E402

NAME = "nvmath-cublaslt"
DTYPES = {"float16", "bfloat16", "float32", "tf32", "float64"}


class CpuDouble(NvmathCublasLtBackend):
    """The backend on CPU tensors, for the plans' logic under :mod:`fake_nvmath`."""

    name = "nvmath-cublaslt-double"
    device = "cpu"
    tensor_device = "cpu"

    def __init__(self, autotune=True, min_autotune_work=1, **keywords):
        super().__init__(autotune, min_autotune_work=min_autotune_work, **keywords)

    def unavailable_reason(self):
        return None

    def synchronize(self):
        return None


@pytest.fixture
def fake(monkeypatch):
    return fake_nvmath.install(monkeypatch)


def _random(shape, dtype=torch.float32, seed=0):
    """Random normal values in a new row-major tensor whose data starts on a 256-byte boundary, as
    CUDA allocations do (torch's CPU allocations are only 64-byte aligned)."""
    generator = torch.Generator().manual_seed(seed)
    values = torch.randn(shape, generator=generator, dtype=torch.float64).to(dtype)
    size = values.element_size()
    buffer = torch.empty(values.numel() + 256 // size, dtype=dtype)
    start = (-buffer.data_ptr() % 256) // size
    tensor = buffer[start:start + values.numel()].view(shape)
    tensor.copy_(values)
    return tensor


def _assert_product(c, a, b, rtol=1e-5):
    """Every element of ``c`` against the float64 product of the operands' values."""
    reference = a.double() @ b.double()
    assert c.shape == reference.shape and c.dtype == a.dtype
    scale = a.double().abs() @ b.double().abs()
    assert bool(((c.double() - reference).abs() <= rtol * scale + 1e-30).all())


# --- registration, availability, traits (no nvmath, no GPU) ---------------------------------------


def test_it_is_registered_by_the_torch_plugin_with_its_traits():
    backend = gemmzoo.get_backend(NAME)
    assert type(backend) is NvmathCublasLtBackend
    assert type(backend).__module__ == "gemmzoo_torch.nvmath_cublaslt"
    assert backend.device == "cuda" and set(backend.dtypes) == DTYPES
    assert "float8_e4m3fn" not in backend.dtypes
    assert backend.requires == ("torch", "nvmath")
    assert backend.compiles_per_problem is True  # autotuning times every candidate per new problem
    assert backend.searches_over == () and backend.stream_ordered is True
    assert backend.classes == frozenset({"gemm"}) and backend.library_product is None
    assert backend.for_tuning() is backend


def test_the_heuristic_variant_does_not_compile_per_problem():
    backend = NvmathCublasLtBackend(autotune=False)
    assert backend.compiles_per_problem is False and backend.iterations == 0


@pytest.mark.parametrize("keywords", [{"iterations": 0}, {"iterations": True}, {"limit": 0}, {"limit": 2.5},
                                      {"min_autotune_work": 0}])
def test_bad_settings_are_refused_naming_the_backend(keywords):
    with pytest.raises(ValueError, match=NAME):
        NvmathCublasLtBackend(**keywords)


def test_without_nvmath_it_is_unavailable_with_the_install_hint_and_nothing_imported(monkeypatch):
    real = importlib.util.find_spec

    def without_nvmath(name, *args, **kwargs):
        return None if name == "nvmath" or name.startswith("nvmath.") else real(name, *args, **kwargs)

    monkeypatch.setattr(importlib.util, "find_spec", without_nvmath)
    before = {name for name in sys.modules if name.split(".")[0] == "nvmath"}
    reason = NvmathCublasLtBackend().unavailable_reason()
    assert reason == "nvmath-python is not installed (pip install 'gemmzoo[nvmath]')"
    assert {name for name in sys.modules if name.split(".")[0] == "nvmath"} == before


def test_the_extra_the_hint_names_exists():
    import re
    from pathlib import Path

    project = (Path(__file__).resolve().parent.parent / "pyproject.toml").read_text()
    extra = re.search(r"^nvmath = \[(.*)\]$", project, re.MULTILINE)
    assert extra is not None and '"nvmath-python' in extra.group(1)


def test_an_nvmath_without_the_members_a_plan_calls_is_said_to_be_too_old(fake, monkeypatch):
    from nvmath.linalg.advanced import Matmul

    assert importlib.util.find_spec("nvmath") is not None  # the double counts as installed
    monkeypatch.delattr(Matmul, "release_operands")
    reason = nvmath_cublaslt._probe_reason()
    assert reason == ("nvmath-python's Matmul lacks release_operands (1.0 or later is needed: "
                      "pip install -U 'nvmath-python>=1.0')")


def test_alignment_is_the_largest_power_of_two_up_to_256():
    assert [alignment(address) for address in (512, 256, 96, 6, 1, 1 << 40)] == [256, 256, 32, 2, 1, 256]


@pytest.mark.parametrize(("shape", "strides", "expected"), [
    ((4, 6), (6, 1), True),      # row-major
    ((4, 6), (10, 1), True),     # row-major, wider leading dimension
    ((4, 6), (1, 4), True),      # column-major (a transposed view)
    ((4, 6), (12, 2), False),    # strided slice: no unit stride
    ((4, 6), (0, 1), False),     # rows broadcast: the leading stride overlaps them
    ((4, 6), (1, 1), False),     # overlapping columns
    ((1, 6), (0, 2), True),      # one row, any stride
    ((4, 1), (3, 7), True),      # one column, any stride
])
def test_layouts_cublaslt_reads_in_place(shape, strides, expected):
    assert in_place(shape, strides) is expected


def test_bad_input_is_refused_naming_the_backend_and_the_shapes():
    backend = gemmzoo.get_backend(NAME)
    a, b = torch.ones((3, 4)), torch.ones((5, 6))
    with pytest.raises(GemmInputError, match=r"nvmath-cublaslt: matmul of A \(3, 4\), B \(5, 6\): inner"):
        backend.prepare(a, b)
    with pytest.raises(GemmInputError, match=r"nvmath-cublaslt: .*A \(3, 4\), B \(4, 2\).*one cuda device"):
        backend.matmul(a, torch.ones((4, 2)))
    with pytest.raises(GemmInputError, match=r"nvmath-cublaslt: .*must be torch tensors, not ndarray"):
        backend.matmul(np.ones((3, 4), np.float32), np.ones((4, 2), np.float32))
    with pytest.raises(GemmInputError, match=r"nvmath-cublaslt: .*float16 but B is float32"):
        backend.matmul(torch.ones((3, 4), dtype=torch.float16), torch.ones((4, 2)))


# --- the plans, through the test double of nvmath ---------------------------------------------------


def test_a_problem_is_planned_and_autotuned_once_then_each_call_resets_executes_and_releases(fake):
    backend = CpuDouble()
    a, b = _random((5, 7)), _random((7, 3), seed=1)
    run = backend.prepare(a, b)
    assert [event for event, _ in fake.events] == ["construct", "plan", "autotune", "release"]
    assert fake.of("autotune") == [nvmath_cublaslt.AUTOTUNE_ITERATIONS]
    assert fake.of("construct")[0]["compute_type"] == "COMPUTE_32F"
    assert fake.of("plan") == [{"reduction": "MASK"}]
    for seed in range(3):
        x, y = _random((5, 7), seed=10 + seed), _random((7, 3), seed=20 + seed)
        _assert_product(run(x, y), x, y)
    assert [event for event, _ in fake.events[4:]] == ["reset", "execute", "release"] * 3
    # the autotuned algorithm (the double's autotune puts candidate 2 first), its workspace released
    assert {(e["algorithm"], e["release_workspace"]) for e in fake.of("execute")} == {(2, True)}
    # every later plan and matmul of the problem is the same plan: no second autotune
    assert backend.prepare(_random((5, 7), seed=3), _random((7, 3), seed=4)) is run
    _assert_product(backend.matmul(a, b), a, b)
    assert fake.count("autotune") == 1 and fake.count("construct") == 1


def test_small_problems_run_the_heuristics_pick_without_autotuning(fake):
    backend = CpuDouble(min_autotune_work=1000)
    small, large = (_random((5, 7)), _random((7, 3), seed=1)), (_random((10, 10)), _random((10, 10), seed=1))
    for a, b in (small, large):
        _assert_product(backend.matmul(a, b), a, b)
    assert fake.count("autotune") == 1  # 10·10·10 = 1000 multiply-adds only
    assert [event["algorithm"] for event in fake.of("execute")] == [0, 2]
    assert gemmzoo.get_backend(NAME).min_autotune_work == nvmath_cublaslt.MIN_AUTOTUNE_WORK == 256**3


def test_the_least_recently_used_plan_is_dropped_beyond_the_kept_number(fake):
    backend = CpuDouble(kept_plans=2)
    operands = [(_random((m, 4)), _random((4, 3), seed=m)) for m in (2, 3, 5)]
    plans = [backend.prepare(a, b) for a, b in operands]
    assert backend.prepare(*operands[1]) is plans[1] and backend.prepare(*operands[2]) is plans[2]
    assert fake.count("construct") == 3
    assert backend.prepare(*operands[0]) is not plans[0]  # dropped: planned again
    assert fake.count("construct") == 4


def test_without_autotune_the_heuristics_first_pick_runs(fake):
    backend = CpuDouble(autotune=False)
    a, b = _random((6, 4)), _random((4, 5), seed=1)
    _assert_product(backend.matmul(a, b), a, b)
    assert fake.count("autotune") == 0 and fake.of("execute")[0]["algorithm"] == 0


@pytest.mark.parametrize(("dtype", "compute", "reduction"), [
    ("float16", "COMPUTE_32F", "COMPUTE_TYPE"),
    ("bfloat16", "COMPUTE_32F", "COMPUTE_TYPE"),
    ("tf32", "COMPUTE_32F_FAST_TF32", "MASK"),
    ("float64", "COMPUTE_64F", "MASK"),
])
def test_each_dtype_gets_its_compute_type_and_reductions(fake, dtype, compute, reduction):
    backend = CpuDouble()
    rng = np.random.default_rng(3)
    a = backend.from_numpy(rng.standard_normal((4, 6)), dtype)
    b = backend.from_numpy(rng.standard_normal((6, 3)), dtype)
    c = backend.matmul(a, b)
    assert fake.of("construct")[0]["compute_type"] == compute
    assert fake.of("plan") == [{"reduction": reduction}]
    if dtype == "tf32":
        assert isinstance(c, TF32Array)
        _assert_product(c.data, a.data, b.data)
    else:
        _assert_product(c, a, b, rtol=2**-7)


def test_a_product_nvmath_cannot_plan_is_said_with_the_backend_and_the_problem(fake, monkeypatch):
    from nvmath.linalg.advanced import Matmul

    def no_algorithm(self, **keywords):
        raise RuntimeError("Planning failed to find any suitable algorithm.")

    monkeypatch.setattr(Matmul, "plan", no_algorithm)
    backend = CpuDouble()
    with pytest.raises(RuntimeError, match=r"^nvmath-cublaslt-double: nvmath could not plan cuBLASLt's "
                       r"product of A \(3, 4\) strides \(4, 1\), B \(4, 2\) strides \(2, 1\), float32, .*"
                       r"RuntimeError: Planning failed"):
        backend.prepare(_random((3, 4)), _random((4, 2)))
    assert fake.count("construct") == 1


def test_a_plan_keeps_no_operand_alive(fake):
    backend = CpuDouble()
    a, b = _random((8, 5)), _random((5, 4), seed=1)
    run = backend.prepare(a, b)
    c = run(a, b)
    refs = [weakref.ref(t) for t in (a, b)]
    del a, b, c
    gc.collect()
    assert all(ref() is None for ref in refs)
    assert run is not None


def test_strided_slices_are_copied_and_transposed_views_read_in_place(fake):
    backend = CpuDouble()
    base_a, base_b = _random((20, 18)), _random((10, 14), seed=1)
    a, b = base_a[1::2, 1::2], base_b.T  # A: no unit stride; B: column-major 14x10
    a = a[:, :7]
    b = b[:7]
    run = backend.prepare(a, b)
    c = run(a, b)
    _assert_product(c, a, b)
    construct = fake.of("construct")[0]
    assert construct["strides"] == ((7, 1), b.stride())  # A copied contiguous, B as it is
    assert fake.of("execute")[0]["strides"] == ((7, 1), b.stride())
    assert torch.equal(base_a[1::2, 1::2][:, :7], a)  # the operands are unchanged


def test_a_less_aligned_operand_gets_an_algorithm_planned_for_its_alignment(fake):
    backend = CpuDouble()
    big = _random((6, 9))
    a, b = big[:, :8], _random((8, 4), seed=1)  # A row-major, aligned as allocated
    run = backend.prepare(a, b)
    shifted = big[:, 1:]  # the same problem (shape, strides), 4 bytes into the allocation
    _assert_product(run(shifted, b), shifted, b)
    assert fake.count("autotune") == 2
    assert fake.of("construct")[1]["pointers"][0] % 8 == 4
    _assert_product(run(shifted, b), shifted, b)  # made once per alignment
    _assert_product(run(a, b), a, b)
    assert fake.count("autotune") == 2 and fake.count("construct") == 2


@pytest.mark.parametrize("shape", [(0, 4, 3), (5, 0, 3), (5, 4, 0), (0, 0, 0)])
def test_empty_products_launch_nothing_and_give_zeros(fake, shape):
    m, n, k = shape
    backend = CpuDouble()
    a, b = _random((m, k)), _random((k, n), seed=1)
    run = backend.prepare(a, b)
    c, again = run(a, b), run(a, b)
    assert c.shape == (m, n) and c.dtype == torch.float32 and bool((c == 0).all())
    assert c is not again and (c.numel() == 0 or c.data_ptr() != again.data_ptr())
    assert fake.events == []


def test_another_thread_gets_its_own_matmul_with_the_chosen_algorithm(fake):
    backend = CpuDouble()
    a, b = _random((9, 6)), _random((6, 5), seed=1)
    run = backend.prepare(a, b)
    results = []
    thread = threading.Thread(target=lambda: results.append(run(a, b)))
    thread.start()
    thread.join()
    _assert_product(results[0], a, b)
    assert fake.count("autotune") == 1 and fake.of("plan-with") == [[2]]
    threads = {event["thread"] for event in fake.of("construct")}
    assert len(threads) == 2


def test_the_double_conforms_so_the_plans_meet_the_suite_by_construction(fake):
    """The whole suite (layouts, edge and empty shapes, fresh results, repeats, errors) on the
    plans with nvmath's ``Matmul`` replaced by the double: what the GPU run adds is cuBLASLt."""
    report = check_backend(CpuDouble(), dtypes=["float32", "float64"], timeout=None)
    assert report.passed, [(r.check, r.detail) for r in report.failures]


# --- on a GPU -----------------------------------------------------------------------------------------

#: Seconds each case may take: every new problem is autotuned.
CASE_LIMIT_S = 300


@pytest.mark.gpu
def test_it_conforms_on_the_gpu():
    report = check_backend(available(NAME), dtypes=sorted(DTYPES), timeout=CASE_LIMIT_S)
    assert report.passed, [(r.check, r.detail) for r in report.failures]


@pytest.mark.gpu
@pytest.mark.parametrize(("shape", "dtype", "layout"), [
    ((4097, 1023, 515), "float16", "NN"),    # rows not 16-byte aligned
    ((1000, 2048, 1536), "bfloat16", "TN"),  # A a transposed (column-major) view
    ((333, 517, 1029), "tf32", "NT"),
    ((512, 384, 1001), "float32", "TT"),
    ((129, 257, 65), "float64", "NN"),
])
@pytest.mark.parametrize("autotune", [True, False], ids=["autotuned", "heuristic"])
def test_random_products_match_the_float64_reference_on_the_gpu(shape, dtype, layout, autotune):
    from gemmzoo.measure.problems import make_problem
    from gemmzoo.measure.reference import judge_problem
    from gemmzoo.problems.grids import GridPoint

    backend = available(NAME)
    if not autotune:
        backend = NvmathCublasLtBackend(autotune=False)
    problem = make_problem(backend, GridPoint(*shape, dtype, layout), seed=7)
    deviation = judge_problem(problem)  # every element within the suite's bound, or it raises
    assert deviation.error_ratio <= 1


@pytest.mark.gpu
def test_calls_run_on_the_current_stream_and_from_other_threads():
    backend = available(NAME)
    a = torch.randn((1031, 517), device="cuda", dtype=torch.float16)
    b = torch.randn((517, 769), device="cuda", dtype=torch.float16)
    run = backend.prepare(a, b)
    expected = (a.double() @ b.double())
    bound = 2**-9 * (a.double().abs() @ b.double().abs()) + 2**-24
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        c = run(a, b)
    side.synchronize()
    assert bool(((c.double() - expected).abs() <= bound).all())
    results = []
    thread = threading.Thread(target=lambda: results.append(run(a, b)))
    thread.start()
    thread.join()
    torch.cuda.synchronize()
    assert torch.equal(results[0], c)  # the same algorithm in every thread: bitwise the same


@pytest.mark.gpu
def test_an_operand_starting_inside_an_allocation_runs_an_algorithm_for_its_alignment_on_the_gpu():
    backend = available(NAME)
    big = torch.randn((1500, 1025), device="cuda", dtype=torch.bfloat16)
    b = torch.randn((1024, 700), device="cuda", dtype=torch.bfloat16)
    aligned, shifted = big[:, :-1], big[:, 1:]  # one problem (shape, strides); 2 bytes apart
    run = backend.prepare(aligned, b)
    bound = 2**-7 * (shifted.double().abs() @ b.double().abs()) + 2**-100
    for a in (shifted, aligned, shifted):
        c = run(a, b)
        assert bool(((c.double() - a.double() @ b.double()).abs() <= bound).all())
    assert torch.equal(big[:, 1:], shifted)
