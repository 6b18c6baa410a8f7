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


@pytest.mark.interpreter
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
    a, b = a.to(backend.device), b.to(backend.device)  # the host under the interpreter, else the GPU
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


def _grouped_reference_check(c, a, b, ends, tol):
    """Every row of every group against its float64 product; rows past the last end untouched."""
    start = 0
    for g, end in enumerate(ends):
        ref = a[start:end].double() @ b[g].double()
        np.testing.assert_allclose(c[start:end].double().numpy(), ref.numpy(), rtol=tol, atol=tol)
        start = end
    assert torch.isnan(c[start:].float()).all()


@pytest.mark.interpreter
@pytest.mark.parametrize("b_layout", ["row-major", "column-major"])
@pytest.mark.parametrize("dtype, promoted, halves", [("float32", False, False), ("float16", False, False),
                                                     ("float16", True, False), ("float16", True, True)])
def test_grouped_tma_kernel_on_ragged_groups(b_layout, dtype, promoted, halves):
    """The Hopper grouped kernel (descriptors, tiles scheduled across groups) under the
    interpreter: empty groups first, between and last, one-row groups, a group of several tiles,
    K and N that are not multiples of the tiles, and rows past the last offset left alone."""
    _available("triton-grouped")
    from gemmzoo_triton.core import grouped_mm_tma

    torch_dtype = getattr(torch, dtype)
    k, n = 40, 56  # 16-byte rows for both dtypes; K and N past whole tiles of 16 and 32
    ends = [0, 1, 18, 18, 19, 53, 53]
    gen = torch.Generator().manual_seed(21)
    a = torch.randn(57, k, generator=gen).to(torch_dtype)
    b = torch.randn(len(ends), k, n, generator=gen).to(torch_dtype)
    if b_layout == "column-major":
        b = b.transpose(1, 2).contiguous().transpose(1, 2)
    assert grouped_mm_tma.eligible(a, b) and grouped_mm_tma.b_transposed(b) == (b_layout == "column-major")
    c = torch.full((57, n), float("nan"), dtype=torch_dtype)
    offsets = torch.tensor(ends, dtype=torch.int32)
    config = grouped_mm_tma.INTERPRETER_SPLIT_CONFIG if halves else grouped_mm_tma.INTERPRETER_CONFIG
    grouped_mm_tma.launch(a, b, offsets, c, grouped_mm_tma.INTERPRETER_PROGRAMS, config, promoted=promoted)
    _grouped_reference_check(c, a, b, ends, 1e-5 if dtype == "float32" else 1e-2)


def test_grouped_tma_eligibility_and_configs():
    from gemmzoo_triton.core import grouped_mm_tma

    a = torch.empty(64, 40, dtype=torch.float16)
    assert grouped_mm_tma.eligible(a, torch.empty(2, 40, 56, dtype=torch.float16))
    assert not grouped_mm_tma.eligible(a, torch.empty(2, 40, 50, dtype=torch.float16))  # 100-byte rows
    assert not grouped_mm_tma.eligible(torch.empty(64, 36, dtype=torch.float16)[:, :35],
                                       torch.empty(2, 35, 56, dtype=torch.float16))
    config = grouped_mm_tma.parse_config("128x256x64/s3/w8/p2")
    assert (config.block_m, config.block_n, config.block_k, config.stages, config.warps, config.per_sm,
            config.split_m) == (128, 256, 64, 3, 8, 2, 1)
    assert grouped_mm_tma.parse_config(config.text()) == config
    halves = grouped_mm_tma.parse_config("128x128x128/s3/w4/p2/h2")
    assert halves.split_m == 2 and grouped_mm_tma.parse_config(halves.text()) == halves
    for bad in ("128x256", "128x256x64/q3", "128x256x64/h3"):
        with pytest.raises(ValueError, match="BMxBNxBK"):
            grouped_mm_tma.parse_config(bad)
    big_a, big_b = torch.empty(4096, 64, dtype=torch.bfloat16), torch.empty(8, 64, 4096, dtype=torch.bfloat16)
    assert grouped_mm_tma.config_for(big_a, big_b, 8) == grouped_mm_tma.HOPPER_CONFIGS[2]
    assert grouped_mm_tma.config_for(big_a[:512], big_b, 8) == grouped_mm_tma.NARROW_CONFIGS[2]
    for configs in (grouped_mm_tma.HOPPER_CONFIGS, grouped_mm_tma.NARROW_CONFIGS):
        assert all(c.per_sm * c.shared_bytes(size) <= 227 * 1024 for size, c in configs.items())


