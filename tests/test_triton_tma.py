"""triton-grouped's TMA path: which problems take it, and its two kernels against float64.

The kernels run where the other Triton tests run: under the interpreter on CPU tensors (its
host-side tensor descriptors work there), or on a CUDA GPU with TMA (Hopper on).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from test_triton import ACTIVATIONS, available, reference

from gemmzoo_triton.core import hopper
from gemmzoo_triton.grouped import plan as grouped_plan
from gemmzoo_triton.grouped.backend import TritonGroupedBackend

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

ANY_SIZE = grouped_plan.RoutePolicy(tma_min_work=0)  # the layout and dtype rules decide alone
LAYOUTS = ("NN", "TN", "NT", "TT")  # A then B: N as stored, T a column-major view of a stored transpose
TMA = "tma_matmul_kernel"


def operand(rows: int, cols: int, transposed: bool, dtype: torch.dtype, device: str = "cpu", seed: int = 0):
    """A random normal rows x cols tensor, row-major, or column-major when ``transposed``."""
    values = torch.randn(rows, cols, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    stored = values.T.contiguous().T if transposed else values
    return stored.to(device=device, dtype=dtype)


@pytest.fixture(autouse=True)
def forget_plans():
    """Each test's monkeypatched routes and settings apply to the plans it makes: matmul must
    not reuse a plan an earlier test made for the same problem."""
    import gemmzoo

    gemmzoo.get_backend("triton-grouped")._plans.clear()
    yield
    gemmzoo.get_backend("triton-grouped")._plans.clear()


# Eligibility ------------------------------------------------------------------------------------


@pytest.fixture
def tma_gpu(monkeypatch):
    """Pretend every device is a GPU with TMA (:func:`eligible` takes every size by default), so
    that the layout and dtype rules decide alone."""
    monkeypatch.setattr(hopper, "tma_device", lambda device: True)


def test_problems_up_to_the_minimum_work_stay_on_the_pointer_kernel(monkeypatch):
    monkeypatch.setattr(hopper, "tma_device", lambda device: True)
    policy = grouped_plan.RoutePolicy(tma_min_work=64 * 128 * 256)
    assert not eligible(64, 128, 256, policy=policy)
    assert eligible(64, 128, 264, policy=policy)
    assert grouped_plan.MEASURED_ROUTES.tma_min_work == hopper.TMA_MIN_WORK


def eligible(m: int, n: int, k: int, dtype=torch.float16, layout="NN", precision="tf32",
             policy=ANY_SIZE) -> bool:
    x, y = operand(m, k, layout[0] == "T", dtype), operand(k, n, layout[1] == "T", dtype)
    return grouped_plan.tma_eligible(x, y, torch.empty(m, n, dtype=dtype), precision, policy)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_row_and_column_major_16_bit_operands_are_eligible(tma_gpu, layout, dtype):
    assert eligible(64, 128, 256, dtype, layout)
    assert eligible(1000, 1000, 1000, dtype, layout)  # rows of 2000 bytes: a multiple of 16


def test_only_16_bit_operands_are_eligible(tma_gpu):
    assert not eligible(64, 128, 256, torch.float32, precision="tf32")  # slower there on the H100
    assert not eligible(64, 128, 256, torch.float32, precision="ieee")
    assert not eligible(64, 128, 256, torch.float64, precision="ieee")


def test_rows_not_16_byte_aligned_are_not_eligible(tma_gpu):
    assert not eligible(4097, 4097, 4097)
    assert not eligible(64, 128, 36)  # A's rows: 72 bytes
    assert not eligible(36, 128, 64, layout="TN")  # rows of A's transpose: 72 bytes
    assert eligible(64, 128, 40)  # 80 bytes
    # C's rows alone: B, column-major, has rows of 128 bytes, C of 72
    assert not eligible(64, 36, 64, layout="NT")
    assert eligible(64, 40, 64, layout="NT")


def test_views_neither_row_nor_column_major_are_not_eligible(tma_gpu):
    b = torch.randn(64, 128, dtype=torch.float16)
    c = torch.empty(64, 64, dtype=torch.float16)
    every_other_column = torch.randn(64, 128, dtype=torch.float16)[:, ::2]
    assert not grouped_plan.tma_eligible(every_other_column, b[:, :64], c, "tf32", ANY_SIZE)
    # a slice with aligned rows is fine
    assert grouped_plan.tma_eligible(b[:, :64], b[:, :64], c, "tf32", ANY_SIZE)


def test_broadcast_views_are_not_eligible(tma_gpu):
    row = torch.randn(1, 64, dtype=torch.float16)
    b = torch.randn(64, 64, dtype=torch.float16)
    c = torch.empty(64, 64, dtype=torch.float16)
    # every row the same (stride 0), row- then column-major
    assert not grouped_plan.tma_eligible(row.expand(64, 64), b, c, "tf32", ANY_SIZE)
    assert not grouped_plan.tma_eligible(b, row.T.expand(64, 64), c, "tf32", ANY_SIZE)
    assert grouped_plan.tma_eligible(row.expand(64, 64).contiguous(), b, c, "tf32", ANY_SIZE)


def test_misaligned_start_is_not_eligible(tma_gpu):
    storage = torch.randn(64 * 64 + 1, dtype=torch.float16)
    shifted = storage[1:].view(64, 64)  # starts 2 bytes into a 16-byte aligned allocation
    aligned = storage[:-1].view(64, 64)
    c = torch.empty(64, 64, dtype=torch.float16)
    assert grouped_plan.tma_eligible(aligned, aligned, c, "tf32", ANY_SIZE)
    assert not grouped_plan.tma_eligible(shifted, aligned, c, "tf32", ANY_SIZE)
    assert not grouped_plan.tma_eligible(aligned, shifted, c, "tf32", ANY_SIZE)


def test_cpu_tensors_and_the_interpreter_never_take_the_tma_path(monkeypatch):
    assert not eligible(64, 128, 256)  # CPU tensors
    monkeypatch.setattr(hopper, "interpreter_mode", lambda: True)
    assert not hopper.tma_device(torch.device("cuda", 0))  # decided without asking CUDA


# The kernels ------------------------------------------------------------------------------------


def kernel_dtypes(backend) -> list[tuple[str, torch.dtype]]:
    """(the bound's dtype name, the tensors' dtype) for the 16-bit dtypes the mode computes, and
    float32 in "tf32" precision (which the interpreter computes in IEEE fp32, within tf32's bound)."""
    sixteen_bit = [("float16", torch.float16), ("bfloat16", torch.bfloat16)]
    declared = [(name, dtype) for name, dtype in sixteen_bit if name in backend.dtypes]
    return [*declared, ("tf32", torch.float32)]


def tma_backend():
    """triton-grouped, where its TMA kernels can run: the interpreter, or a GPU with TMA."""
    backend = available("triton-grouped")
    if backend.device == "cuda" and not hopper.tma_device(torch.device("cuda", 0)):
        pytest.skip("the GPU has no TMA (capability < 9.0) or Triton < 3.4")
    return backend


def force_route(monkeypatch, name: str):
    """Every problem on triton-grouped's route ``name``, every device taken for one with TMA (the
    interpreter runs the TMA kernels on CPU tensors); the backend, from :func:`tma_backend`."""
    backend = tma_backend()
    monkeypatch.setattr(grouped_plan, "route", lambda x, y, precision, gluon=True, policy=None: name)
    if backend.device == "cpu":
        monkeypatch.setattr(hopper, "tma_device", lambda device: True)
    return backend


def check_product(c, x, y, dtype_name: str, activation: str | None) -> None:
    """Every element of ``c`` within the float64 reference's bound; a negative one activated."""
    a_host, b_host = (t.double().cpu().numpy() for t in (x, y))
    product, bound = reference(a_host, b_host, x.shape[1], dtype_name)
    expected = ACTIVATIONS[activation](product) if activation else product
    got = c.double().cpu().numpy()
    assert not np.isnan(got).any(), "elements left unwritten"
    error = np.abs(got - expected)
    assert np.all(error <= bound), f"{int((error > bound).sum())} elements outside the bound"
    negative = product < -bound
    if activation:
        activated = got[negative] < 0 if activation == "leaky_relu" else got[negative] == 0
        assert negative.any() and np.all(activated)


def run_tma(x, y, activation: str | None, precision: str = "tf32"):
    from gemmzoo_triton.grouped import tma_kernel as grouped_tma_kernel

    c = torch.full((x.shape[0], y.shape[1]), float("nan"), device=x.device, dtype=x.dtype)
    config = grouped_tma_kernel.launch(x, y, c, precision, activation)
    return c, config


@pytest.mark.parametrize("activation", [None, "leaky_relu"])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_tma_kernel_matches_float64_reference(monkeypatch, layout, activation):
    """Ragged M, N and K (no multiple of the interpreter's 16x32x16 blocks): every element against
    the float64 bound."""
    backend = tma_backend()
    monkeypatch.setattr(hopper, "tma_device", lambda device: True)  # for the CPU tensors' eligibility
    m = 37 if layout[0] == "N" else 40  # a column-major A's transpose has rows of M elements
    n, k = 72, 56
    for seed, (name, dtype) in enumerate(kernel_dtypes(backend)):
        x = operand(m, k, layout[0] == "T", dtype, backend.device, seed)
        y = operand(k, n, layout[1] == "T", dtype, backend.device, seed + 100)
        if dtype != torch.float32:  # the backend sends only 16-bit types; the kernels take tf32 too
            assert grouped_plan.tma_eligible(x, y, torch.empty(m, n, dtype=dtype), "tf32", ANY_SIZE)
        c, _ = run_tma(x, y, activation)
        check_product(c, x, y, name, activation)


def test_second_call_launches_the_picked_config_with_its_block_shapes():
    """The second call skips the autotuner, and so its pre_hook: the launch must set the
    descriptors' block shapes itself (left at the 1x1 placeholder, the kernel would not build)."""
    backend = tma_backend()
    from gemmzoo_triton.core import autotune

    x = operand(48, 40, True, torch.float16, backend.device, 1)
    y = operand(40, 24, False, torch.float16, backend.device, 2)
    first, config = run_tma(x, y, "relu")
    key = (TMA, 48, 24, 40, "tf32", "torch.float16", True, False, False)
    assert autotune.PICKED[key] is config
    second, again = run_tma(x, y, "relu")
    assert again is config
    assert torch.equal(first, second)
    check_product(second, x, y, "float16", "relu")


@pytest.mark.parametrize("gluon", [True, False])
def test_backend_launches_the_tma_kernel_on_the_tma_route(monkeypatch, gluon):
    """The wiring: a problem on the TMA route with a fused activation (which the Gluon kernel does
    not take, with or without ``gluon``) runs the TMA kernel, through the backend's checks (and on
    a GPU its TF32Array handling); the route is forced, so that this runs under the interpreter
    too, where tf32 is not declared."""
    backend = TritonGroupedBackend(gluon=gluon)
    tma_backend()
    from gemmzoo_triton.core import autotune

    monkeypatch.setattr(grouped_plan, "route", lambda x, y, precision, gluon=True, policy=None: "tma")
    dtype = "tf32" if "tf32" in backend.dtypes else "float16"
    rng = np.random.default_rng(8)
    a = backend.from_numpy(rng.standard_normal((24, 32)), dtype)
    b = backend.from_numpy(rng.standard_normal((32, 40)), dtype)
    c = backend.matmul(a, b, activation="relu")
    assert type(c) is type(a)  # a TF32Array in, a TF32Array out
    check_product(c.data, a.data, b.data, dtype, "relu")  # .data: a TF32Array's tensor, a tensor's self
    key = (TMA, 24, 40, 32, "tf32", str(c.data.dtype), False, False, False)
    assert key in autotune.PICKED


def test_backend_uses_the_pointer_kernel_on_the_pointer_route(monkeypatch):
    backend = tma_backend()
    from gemmzoo_triton.core import autotune

    monkeypatch.setattr(grouped_plan, "route", lambda x, y, precision, gluon=True, policy=None: "pointer")
    rng = np.random.default_rng(9)
    a = backend.from_numpy(rng.standard_normal((24, 32)), "float16")
    b = backend.from_numpy(rng.standard_normal((32, 40)), "float16")
    c = backend.matmul(a, b)
    check_product(c, a, b, "float16", None)
    assert ("grouped_matmul_kernel", 24, 40, 32, "tf32", "torch.float16") in autotune.PICKED


# On a GPU ----------------------------------------------------------------------------------------


@pytest.mark.gpu
def test_tma_kernel_autotuned_on_gpu(empty_cache):
    """A problem large enough to autotune, ragged against every config's blocks, on the GPU's
    SM count: every declared dtype as stored, and float16 with both operands transposed. Fully
    autotuned, so that every config that fits is compiled and run (its pick kept in the test's
    own cache directory)."""
    backend = tma_backend()
    m, n, k = 296, 520, 776
    cases = [(name, dtype, "NN") for name, dtype in kernel_dtypes(backend)]
    cases.append(("float16", torch.float16, "TT"))
    for seed, (name, dtype, layout) in enumerate(cases):
        x = operand(m, k, layout[0] == "T", dtype, "cuda", seed)
        y = operand(k, n, layout[1] == "T", dtype, "cuda", seed + 100)
        c = torch.full((m, n), float("nan"), device="cuda", dtype=dtype)
        from gemmzoo_triton.grouped import tma_kernel as grouped_tma_kernel

        grouped_tma_kernel.launch(x, y, c, "tf32", mode="full")
        check_product(c, x, y, name, None)


@pytest.mark.gpu
def test_backend_picks_tma_only_for_eligible_problems_on_gpu(monkeypatch):
    tma_backend()
    # a fresh instance, no plans made before the patch below, with the Triton TMA kernel taking
    # what the Gluon kernels would on Hopper (those: test_gluon_kernels)
    # small problems here, to test the other rules; the copied route's tests: test_copied_route
    backend = TritonGroupedBackend(gluon=False, routes=grouped_plan.RoutePolicy(tma_min_work=0,
                                                                                copied_min_work=2**62))
    from gemmzoo_triton.core import autotune

    tma = TMA
    rng = np.random.default_rng(4)
    for (m, n, k), dtype, key, kernel in [
        ((256, 264, 136), "float16", ("tf32", "torch.float16"), tma),
        ((257, 263, 135), "float16", ("tf32", "torch.float16"), "grouped_matmul_kernel"),  # unaligned rows
        ((256, 264, 136), "float32", ("ieee", "torch.float32"), "grouped_matmul_kernel"),
        ((256, 264, 136), "tf32", ("tf32", "torch.float32"), tma),  # the tf32 route
        ((255, 264, 136), "tf32", ("tf32", "torch.float32"), "grouped_matmul_kernel"),  # M < 256
    ]:
        a = backend.from_numpy(rng.standard_normal((m, k)), dtype)
        b = backend.from_numpy(rng.standard_normal((k, n)), dtype)
        c = backend.matmul(a, b)
        check_product(c.data, a.data, b.data, dtype, None)  # .data: a TF32Array's tensor, a tensor's self
        ran = [picked[0] for picked in autotune.PICKED if picked[1:6] == (m, n, k, *key)]
        assert ran == [kernel], (m, n, k, dtype, ran)


@pytest.mark.gpu
def test_backend_takes_tma_only_above_the_minimum_work_on_gpu(monkeypatch):
    tma_backend()
    backend = TritonGroupedBackend(gluon=False)  # the Triton TMA kernel's picks
    from gemmzoo_triton.core import autotune

    rng = np.random.default_rng(5)
    for (m, n, k), kernel in [((2112, 2080, 2064), TMA),
                              ((2048, 2048, 2048), "grouped_matmul_kernel")]:
        a = backend.from_numpy(rng.standard_normal((m, k)), "float16")
        b = backend.from_numpy(rng.standard_normal((k, n)), "float16")
        check_product(backend.matmul(a, b), a, b, "float16", None)
        ran = [picked[0] for picked in autotune.PICKED if picked[1:4] == (m, n, k)]
        assert ran == [kernel], (m, n, k, ran)


# The aligned route: copies with 16-byte aligned rows ----------------------------------------------


def test_routes_by_layout_dtype_and_size(monkeypatch):

    monkeypatch.setattr(hopper, "tma_device", lambda device: True)
    policy = grouped_plan.RoutePolicy(tma_min_work=1000, aligned_min_work=2000, aligned_min_side=8)

    def route(m: int, n: int, k: int, dtype=torch.float16, layout="NN") -> str:
        x, y = operand(m, k, layout[0] == "T", dtype), operand(k, n, layout[1] == "T", dtype)
        return grouped_plan.route(x, y, "tf32", policy=policy)

    assert route(16, 16, 16) == "tma"
    assert route(16, 16, 16, torch.bfloat16, "TT") == "tma"
    assert route(8, 8, 8) == "pointer"  # not over TMA_MIN_WORK
    assert route(17, 17, 17) == "aligned"  # rows of 34 bytes
    assert route(16, 16, 17) == "aligned"  # A's rows only
    assert route(16, 17, 16) == "aligned"  # B's and C's rows
    assert route(16, 17, 16, layout="NT") == "aligned"  # B^T's rows aligned, C's are not
    assert route(7, 17, 17) == "pointer"  # M under ALIGNED_MIN_SIDE
    assert route(9, 9, 9) == "pointer"  # under ALIGNED_MIN_WORK
    policy = dataclasses.replace(policy, copied_min_work=600)
    assert route(7, 17, 17) == "copied"  # unaligned rows, under the aligned route's thresholds
    assert route(9, 9, 9) == "copied"
    assert route(8, 8, 8) == "pointer"  # not over COPIED_MIN_WORK
    assert route(7, 17, 17, torch.float32) == "pointer"
    policy = dataclasses.replace(policy, copied_min_work=10**6)
    x, y = operand(16, 16, False, torch.float32), operand(16, 16, False, torch.float32)
    assert grouped_plan.route(x, y, "tf32", policy=policy) == "tf32"
    assert grouped_plan.route(x, y, "ieee", policy=policy) == "pointer"
    monkeypatch.setattr(hopper, "tma_device", lambda device: False)
    assert route(17, 17, 17) == "pointer"


def test_tf32_on_the_gluon_kernel_copies_a_column_major_a_and_nothing_else(monkeypatch):
    """Hopper's tf32 MMA reads shared-memory operands K-major only: the Gluon tf32 kernel takes a
    row-major A and B either way (B into registers); the TMA kernel, where the Gluon one does not
    run, wants B column-major too."""
    pytest.importorskip("gemmzoo_triton.core.gluon_parts")  # Triton 3.6 or later

    monkeypatch.setattr(hopper, "tma_device", lambda device: True)
    policy = grouped_plan.RoutePolicy(tma_min_work=1000, gluon_min_work=1000, aligned_min_side=8)
    monkeypatch.setattr(hopper, "gluon_shared_memory", lambda device: 232448)  # the H100's

    def plan(layout: str, activation: str | None = None) -> grouped_plan.GroupedPlan:
        x = operand(16, 16, layout[0] == "T", torch.float32)
        y = operand(16, 16, layout[1] == "T", torch.float32)
        made = grouped_plan.GroupedPlan(x, y, "tf32", activation, wrap=True, routes=policy)
        assert made.route == "tf32"
        return made

    for layout in ("NN", "NT"):
        made = plan(layout)
        assert made._tf32_gluon and made._copy_x is None and made._copy_y is None
    made = plan("TN")
    assert made._tf32_gluon and made._copy_x is not None and made._copy_y is None
    made = plan("NN", "relu")  # a fused activation: the TMA kernel
    assert not made._tf32_gluon and made._copy_y is not None
    monkeypatch.setattr(hopper, "gluon_shared_memory", lambda device: 100 * 1024)  # too little
    assert not plan("NN")._tf32_gluon
    monkeypatch.setattr(hopper, "gluon_shared_memory", lambda device: None)  # no Hopper GPU
    made = plan("NT")
    assert not made._tf32_gluon and made._copy_y is None


def test_the_gluon_tf32_kernel_takes_problems_down_to_the_gluon_minimum(monkeypatch):
    pytest.importorskip("gemmzoo_triton.core.gluon_parts")

    monkeypatch.setattr(hopper, "tma_device", lambda device: True)
    policy = grouped_plan.RoutePolicy(tma_min_work=20**3, gluon_min_work=12**3, aligned_min_side=8)
    x, y = operand(16, 16, False, torch.float32), operand(16, 16, False, torch.float32)
    monkeypatch.setattr(hopper, "gluon_shared_memory", lambda device: 232448)
    assert grouped_plan.route(x, y, "tf32", policy=policy) == "tf32"
    assert grouped_plan.route(x, y, "ieee", policy=policy) == "pointer"
    monkeypatch.setattr(hopper, "gluon_shared_memory", lambda device: None)
    assert grouped_plan.route(x, y, "tf32", policy=policy) == "pointer"  # 16^3 is under tma_min_work


def test_the_gluon_kernel_takes_smaller_problems_it_has_a_schedule_for(monkeypatch):

    monkeypatch.setattr(hopper, "tma_device", lambda device: True)
    policy = grouped_plan.RoutePolicy(tma_min_work=32**3, gluon_min_work=16**3)
    schedules = {}
    monkeypatch.setattr(grouped_plan, "gluon_schedule", lambda x, m, n, k: schedules.get((m, n, k)))
    x, y = operand(24, 24, False, torch.float16), operand(24, 24, False, torch.float16)
    assert grouped_plan.route(x, y, "tf32", policy=policy) == "pointer"  # over gluon_min_work, no schedule
    schedules[24, 24, 24] = object()
    assert grouped_plan.route(x, y, "tf32", policy=policy) == "tma"
    assert grouped_plan.route(x, y, "tf32", gluon=False, policy=policy) == "pointer"
    schedules[8, 8, 8] = object()
    small = operand(8, 8, False, torch.float16)
    assert grouped_plan.route(small, small, "tf32", policy=policy) == "pointer"  # not over gluon_min_work


@pytest.mark.parametrize("layout", ["row", "column", "strided"])
def test_aligned_copy_keeps_values_and_aligns_rows(layout):
    from gemmzoo_triton.core.aligned import aligned_copy

    device = tma_backend().device  # the copy kernel runs on the GPU, or under the interpreter
    values = torch.randn(4 * 13, 2 * 11, generator=torch.Generator().manual_seed(3)).half().to(device)
    tensor = {"row": values[:13, :11], "column": values[:11, :13].T, "strided": values[1::4, 1::2]}[layout]
    copy = aligned_copy(tensor)
    assert copy.shape == tensor.shape and torch.equal(copy, tensor)
    assert hopper.tma_layout(copy) and copy.data_ptr() % 16 == 0
    assert hopper.column_major(copy) == (layout == "column")


@pytest.mark.parametrize("contiguous_c", [False, True])
@pytest.mark.parametrize("layout", ["NN", "TN", "NT", "SS"])
@pytest.mark.parametrize("n", [40, 43])  # C's rows aligned (80 bytes) or not (86)
def test_aligned_route_matches_float64_reference(monkeypatch, layout, n, contiguous_c):
    """Odd K (A's rows never aligned), every layout and strided views, through the backend's
    plan: three calls, every element within the bound and the calls bitwise identical. C with
    unaligned rows comes as a view of a padded buffer, or contiguous through pointer stores
    (``contiguous_c``)."""
    tma_backend()
    backend = TritonGroupedBackend(contiguous_c=contiguous_c)

    monkeypatch.setattr(grouped_plan, "route", lambda x, y, precision, gluon=True, policy=None: "aligned")
    monkeypatch.setattr(hopper, "tma_device", lambda device: True)
    m, k = 37, 53
    for seed, (name, dtype) in enumerate(kernel_dtypes(backend)[:-1]):  # the 16-bit types
        x = strided_operand(m, k, layout[0], dtype, backend.device, seed)
        y = strided_operand(k, n, layout[1], dtype, backend.device, seed + 50)
        run = backend.prepare(x, y)
        assert run.route == "aligned"
        first = run(x, y)
        check_product(first, x, y, name, None)
        assert first.shape == (m, n) and first.stride(1) == 1
        assert first.is_contiguous() == (n == 40 or contiguous_c)
        assert (first.stride(0) * first.element_size()) % 16 == 0 or contiguous_c
        assert torch.equal(run(x, y), first) and torch.equal(backend.matmul(x, y), first)


def strided_operand(rows: int, cols: int, layout: str, dtype: torch.dtype, device: str, seed: int):
    """``operand`` for N and T; S: a view of every other row and column of a larger tensor."""
    if layout != "S":
        return operand(rows, cols, layout == "T", dtype, device, seed)
    return operand(2 * rows + 1, 2 * cols + 1, False, dtype, device, seed)[1::2, 1::2]


def test_tma_kernel_stores_through_pointers_when_c_rows_are_unaligned():
    backend = tma_backend()
    from gemmzoo_triton.grouped import tma_kernel as grouped_tma_kernel

    x = operand(40, 48, False, torch.float16, backend.device, 4)
    y = operand(48, 64, False, torch.float16, backend.device, 5)
    wide = torch.full((40, 67), float("nan"), device=backend.device, dtype=torch.float16)
    c = wide[:, 1:65]  # rows 134 bytes apart: no descriptor can cover them
    assert grouped_tma_kernel.c_needs_pointers(c)
    grouped_tma_kernel.launch(x, y, c, "tf32")
    check_product(c, x, y, "float16", None)
    assert torch.isnan(wide[:, 0]).all() and torch.isnan(wide[:, 65:]).all()  # nothing outside C


@pytest.mark.parametrize("layout", ["NN", "TT", "SN"])
def test_tf32_route_reads_a_row_major_and_b_column_major(monkeypatch, layout):
    """The tf32 route of the Triton TMA kernel copies A into row-major and B into column-major
    where they are not (under the interpreter its dot is IEEE, within tf32's bound). Gluon is
    off: on a GPU where it runs, its tf32 kernel takes the route, with layouts of its own."""
    backend = TritonGroupedBackend(gluon=False)
    tma_backend()  # skips where the TMA kernels cannot run
    from gemmzoo_triton.core import autotune

    monkeypatch.setattr(grouped_plan, "route", lambda x, y, precision, gluon=True, policy=None: "tf32")
    m, n, k = 24, 36, 20
    x = strided_operand(m, k, layout[0], torch.float32, backend.device, 1)
    y = strided_operand(k, n, layout[1], torch.float32, backend.device, 2)
    from gemmzoo import TF32Array

    x_, y_ = (TF32Array(t) if "tf32" in backend.dtypes else t for t in (x, y))  # the GPU's tf32 mode
    run = backend.prepare(x_, y_)
    c = run(x_, y_)
    check_product(getattr(c, "data", c), x, y, "tf32", None)
    picked = autotune.PICKED
    transposed = [key[6:8] for key in picked if key[0] == "tma_matmul_kernel" and key[1:4] == (m, n, k)]
    assert transposed == [(False, True)], transposed


@pytest.mark.gpu
@pytest.mark.parametrize(("m", "n", "k", "dtype", "route"), [
    (2049, 2051, 2053, "float16", "aligned"),  # every row unaligned; C a padded view
    (1030, 2056, 4097, "bfloat16", "aligned"),  # A's rows alone
    (2112, 2080, 2064, "tf32", "tf32"),  # B copied into column-major
])
def test_copying_routes_on_gpu(m, n, k, dtype, route):
    """The routes that copy operands, reached by the shapes themselves: every element against the
    float64 bound, and the plan, matmul and the plan again bitwise identical."""
    backend = tma_backend()
    rng = np.random.default_rng(m + n + k)
    a = backend.from_numpy(rng.standard_normal((m, k)), dtype)
    b = backend.from_numpy(rng.standard_normal((k, n)), dtype)
    run = backend.prepare(a, b)
    assert run.route == route
    first = run(a, b)
    tensor = getattr(first, "data", first)
    check_product(tensor, getattr(a, "data", a), getattr(b, "data", b), dtype, None)
    for again in (backend.matmul(a, b), run(a, b)):
        assert torch.equal(getattr(again, "data", again), tensor)
