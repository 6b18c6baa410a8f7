"""gemmzoo.matmul with NumPy and torch CPU inputs: the caller's type, dtype and device come back,
every element within the conformance bound of a float64 reference, operands shared not copied."""

from __future__ import annotations

from collections import OrderedDict

import numpy as np
import pytest
from sessions import reconfigure

import gemmzoo
from gemmzoo.cli import main
from gemmzoo.conformance.bounds import error_bound
from gemmzoo.dispatch.plan_cache import NO_PLAN
from gemmzoo.errors import GemmInputError
from gemmzoo.problems.grids import GridPoint
from gemmzoo.tuning import explain, state
from gemmzoo.tuning.fingerprint import device_fingerprint
from gemmzoo.tuning.tune import conformance_verdict

torch = pytest.importorskip("torch")


pytestmark = pytest.mark.usefixtures("empty_cache", "dispatch_route")


def operands(m: int, n: int, k: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.standard_normal((m, k)), rng.standard_normal((k, n))


def assert_close(c_host: np.ndarray, a: np.ndarray, b: np.ndarray, dtype: str) -> None:
    """Every element of C within the conformance bound of the float64 product of the operands C saw."""
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    ref = a64 @ b64
    bound = error_bound(dtype, a.shape[1], ref, np.abs(a64) @ np.abs(b64))
    error = np.abs(c_host.astype(np.float64) - ref)
    assert c_host.shape == ref.shape
    assert np.all(np.isfinite(c_host)) and np.all(error <= bound), float(np.max(error / bound))


BACKENDS = [None, "numpy", "torch-cpu"]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
def test_numpy_in_numpy_out(backend, dtype):
    a, b = (x.astype(dtype) for x in operands(37, 29, 45, 1))
    c = gemmzoo.matmul(a, b, backend)
    assert type(c) is np.ndarray and c.dtype == np.dtype(dtype)
    assert_close(c, a, b, dtype)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16"])
def test_torch_in_torch_out(backend, dtype):
    if dtype == "bfloat16" and backend == "numpy":
        pytest.skip("numpy does not compute bfloat16")
    a64, b64 = operands(23, 41, 31, 2)
    torch_dtype = getattr(torch, dtype)
    a, b = torch.from_numpy(a64).to(torch_dtype), torch.from_numpy(b64).to(torch_dtype)
    a_before, b_before = a.clone(), b.clone()
    c = gemmzoo.matmul(a, b, backend)
    assert isinstance(c, torch.Tensor) and c.dtype == torch_dtype and c.device.type == "cpu"
    assert torch.equal(a, a_before) and torch.equal(b, b_before)
    wide = torch.float64
    assert_close(c.to(wide).numpy(), a.to(wide).numpy(), b.to(wide).numpy(), dtype)


def test_views_and_autograd_tensors():
    a64, b64 = operands(19, 17, 13, 3)
    at = torch.from_numpy(np.ascontiguousarray(a64.T)).float().requires_grad_()
    c = gemmzoo.matmul(at.T, torch.from_numpy(b64).float(), "numpy")  # transposed view, needs grad
    assert isinstance(c, torch.Tensor) and c.requires_grad  # differentiable: see test_autograd.py
    assert_close(c.detach().numpy(), a64.astype(np.float32), b64.astype(np.float32), "float32")
    reversed_rows = a64.astype(np.float32)[::-1]  # negative strides: no zero-copy path, still right
    c = gemmzoo.matmul(reversed_rows, b64.astype(np.float32), "torch-cpu")
    assert type(c) is np.ndarray
    assert_close(c, reversed_rows, b64.astype(np.float32), "float32")


def _spy_on(monkeypatch, backend) -> dict:
    """What the plans ``backend.prepare`` makes receive and return, call by call."""
    seen: dict = {"calls": 0}
    original = type(backend).prepare

    def spy(self, a, b):
        run = original(self, a, b)

        def watched(a, b):
            seen["a"], seen["b"] = a, b
            seen["c"] = run(a, b)
            seen["calls"] += 1
            return seen["c"]

        return watched

    monkeypatch.setattr(type(backend), "prepare", spy)
    return seen


def test_same_device_operands_are_shared_not_copied(monkeypatch):
    a, b = (x.astype(np.float32) for x in operands(8, 6, 4, 4))
    seen = _spy_on(monkeypatch, gemmzoo.get_backend("torch-cpu"))
    c = gemmzoo.matmul(a, b, "torch-cpu")  # NumPy in, torch backend
    assert seen["a"].data_ptr() == a.ctypes.data and seen["b"].data_ptr() == b.ctypes.data
    assert type(c) is np.ndarray and c.ctypes.data == seen["c"].data_ptr()
    assert_close(c, a, b, "float32")
    seen = _spy_on(monkeypatch, gemmzoo.get_backend("numpy"))
    ta, tb = torch.from_numpy(a), torch.from_numpy(b)
    c = gemmzoo.matmul(ta, tb, "numpy")  # torch in, NumPy backend
    assert np.shares_memory(seen["a"], a) and np.shares_memory(seen["b"], b)
    assert isinstance(c, torch.Tensor) and c.data_ptr() == seen["c"].ctypes.data
    assert_close(c.numpy(), a, b, "float32")


def recorded() -> list:
    return state.store().recorded(device_fingerprint("cpu"))


def test_a_new_shape_is_answered_unmeasured_recorded_and_tuned_offline(capsys, wide_tables, monkeypatch):
    # Two fast backends: the flow is under test, not a compiling peer's conformance time (under
    # load torch-compile's first compile can pass the suite's time limit, and tune exits 1)
    monkeypatch.setenv("GEMMZOO_BACKENDS", "numpy,torch-cpu")
    reconfigure()
    a, b = (x.astype(np.float32) for x in operands(16, 24, 8, 5))
    for _ in range(3):
        assert_close(gemmzoo.matmul(a, b), a, b, "float32")
    assert state.store().count() == 0  # nothing was measured inside gemmzoo.matmul
    assert recorded() == [(GridPoint(16, 24, 8, "float32", "NN"), 1)]  # one plan, recorded once
    at = np.ascontiguousarray(a.T).T  # A stored column by column: layout TN
    assert_close(gemmzoo.matmul(at, b), at, b, "float32")
    assert {p.layout for p, _ in recorded()} == {"NN", "TN"}

    assert main(["tune", "--recorded", "--budget", "0.01"]) == 0
    assert "16x24x8 float32 cpu" in capsys.readouterr().out
    assert recorded() == [] and state.store().count() >= 4  # numpy and torch-cpu, twice
    assert explain((16, 24, 8), "float32", "cpu", measure=False).source == "database"
    assert_close(gemmzoo.matmul(a, b), a, b, "float32")
    assert recorded() == []  # answered from its own measurements: nothing to record
    assert main(["tune", "--recorded"]) == 0
    assert "nothing recorded" in capsys.readouterr().out


def test_recording_can_be_switched_off(monkeypatch):
    monkeypatch.setenv("GEMMZOO_RECORD", "0")
    reconfigure()
    a, b = (x.astype(np.float32) for x in operands(5, 7, 9, 8))
    assert_close(gemmzoo.matmul(a, b), a, b, "float32")
    assert recorded() == [] and state.store().count() == 0


@pytest.mark.parametrize(
    ("a", "b", "message"),
    [
        (np.ones((3, 4), np.float32), np.ones((5, 6), np.float32), r"A \(3, 4\), B \(5, 6\).*inner"),
        (np.ones((4,), np.float32), np.ones((4, 5), np.float32), r"A \(4,\), B \(4, 5\).*2-D"),
        (np.ones((2, 3, 4), np.float32), np.ones((3, 4, 5), np.float32),
         r"A \(2, 3, 4\), B \(3, 4, 5\).*broadcast"),
        (np.ones((3, 4), np.int32), np.ones((4, 5), np.int32), r"A \(3, 4\), B \(4, 5\).*int32"),
        (np.ones((3, 4), np.float32), np.ones((4, 5), np.float64), r"float32 and B is float64"),
        (np.ones((3, 4), np.float32), [[1.0]], r"A is ndarray and B is list"),
    ],
)
def test_bad_input_is_a_clear_error(a, b, message):
    with pytest.raises(GemmInputError, match=message):
        gemmzoo.matmul(a, b)


def test_mixed_libraries_are_refused():
    a = np.ones((3, 4), np.float32)
    with pytest.raises(GemmInputError, match="A is ndarray and B is Tensor"):
        gemmzoo.matmul(a, torch.ones(4, 5))
    a16, b16 = torch.ones(3, 4, dtype=torch.bfloat16), torch.ones(4, 5, dtype=torch.bfloat16)
    with pytest.raises(GemmInputError, match=r"numpy: .*bfloat16 is not supported"):
        gemmzoo.matmul(a16, b16, "numpy")


def test_a_backend_on_another_device_gets_host_copies():
    from gemmzoo_numpy import NumpyBackend

    class Elsewhere(NumpyBackend):
        """Stands in for a GPU backend: arrays must travel through from_numpy/to_numpy."""

        name = "elsewhere-fake"
        device = "cuda"

    elsewhere = Elsewhere()
    a, b = (x.astype(np.float16) for x in operands(21, 11, 17, 6))
    c = gemmzoo.matmul(a, b, elsewhere)
    assert type(c) is np.ndarray and c.dtype == np.float16
    assert_close(c, a, b, "float16")
    ta, tb = torch.from_numpy(a.astype(np.float32)), torch.from_numpy(b.astype(np.float32))
    c = gemmzoo.matmul(ta, tb, elsewhere)
    assert isinstance(c, torch.Tensor) and c.dtype == torch.float32 and c.device.type == "cpu"
    assert_close(c.numpy(), ta.numpy(), tb.numpy(), "float32")


def test_tf32_arrays_need_a_tf32_backend():
    a, b = (x.astype(np.float32) for x in operands(4, 4, 4, 7))
    with pytest.raises(gemmzoo.BackendUnavailableError, match="tf32 on cpu"):
        gemmzoo.matmul(gemmzoo.TF32Array(a), gemmzoo.TF32Array(b))
    with pytest.raises(GemmInputError, match="both operands in TF32Array"):
        gemmzoo.matmul(gemmzoo.TF32Array(a), b)


def test_bad_input_after_a_plan_is_still_a_clear_error():
    good = np.ones((3, 4), np.float32), np.ones((4, 5), np.float32)
    for backend in (None, "numpy", "torch-cpu"):
        gemmzoo.matmul(*good, backend)  # a plan for the good problem exists now
        with pytest.raises(GemmInputError, match=r"A \(3, 4\), B \(5, 5\).*inner"):
            gemmzoo.matmul(good[0], np.ones((5, 5), np.float32), backend)
        with pytest.raises(GemmInputError, match=r"float32 and B is float64"):
            gemmzoo.matmul(good[0], good[1].astype(np.float64), backend)
        with pytest.raises(GemmInputError, match=r"A \(12,\), B \(4, 5\).*2-D"):
            gemmzoo.matmul(good[0].reshape(-1), good[1], backend)
        with pytest.raises(GemmInputError, match="A is ndarray and B is Tensor"):
            gemmzoo.matmul(good[0], torch.from_numpy(good[1]), backend)
    ta, tb = torch.ones(3, 4), torch.ones(4, 5)
    gemmzoo.matmul(ta, tb)
    with pytest.raises(GemmInputError, match="A is on cpu and B on meta"):
        gemmzoo.matmul(ta, tb.to("meta"))


@pytest.mark.parametrize("backend", ["torch-cpu", "numpy"])
def test_a_torch_plan_refuses_a_b_of_another_dtype(backend):
    """torch problems are keyed on A's dtype: a plan that torch.mm runs lets torch refuse B, one
    that converts the operands (here to NumPy) checks B first; both then say what is wrong."""
    a64, b64 = operands(5, 6, 7, 3)
    a, b = torch.from_numpy(a64).float(), torch.from_numpy(b64).float()
    np.testing.assert_allclose(gemmzoo.matmul(a, b, backend).numpy(), a64 @ b64, rtol=1e-5, atol=1e-5)
    for other in (b.double(), b.half(), b.to(torch.bfloat16)):
        expected = r"A \(5, 7\), B \(7, 6\): A is torch.float32 and B is"
        with pytest.raises(GemmInputError, match=expected) as caught:
            gemmzoo.matmul(a, other, backend)
        assert caught.value.__cause__ is None and caught.value.__suppress_context__
    c = gemmzoo.matmul(a, b, backend)  # the plan still serves its own problem
    np.testing.assert_allclose(c.numpy(), a64 @ b64, rtol=1e-5, atol=1e-5)


def test_contiguous_operands_share_a_plan_whatever_their_size_1_strides():
    a64, b64 = operands(1, 6, 7, 4)
    rows = torch.from_numpy(np.ascontiguousarray(a64)).float()  # (1, 7), strides (7, 1)
    column = rows.clone().as_strided((1, 7), (1, 1))
    assert rows.stride() != column.stride() and column.is_contiguous()
    b = torch.from_numpy(b64).float()
    for x in (rows, column, torch.from_numpy(np.asfortranarray(a64)).float()):
        np.testing.assert_allclose(gemmzoo.matmul(x, b).numpy(), a64 @ b64, rtol=1e-5, atol=1e-5)


@pytest.mark.gpu
def test_a_cuda_plan_refuses_b_on_another_device():
    a64, b64 = operands(9, 8, 7, 5)
    a, b = torch.from_numpy(a64).half().cuda(), torch.from_numpy(b64).half().cuda()
    expected = (a.double() @ b.double()).cpu().numpy()
    np.testing.assert_allclose(gemmzoo.matmul(a, b).double().cpu().numpy(), expected, rtol=2e-3, atol=2e-3)
    for other, message in ((b.cpu(), "A is on cuda:0 and B on cpu"), (b.to("meta"), "B on meta"),
                           (b.float(), "A is torch.float16 and B is torch.float32")):
        with pytest.raises(GemmInputError, match=message):
            gemmzoo.matmul(a, other)
        with pytest.raises(GemmInputError, match=message):
            gemmzoo.matmul(a, other, "triton-grouped")


def test_which_plans_check_b_themselves():
    from gemmzoo.contract.backend import is_self_checking, self_checking

    def run(a, b):
        return a @ b

    assert not is_self_checking(run) and not is_self_checking(len) and not is_self_checking(3)
    assert self_checking(run) is run and is_self_checking(run)
    assert not is_self_checking(gemmzoo.get_backend("numpy").matmul)  # only what is declared
    a, b = torch.ones(2, 3), torch.ones(3, 4)
    assert is_self_checking(gemmzoo.get_backend("torch-cpu").prepare(a, b))


class _ContractOnlyTorch(gemmzoo.Backend):
    """A backend with only the contract's members, whose matmul checks nothing about B."""

    name = "contract-only-torch"
    dtypes = frozenset({"float32"})

    def from_numpy(self, x, dtype):
        return torch.from_numpy(np.array(x, dtype=np.float32))

    def to_numpy(self, y):
        return y.numpy().copy()

    def matmul(self, a, b):
        return torch.from_numpy(a.numpy() @ b.numpy()).to(a.dtype)


@pytest.mark.parametrize("backend", [_ContractOnlyTorch(), "torch-cpu", None])
def test_a_plan_that_trusts_torch_still_refuses_what_torch_lets_through(backend):
    """A backend's own matmul need not check B's dtype, and torch.mm checks nothing on the meta
    device: such plans are checked by gemmzoo.matmul."""
    generator = torch.Generator().manual_seed(286)
    a, b = torch.randn(4, 5, generator=generator), torch.randn(5, 3, generator=generator)
    # componentwise: |error| within a small multiple of |A|·|B|, which holds where an element
    # cancels to near zero (a relative tolerance alone does not)
    x, y = a.double().numpy(), b.double().numpy()
    error = np.abs(gemmzoo.matmul(a, b, backend).numpy() - x @ y)
    assert np.all(error <= 1e-5 * (np.abs(x) @ np.abs(y)))
    with pytest.raises(GemmInputError, match=r"A is torch\.float32 and B is torch\.float64"):
        gemmzoo.matmul(a, b.double(), backend)
    if not isinstance(backend, gemmzoo.Backend):
        meta_a, meta_b = a.to("meta"), b.to("meta")
        assert gemmzoo.matmul(meta_a, meta_b, backend).is_meta
        with pytest.raises(GemmInputError, match=r"A is torch\.float32 and B is torch\.float64"):
            gemmzoo.matmul(meta_a, meta_b.double(), backend)


def test_the_last_plan_is_kept_under_the_torch_key():
    from gemmzoo.dispatch import matmul as dispatch

    a, b = torch.ones(2, 3), torch.ones(4, 3).T
    for backend in (None, "torch-cpu"):
        gemmzoo.matmul(a, b, backend)
        assert state.plan_cache.last[0] == dispatch._torch_key(a, b, backend, "componentwise", "caller")


def test_answers_dropped_while_a_plan_is_found_or_made_leave_no_stale_plan(monkeypatch, dispatch_route):
    backend = gemmzoo.get_backend("torch-cpu")
    original = type(backend).prepare

    def forgetting(self, a, b):  # new measurements stored while this problem is planned
        state.forget_answers()
        return original(self, a, b)

    x, y = torch.ones(2, 3), torch.ones(3, 4)
    monkeypatch.setattr(type(backend), "prepare", forgetting)
    gemmzoo.matmul(x, y, "torch-cpu")
    assert not state.plan_cache.plans and state.plan_cache.last == NO_PLAN
    planned = []

    def counted(self, a, b):
        planned.append(a)
        return original(self, a, b)

    monkeypatch.setattr(type(backend), "prepare", counted)
    gemmzoo.matmul(x, y, "torch-cpu")  # the plan made under the old answers is not used again
    assert len(planned) == 1
    monkeypatch.setattr(type(backend), "prepare", original)
    if dispatch_route == "compiled":  # found in its own table, not in this dict: see test_compiled_dispatch
        return

    class Forgets(OrderedDict):  # the answers dropped right after a plan was looked up
        def __getitem__(self, key):
            found = super().__getitem__(key)
            state.forget_answers()
            return found

    gemmzoo.matmul(x, y, "torch-cpu")
    gemmzoo.matmul(y.T, x.T, "torch-cpu")  # another problem comes last
    state.plan_cache.plans = Forgets(state.plan_cache.plans)
    c = gemmzoo.matmul(x, y, "torch-cpu")
    np.testing.assert_array_equal(c.numpy(), np.full((2, 4), 3.0))
    assert not state.plan_cache.plans and state.plan_cache.last == NO_PLAN


def test_forgetting_answers_drops_the_last_plan_too(monkeypatch):
    from gemmzoo.tuning import state

    backend = gemmzoo.get_backend("torch-cpu")
    prepared = []
    original = type(backend).prepare
    monkeypatch.setattr(type(backend), "prepare",
                        lambda self, a, b: prepared.append(1) or original(self, a, b))
    a, b = torch.ones(2, 3), torch.ones(3, 4)
    gemmzoo.matmul(a, b, "torch-cpu")
    gemmzoo.matmul(a, b, "torch-cpu")
    assert len(prepared) == 1
    state.forget_answers()
    gemmzoo.matmul(a, b, "torch-cpu")
    assert len(prepared) == 2


def test_a_plan_is_never_reused_for_operands_that_differ(monkeypatch):
    backend = gemmzoo.get_backend("torch-cpu")
    prepared = []
    original = type(backend).prepare

    def counting(self, a, b):
        prepared.append((a.stride(), b.stride(), a.dtype))
        return original(self, a, b)

    monkeypatch.setattr(type(backend), "prepare", counting)
    a64, b64 = operands(12, 10, 14, 9)
    a, b = torch.from_numpy(a64).float(), torch.from_numpy(b64).float()
    variants = [
        (a, b),
        (a, b),  # the same problem: the plan is reused
        (a.T.contiguous().T, b),  # same shape, A stored column by column
        (a, b.T.contiguous().T),
        (a.double(), b.double()),
        (a.clone().requires_grad_(), b),
        (a64.astype(np.float32), b64.astype(np.float32)),  # another array library
    ]
    for x, y in variants:
        c = gemmzoo.matmul(x, y, "torch-cpu")
        assert type(c) is type(x) and c.shape == (12, 10)
        if isinstance(c, torch.Tensor):
            assert c.requires_grad == x.requires_grad
            c, x, y = (t.detach().numpy() for t in (c, x, y))
        assert_close(c, x, y, str(x.dtype))
    assert len(prepared) == len(variants) - 1  # one plan per distinct problem
    assert len(set(prepared)) == 4  # A's strides, B's strides and the dtype each made a new one


def test_with_nothing_measured_the_callers_own_library_comes_first(monkeypatch):
    a64, b64 = operands(6, 5, 4, 10)
    a, b = torch.from_numpy(a64).float(), torch.from_numpy(b64).float()
    backend = gemmzoo.get_backend("torch-cpu")
    # the default pick must have passed the conformance suite here (whose cases call prepare too)
    assert conformance_verdict(state.store(), backend, "float32") is True
    calls = []
    original = type(backend).prepare

    def counting(self, x, y):
        calls.append(type(x))
        return original(self, x, y)

    monkeypatch.setattr(type(backend), "prepare", counting)
    c = gemmzoo.matmul(a, b)
    # torch tensors went to the prior's route, torch-cpu, not across to NumPy; with nothing
    # measured the call is torch.mm itself, the product torch-cpu computes (no plan of its own)
    from gemmzoo.dispatch import matmul as dispatch

    assert calls == [] and dispatch.make_plan(a, b) is torch.mm
    assert dispatch.backend_for(a, b) is backend
    assert_close(c.numpy(), a.numpy(), b.numpy(), "float32")