@pytest.mark.parametrize("n", [56, 50])
def test_grouped_pointer_kernel_masks_columns_past_n(n):
    """B's columns are masked (not clamped) in the pointer kernel: N a multiple of the tile's
    vector width and not."""
    backend = _available("triton-grouped")
    from gemmzoo_triton.core import grouped_mm_kernel

    ends = [5, 5, 6, 37]
    gen = torch.Generator().manual_seed(22)
    a, b = torch.randn(40, 24, generator=gen), torch.randn(len(ends), 24, n, generator=gen)
    a, b = a.to(backend.device), b.to(backend.device)  # float32 dots are IEEE on the GPU too
    c = torch.full((40, n), float("nan"), device=a.device)
    grouped_mm_kernel.launch(a, b, torch.tensor(ends, dtype=torch.int32, device=a.device), c, 1)
    _grouped_reference_check(c.cpu(), a.cpu(), b.cpu(), ends, 1e-5)


@pytest.mark.interpreter
@pytest.mark.parametrize("scaling, shape", [("tensorwise", (40, 136, 48)), ("rowwise", (33, 200, 64)),
                                            ("blockwise", (70, 264, 304))])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_scaled_tma_kernel_structure_on_plain_floats(scaling, shape, dtype):
    """The Hopper scaled kernel (persistent, descriptors, halves of M, scales in the K loop or the
    epilogue) under the interpreter: M and N past whole tiles, K past whole 128-blocks (block-wise),
    several tiles per program; every element against the float64 product of the scaled operands."""
    _available("triton-fp8")
    from gemmzoo_triton.fp8 import scaled_tma_kernel

    m, n, k = shape
    gen = torch.Generator().manual_seed(23)
    a = torch.randn(m, k, generator=gen).to(getattr(torch, dtype))
    b = torch.randn(n, k, generator=gen).to(getattr(torch, dtype)).t()  # column-major, as passed
    sa_shape, sb_shape = scale_shapes(scaling, m, n, k)
    sa, sb = torch.rand(sa_shape, generator=gen) + 0.5, torch.rand(sb_shape, generator=gen) + 0.5
    c = torch.full((m, n), float("nan"))
    scaled_tma_kernel.launch(a, b, sa, sb, scaling, c, sms=2)
    deq_a = dequantized(a.float().numpy(), sa.numpy(), scaling, "A")
    ref = deq_a @ dequantized(b.float().numpy(), sb.numpy(), scaling, "B")
    np.testing.assert_allclose(c.numpy(), ref, rtol=1e-5, atol=1e-5 * np.abs(ref).max())


def test_class_benchmark_problem_sets_parse_and_name_their_dtype():
    """benchmarks/classes.py: every problem of its sets is a valid text form, with ``@DTYPE``
    where given; the grouped targets come in bf16 and fp8, the sweep configs parse."""
    import importlib.util
    from pathlib import Path

    from gemmzoo.problems.classes import parse_problem
    from gemmzoo_triton.core.grouped_mm_tma import parse_config

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "classes.py"
    spec = importlib.util.spec_from_file_location("classes_benchmark", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    dtypes = set()
    for text in bench.PROBLEM_SETS["all"]:
        form, _, dtype = text.partition("@")
        problem = parse_problem(form, dtype=dtype or "bfloat16")
        dtypes.add((problem.kind, problem.dtype))
    assert {("grouped", "bfloat16"), ("grouped", "float8_e4m3fn"), ("scaled", "float8_e4m3fn")} <= dtypes
    assert set(bench.PROBLEM_SETS["targets"]) == set(bench.SCALED_PROBLEMS + bench.GROUPED_PROBLEMS)
    for configs in bench.GROUPED_SWEEP.values():
        assert all(parse_config(text).text() == text for text in configs)
    # the sweep's reference for scaled problems without a torch call: the dequantized product
    for scaling in ("blockwise", "rowwise"):
        problem = parse_problem(f"scaled:{scaling}:64x200x300")
        ops = bench.operands(problem, "cpu", torch.bfloat16)
        ref = dequantized(ops["a"].float().numpy(), ops["scale_a"].numpy(), scaling, "A") @ \
            dequantized(ops["b"].float().numpy(), ops["scale_b"].numpy(), scaling, "B")
        got = bench.dequantized_product(ops, scaling).float().numpy()
        np.testing.assert_allclose(got, ref, rtol=2**-8, atol=2**-8 * np.abs(ref).max())


def _hopper_backend(**options):
    from gemmzoo_triton import TritonFp8Backend, TritonGroupedBackend

    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("needs a GPU of capability 9.0")
    if "gluon" in options:
        return TritonFp8Backend(**options)
    return TritonGroupedBackend()


@pytest.mark.gpu
@pytest.mark.parametrize("gluon", [True, False])
@pytest.mark.parametrize("scaling", ["tensorwise", "rowwise", "blockwise"])
def test_scaled_hopper_kernels_conform_past_the_tma_threshold(scaling, gluon):
    """The class cases are too small for the Hopper scaled kernels (Gluon, or Triton's TMA kernel
    with ``gluon=False``): the same check on a product past the threshold, with M, N and K (and so
    the last 128-block of K) not multiples of the tiles."""
    from gemmzoo.conformance.class_cases import ClassCase

    backend = _hopper_backend(gluon=gluon)
    for out in ("bfloat16", "float32") if scaling == "blockwise" else ("bfloat16",):
        case = ClassCase("scaled", scaling, "float8_e4m3fn", (scaling, 2112, 2088, 2064, out, "T"))
        run_class_case(backend, case)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float8_e4m3fn"])
def test_grouped_hopper_kernel_on_ragged_groups_of_many_tiles(dtype):
    """The grouped TMA kernel on groups of several tiles each, empty and one-row groups between
    (fp8: K padded to 16-byte rows first)."""
    from gemmzoo.conformance.class_cases import ClassCase

    backend = _hopper_backend(gluon=True) if dtype == "float8_e4m3fn" else _hopper_backend()
    groups = (0, 700, 1, 0, 1300, 129, 64)
    run_class_case(backend, ClassCase("grouped", "ragged-large", dtype, ("ragged-large", 1040, 1032, groups)))


def test_grouped_mm_with_k_zero_is_zeros():
    backend = _available("triton-grouped")
    on = backend.device
    a, b = torch.randn(5, 0, device=on), torch.randn(2, 0, 8, device=on)
    c = backend.grouped_mm(a, b, np.asarray([2, 5], np.int32))
    assert c.shape == (5, 8) and not c.any()


@pytest.mark.gpu
def test_class_operands_on_the_host_are_a_clear_error_on_the_gpu():
    """Host tensors handed to the GPU's grouped and scaled kernels: an error naming the backend,
    the call and the shapes, not a launch that fails inside Triton."""
    grouped = _available("triton-grouped")
    if grouped.device != "cuda":
        pytest.skip("the Triton backends run on the host here")
    a, b = torch.randn(9, 24), torch.randn(4, 24, 10)
    with pytest.raises(GemmInputError, match=r"triton-grouped: grouped_mm .*\(9, 24\).*A is on cpu"):
        grouped.grouped_mm(a, b, np.asarray([2, 2, 7, 9], np.int32))
    fp8 = _available("triton-fp8")
    x = torch.randn(16, 32).to(torch.float8_e4m3fn)
    y = torch.randn(32, 16).to(torch.float8_e4m3fn)
    with pytest.raises(GemmInputError, match=r"triton-fp8: scaled_mm .*\(16, 32\).*A is on cpu"):
        fp8.scaled_mm(x, y, torch.ones(1), torch.ones(1), "bfloat16")


def test_class_operands_on_another_device_than_the_backends_are_a_clear_error():
    """The same check wherever the backends run: tensors on the ``meta`` device are on no
    device a Triton backend runs on."""
    grouped, fp8 = _available("triton-grouped"), _available("triton-fp8")
    a, b = torch.randn(9, 24, device="meta"), torch.randn(4, 24, 10, device="meta")
    with pytest.raises(GemmInputError, match=r"triton-grouped: grouped_mm .*\(9, 24\).*A is on meta"):
        grouped.grouped_mm(a, b, np.asarray([2, 2, 7, 9], np.int32))
    x = torch.empty(16, 32, dtype=torch.float8_e4m3fn, device="meta")
    y = torch.empty(32, 16, dtype=torch.float8_e4m3fn, device="meta")
    with pytest.raises(GemmInputError, match=r"triton-fp8: scaled_mm .*\(16, 32\).*A is on meta"):
        fp8.scaled_mm(x, y, torch.ones(()), torch.ones(()), "bfloat16")


@pytest.mark.interpreter
def test_triton_fp8_scaled_plans_are_kept_per_problem_and_bad_input_never():
    """triton-fp8 decides a scaled problem's route once (a kept plan): a later call of the problem
    with other values and scales computes with those, another layout of B gets a plan of its own,
    and a call that is refused keeps nothing."""
    backend = _available("triton-fp8")
    on = "cuda" if backend.device == "cuda" else "cpu"
    m, n, k = 24, 40, 48
    gen = torch.Generator().manual_seed(5)

    def operands(b_columns):
        a = (torch.randn(m, k, generator=gen) * 2).to(torch.float8_e4m3fn)
        b = (torch.randn(n, k, generator=gen) * 2).to(torch.float8_e4m3fn)
        b = b.t() if b_columns else b.t().contiguous()
        sa, sb = torch.rand(m, 1, generator=gen) + 0.5, torch.rand(1, n, generator=gen) + 0.5
        return a.to(on), b.to(on), sa.to(on), sb.to(on)

    def check(a, b, sa, sb):
        c = backend.scaled_mm(a, b, sa, sb, "bfloat16").float().cpu().numpy()
        ref = dequantized(a.float().cpu().numpy(), sa.cpu().numpy(), "rowwise", "A") @ \
            dequantized(b.float().cpu().numpy(), sb.cpu().numpy(), "rowwise", "B")
        np.testing.assert_allclose(c, ref, rtol=2**-7, atol=2**-7 * np.abs(ref).max())

    backend.__dict__.pop("_scaled_plans", None)
    check(*operands(True))
    check(*operands(True))
    assert len(backend._scaled_plans) == 1
    check(*operands(False))
    assert len(backend._scaled_plans) == 2
    a, b, sa, sb = operands(True)
    with pytest.raises(GemmInputError, match=r"triton-fp8: scaled_mm .*out_dtype must be one of"):
        backend.scaled_mm(a, b, sa, sb, "int8")
    with pytest.raises(GemmInputError, match=r"triton-fp8: scaled_mm .*\(24, 48\)"):
        backend.scaled_mm(a, b, sa[:5], sb, "bfloat16")
    assert len(backend._scaled_plans) == 2
