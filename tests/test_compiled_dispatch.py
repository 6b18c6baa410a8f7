"""gemmzoo.matmul's compiled dispatch (gemmzoo.native): the same results as the Python dispatch,
bit for bit, on random problems; its table of plans emptied when answers or the environment
change; plans declared to be torch.mm launched without calling them, guards honoured; and every
case it does not take handed to the Python dispatch."""

from __future__ import annotations

import threading

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from sessions import reconfigure  # noqa: E402

import gemmzoo  # noqa: E402
from gemmzoo import native  # noqa: E402
from gemmzoo.contract.backend import Switched, declare_torch_mm, self_checking, torch_mm_form  # noqa: E402
from gemmzoo.dispatch import matmul as dispatch  # noqa: E402
from gemmzoo.dispatch.plan_cache import NO_PLAN  # noqa: E402
from gemmzoo.errors import GemmInputError  # noqa: E402
from gemmzoo.tuning import state  # noqa: E402
from gemmzoo_torch.backend import TorchCpuBackend  # noqa: E402

pytestmark = pytest.mark.usefixtures("empty_cache")


@pytest.fixture
def compiled(compiled_dispatch_module, monkeypatch):
    monkeypatch.setenv(native.ENV_SWITCH, "on")
    dispatch.use_compiled(compiled_dispatch_module)
    yield compiled_dispatch_module
    dispatch.use_compiled(None)


def random_operands(m: int, n: int, k: int, dtype, layout: str, seed: int):
    rng = np.random.default_rng(seed)

    def make(rows: int, cols: int, transposed: bool):
        if transposed:
            return torch.from_numpy(rng.standard_normal((cols, rows))).to(dtype).T
        return torch.from_numpy(rng.standard_normal((rows, cols))).to(dtype)

    return make(m, k, layout[0] == "T"), make(k, n, layout[1] == "T")


PROBLEMS = [(1, 1, 1), (1, 37, 64), (37, 1, 5), (23, 41, 31), (64, 48, 1), (96, 80, 72)]


@pytest.mark.parametrize("dtype", ["float32", "float64", "bfloat16", "float16"])
@pytest.mark.parametrize("layout", ["NN", "NT", "TN", "TT"])
@pytest.mark.parametrize("backend", [None, "torch-cpu", "numpy"])
def test_results_are_the_python_dispatchs_bit_for_bit(compiled, dtype, layout, backend):
    if backend == "numpy" and dtype == "bfloat16":
        pytest.skip("numpy does not compute bfloat16")
    torch_dtype = getattr(torch, dtype)
    for seed, (m, n, k) in enumerate(PROBLEMS):
        a, b = random_operands(m, n, k, torch_dtype, layout, seed)
        got = [gemmzoo.matmul(a, b, backend) for _ in range(3)]  # a new problem, then found in the table
        dispatch.use_compiled(None)
        want = gemmzoo.matmul(a, b, backend)
        dispatch.use_compiled(compiled)
        for c in got:
            assert c.dtype == torch_dtype and c.shape == (m, n)
            assert torch.equal(c, want), (m, n, k)
        if backend == "torch-cpu":
            assert torch.equal(got[0], torch.mm(a, b))


def test_each_problem_is_planned_once(compiled):
    a, b = random_operands(8, 6, 4, torch.float32, "NN", 1)
    compiled.forget()
    for _ in range(3):
        gemmzoo.matmul(a, b, "torch-cpu")
    assert compiled.planned() == 1
    gemmzoo.matmul(a.T.contiguous().T, b, "torch-cpu")  # other strides: another problem
    gemmzoo.matmul(a, b, "numpy")
    gemmzoo.matmul(a.double(), b.double(), "torch-cpu")
    assert compiled.planned() == 4


def test_dropped_answers_empty_the_table(compiled, monkeypatch):
    a, b = random_operands(8, 6, 4, torch.float32, "NN", 2)
    gemmzoo.matmul(a, b, "torch-cpu")
    assert compiled.planned() >= 1
    state.forget_answers()
    calls = []
    original = dispatch.make_plan
    monkeypatch.setattr(dispatch, "make_plan", lambda *args: calls.append(args) or original(*args))
    c = gemmzoo.matmul(a, b, "torch-cpu")
    assert torch.equal(c, torch.mm(a, b))
    assert compiled.planned() == 1 and len(calls) == 1


def test_a_changed_environment_empties_the_table(compiled, monkeypatch):
    a, b = random_operands(8, 6, 4, torch.float32, "NN", 4)
    gemmzoo.matmul(a, b)
    gemmzoo.matmul(a.double(), b.double())
    assert compiled.planned() >= 2
    monkeypatch.setenv("GEMMZOO_BACKENDS", "torch-cpu")
    reconfigure()
    c = gemmzoo.matmul(a, b)
    assert compiled.planned() == 1
    assert dispatch.backend_for(a, b).name == "torch-cpu" and torch.equal(c, torch.mm(a, b))


@pytest.mark.parametrize(("a_shape", "b_shape", "b_dtype", "message"), [
    ((4, 5), (4, 3), torch.float32, "inner dimensions differ"),
    ((4, 5), (5, 3), torch.float64, "both must have one floating dtype"),
    ((4,), (4, 3), torch.float32, "must be 2-D"),
    ((4, 5, 1), (5, 3), torch.float32, r"inner dimensions differ \(A has K=1"),  # batched: K is A's last
])
def test_bad_input_is_the_same_clear_error(compiled, a_shape, b_shape, b_dtype, message):
    good_a, good_b = random_operands(4, 3, 5, torch.float32, "NN", 5)
    gemmzoo.matmul(good_a, good_b, "torch-cpu")  # a plan for the good problem exists
    a = torch.randn(*a_shape)
    b = torch.randn(*b_shape).to(b_dtype)
    with pytest.raises(GemmInputError, match=message) as raised:
        gemmzoo.matmul(a, b, "torch-cpu")
    assert str(raised.value).startswith(f"gemmzoo.matmul of A {tuple(a_shape)}, B {tuple(b_shape)}")


def test_an_unknown_ranking_is_refused(compiled):
    a, b = random_operands(3, 3, 3, torch.float32, "NN", 6)
    with pytest.raises(ValueError, match="by must be one of"):
        gemmzoo.matmul(a, b, by="fastest")


class Declared(TorchCpuBackend):
    """torch-cpu whose plan counts its calls, declared as torch.mm in the way the test asks."""

    name = "declared-mm"

    def __init__(self, guard=None, declare=True):
        self.calls = 0
        self.guard, self.declare = guard, declare

    def prepare(self, a, b):
        self.check_operands(a, b)

        def run(x, y):
            self.calls += 1
            return torch.mm(x, y)

        run = self_checking(run)  # torch.mm refuses a B of another dtype: so does run
        return declare_torch_mm(run, self.guard) if self.declare else run


class CountingLock:
    def __init__(self):
        self.inner, self.acquired = threading.Lock(), 0

    def acquire(self):
        self.acquired += 1
        return self.inner.acquire()

    def release(self):
        assert self.inner.locked()
        self.inner.release()


def test_a_plan_declared_torch_mm_is_launched_without_calling_it(compiled):
    backend = Declared()
    a, b = random_operands(9, 7, 5, torch.float32, "NT", 7)
    for _ in range(3):
        assert torch.equal(gemmzoo.matmul(a, b, backend), torch.mm(a, b))
    assert backend.calls == 0
    undeclared = Declared(declare=False)
    for _ in range(3):
        assert torch.equal(gemmzoo.matmul(a, b, undeclared), torch.mm(a, b))
    assert undeclared.calls == 3


@pytest.mark.parametrize("pair", [False, True])
@pytest.mark.parametrize("writable", [False, True])
def test_a_switched_plan_holds_its_switch_or_is_called(compiled, pair, writable):
    second = "split-K as the caller had it"
    lock, switch, writes = CountingLock(), {"value": False, "second": second}, []

    def read():
        assert lock.inner.locked()
        return (switch["value"], switch["second"]) if pair else switch["value"]

    def write(value, other=None):
        assert lock.inner.locked()
        writes.append((value, other) if pair else value)
        switch["value"] = value
        if pair:
            switch["second"] = other

    backend = Declared(Switched(lock, read, write if writable else None, False, pair))
    a, b = random_operands(6, 5, 4, torch.float32, "NN", 8)
    assert torch.equal(gemmzoo.matmul(a, b, backend), torch.mm(a, b))
    assert backend.calls == 0 and lock.acquired == 1 and not lock.inner.locked() and writes == []
    switch["value"] = True  # the caller changed the switch
    assert torch.equal(gemmzoo.matmul(a, b, backend), torch.mm(a, b))
    assert lock.acquired == 2 and not lock.inner.locked()
    if writable:  # set for the launch, then the caller's value back, second half untouched
        assert backend.calls == 0
        assert writes == ([(False, second), (True, second)] if pair else [False, True])
        assert switch["value"] is True and switch["second"] == second
    else:  # the plan itself runs (and holds the switch as it needs)
        assert backend.calls == 1 and writes == []


@pytest.mark.parametrize("failing", ["set", "restore"])
def test_a_switch_that_cannot_be_written_raises_and_lets_the_lock_go(compiled, failing):
    lock, switch = CountingLock(), {"value": True}

    def write(value):
        if (failing == "set") == (value is False):
            raise RuntimeError(f"the switch refuses {value}")
        switch["value"] = value

    backend = Declared(Switched(lock, lambda: switch["value"], write, False, False))
    a, b = random_operands(6, 5, 4, torch.float32, "NN", 14)
    with pytest.raises(RuntimeError, match="the switch refuses"):
        gemmzoo.matmul(a, b, backend)
    assert not lock.inner.locked() and backend.calls == 0
    assert switch["value"] is (failing == "set")  # never set; or set, and its restore refused


def test_the_torch_backends_declare_their_plans():
    cpu = gemmzoo.get_backend("torch-cpu")
    a, b = random_operands(4, 4, 4, torch.float32, "NN", 9)
    assert torch_mm_form(cpu.prepare(a, b)) == ()
    from gemmzoo_torch.precision import runner

    assert torch_mm_form(runner("bfloat16", ("allow_bf16_reduced_precision_reduction",))) == ()
    assert torch_mm_form(runner("float64")) == ()
    held = {dtype: torch_mm_form(runner(dtype)) for dtype in ("bfloat16", "float32", "tf32")}
    assert [held[dtype].wanted for dtype in ("bfloat16", "float32", "tf32")] == [False, False, True]
    assert all(form.write is not None for form in held.values())
    accumulation = torch_mm_form(runner("float16", ("allow_fp16_reduced_precision_reduction",)))
    if hasattr(torch.backends.cuda.matmul, "allow_fp16_accumulation"):
        assert accumulation.wanted is False and accumulation.write is not None
        assert torch_mm_form(runner("float16")) is None  # two switches: always through the plan
    assert torch_mm_form(lambda x, y: x @ y) is None


@pytest.mark.parametrize(("a_shape", "b_shape"), [((3, 5, 7), (3, 7, 4)), ((2, 1, 6, 5), (3, 5, 4)),
                                                ((4, 6, 8), (8, 3)), ((6, 8), (2, 8, 3))])
@pytest.mark.parametrize("backend", [None, "torch-cpu"])
def test_batched_products_are_kept_in_the_table_and_are_the_python_dispatchs(compiled, a_shape, b_shape,
                                                                            backend):
    """Operands of up to four dimensions are keyed in C++ (a batched plan called as it is); each
    result is the Python dispatch's bit for bit, and a transposed or reshaped operand is another
    problem."""
    generator = torch.Generator().manual_seed(11)
    a, b = torch.randn(*a_shape, generator=generator), torch.randn(*b_shape, generator=generator)
    compiled.forget()
    got = [gemmzoo.matmul(a, b, backend) for _ in range(3)]
    assert compiled.planned() == 1
    strided = a.transpose(-1, -2).contiguous().transpose(-1, -2)
    other = gemmzoo.matmul(strided, b, backend)
    assert compiled.planned() == 2  # the same values in other strides: another key
    dispatch.use_compiled(None)
    want, want_other = gemmzoo.matmul(a, b, backend), gemmzoo.matmul(strided, b, backend)
    dispatch.use_compiled(compiled)
    for c in got:
        assert torch.equal(c, want)
    assert torch.equal(other, want_other)  # another layout may take another BLAS path: its own bits
    torch.testing.assert_close(other, want)
    torch.testing.assert_close(want, torch.matmul(a, b))
    if backend is None:  # nothing measured: torch's own batched product, its bits
        assert torch.equal(want, torch.matmul(a, b))
    five = torch.randn(1, 1, 1, *a_shape[-2:], generator=generator)
    held = compiled.planned()
    assert torch.equal(gemmzoo.matmul(five, b, backend), dispatch._dispatch(five, b, backend, "componentwise",
                                                                           "caller"))
    assert compiled.planned() == held  # five dimensions: the Python dispatch's, not the table's


def test_operands_it_does_not_take_go_to_the_python_dispatch(compiled):
    class Marked(torch.Tensor):
        pass

    Marked.__module__ = "torch.marked"  # gemmzoo takes tensor subclasses of torch's own modules

    a, b = random_operands(5, 4, 3, torch.float32, "NN", 10)
    got = gemmzoo.matmul(a.as_subclass(Marked), b.as_subclass(Marked), "torch-cpu")
    assert torch.equal(torch.Tensor(got), torch.mm(a, b))
    seen = []

    class Watch(torch.overrides.TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            seen.append(func)
            return func(*args, **(kwargs or {}))

    gemmzoo.matmul(a, b, "torch-cpu")
    with Watch():  # a mode sees the product, as it sees torch.matmul's
        c = gemmzoo.matmul(a, b, "torch-cpu")
    assert torch.mm in seen and torch.equal(c, torch.mm(a, b))


def test_an_unhashable_backend_object_is_answered_each_time(compiled):
    class Unhashable(TorchCpuBackend):
        __hash__ = None  # type: ignore[assignment]

    a, b = random_operands(5, 4, 3, torch.float32, "NN", 11)
    compiled.forget()
    for _ in range(2):
        assert torch.equal(gemmzoo.matmul(a, b, Unhashable()), torch.mm(a, b))
    assert compiled.planned() == 0


def test_products_in_several_threads(compiled):
    problems = [random_operands(m, n, k, dtype, "NN", seed)
                for seed, ((m, n, k), dtype) in enumerate(
                    zip(PROBLEMS * 2, [torch.float32] * 6 + [torch.float64] * 6, strict=True))]
    wrong = []

    def work(offset: int) -> None:
        for i in range(60):
            a, b = problems[(i + offset) % len(problems)]
            if not torch.equal(gemmzoo.matmul(a, b, "torch-cpu"), torch.mm(a, b)):
                wrong.append((offset, i))

    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not wrong


def test_other_threads_run_python_while_a_product_computes(compiled):
    """The GIL is let go around the launch, as torch.mm lets it go: a product that computes on
    the CPU does not stop the program's other threads. The counting thread lets the GIL go after
    each tick, and the interpreter is told not to take it from a running thread for a second: so
    ticks counted while this thread is in gemmzoo.matmul were counted inside the launch."""
    import sys
    import time

    a, b = random_operands(512, 512, 512, torch.float64, "NN", 21)
    expected = torch.mm(a, b)
    gemmzoo.matmul(a, b, "torch-cpu")  # planned before the counting starts
    ticks, stop = [0], threading.Event()

    def count() -> None:
        while not stop.is_set():
            ticks[0] += 1
            time.sleep(0)

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1.0)
    counter = threading.Thread(target=count)
    try:
        counter.start()
        while ticks[0] == 0:
            time.sleep(0)
        seen = []
        while len(seen) < 20 and not any(seen):  # a loaded machine may not run the thread at once
            before = ticks[0]
            c = gemmzoo.matmul(a, b, "torch-cpu")
            seen.append(ticks[0] - before)
    finally:
        stop.set()
        counter.join()
        sys.setswitchinterval(interval)
    assert torch.equal(c, expected)
    assert any(seen), seen  # the counting thread ran during a product


def test_switched_off_it_is_neither_loaded_nor_reported(compiled, monkeypatch):
    monkeypatch.setenv(native.ENV_SWITCH, "0")
    reconfigure()
    assert native.load() is None
    assert not native.status().built and native.ENV_SWITCH in native.status().reason


def test_it_is_loaded_only_where_it_was_built(compiled, tmp_path, monkeypatch):
    monkeypatch.setenv("GEMMZOO_CACHE_DIR", str(tmp_path / "elsewhere"))
    reconfigure()
    assert native.load() is None  # never builds
    found = native.status()
    assert not found.built and "--build-dispatch" in found.reason


def test_the_cli_reports_and_builds_it(compiled, capsys, monkeypatch):
    import json
    from pathlib import Path

    from gemmzoo.cli import main

    assert main(["cache", "--format", "json"]) == 0  # an empty cache directory
    record = json.loads(capsys.readouterr().out)[0]["compiled_dispatch"]
    assert record["built"] is False and "--build-dispatch" in record["reason"]

    def refused(verbose=False):
        raise native.CompiledDispatchError("the compiled dispatch needs ninja to build (pip install ninja)")

    monkeypatch.setattr(native, "build", refused)
    assert main(["cache", "--build-dispatch"]) == 1
    assert "needs ninja" in capsys.readouterr().out
    monkeypatch.undo()

    built_in = Path(compiled.__file__).parents[2]  # <cache>/compiled-dispatch/<name>/<name>.so
    monkeypatch.setenv("GEMMZOO_CACHE_DIR", str(built_in))
    monkeypatch.setenv(native.ENV_SWITCH, "on")
    assert main(["cache", "--build-dispatch", "--format", "json"]) == 0  # already built: found
    captured = capsys.readouterr()
    assert "compiled dispatch ready" in captured.err
    record = json.loads(captured.out)[0]["compiled_dispatch"]
    assert record == {"built": True, "reason": None, "path": compiled.__file__}


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64"])
@pytest.mark.parametrize("layout", ["NN", "NT", "TN"])
def test_cuda_results_are_the_python_dispatchs_bit_for_bit(compiled, dtype, layout):
    torch_dtype = getattr(torch, dtype)
    for seed, (m, n, k) in enumerate([(1, 4096, 512), (32, 1536, 1024), (130, 70, 4096), (256, 256, 8192)]):
        a, b = (x.cuda() for x in random_operands(m, n, k, torch_dtype, layout, seed))
        for backend in (None, "torch"):
            got = [gemmzoo.matmul(a, b, backend) for _ in range(3)]
            dispatch.use_compiled(None)
            want = gemmzoo.matmul(a, b, backend)
            dispatch.use_compiled(compiled)
            assert all(torch.equal(c, want) for c in got), (m, n, k, backend)


@pytest.mark.gpu
def test_cuda_switches_the_caller_changed_are_still_held(compiled):
    """A caller who allows TF32 (or fp16 accumulation) gets gemmzoo's float32 (float16) product all
    the same, as through the Python dispatch, and finds the switch as it left it."""
    settings = torch.backends.cuda.matmul
    cases = [("float32", "allow_tf32")]
    if hasattr(settings, "allow_fp16_accumulation"):
        cases.append(("float16", "allow_fp16_accumulation"))
    for dtype, switch in cases:
        a, b = (x.cuda() for x in random_operands(64, 96, 2048, getattr(torch, dtype), "NN", 12))
        before = getattr(settings, switch)
        try:
            setattr(settings, switch, False)
            plain = gemmzoo.matmul(a, b, "torch")
            setattr(settings, switch, True)
            compiled_result = gemmzoo.matmul(a, b, "torch")
            dispatch.use_compiled(None)
            python_result = gemmzoo.matmul(a, b, "torch")
            dispatch.use_compiled(compiled)
            assert getattr(settings, switch) is True
            assert torch.equal(compiled_result, python_result) and torch.equal(compiled_result, plain)
        finally:
            setattr(settings, switch, before)


class Tf32Cpu(TorchCpuBackend):
    """A CPU backend that takes tf32 (torch-cpu's fp32 math), its plan declared torch.mm or not."""

    name = "tf32-cpu"
    dtypes = frozenset({"tf32"})

    def __init__(self, declare=False):
        self.calls, self.declare = 0, declare

    def prepare(self, x, y):
        def run(x, y):
            self.calls += 1
            return gemmzoo.TF32Array(torch.mm(x.data, y.data))

        return declare_torch_mm(self_checking(run)) if self.declare else run


@pytest.mark.parametrize("declare", [False, True])
def test_tf32_operands_go_through_the_table_and_come_back_wrapped(compiled, declare):
    a, b = random_operands(7, 5, 6, torch.float32, "TN", 15)
    backend = Tf32Cpu(declare)
    compiled.forget()
    for _ in range(3):
        c = gemmzoo.matmul(gemmzoo.TF32Array(a), gemmzoo.TF32Array(b), backend)
        assert type(c) is gemmzoo.TF32Array and torch.equal(c.data, torch.mm(a, b))
    assert compiled.planned() == 1 and backend.calls == (0 if declare else 3)
    np_a, np_b = a.numpy(), b.numpy()  # TF32Array of NumPy arrays: the Python dispatch takes them
    c = gemmzoo.matmul(gemmzoo.TF32Array(np_a), gemmzoo.TF32Array(np_b), backend)
    assert type(c) is gemmzoo.TF32Array and np.array_equal(c.data, torch.mm(a, b).numpy())
    assert compiled.planned() == 1


@pytest.mark.parametrize("route", ["python", "compiled"])
def test_tf32_operands_met_before_any_plain_tensor_are_planned_once(route, compiled_dispatch_module,
                                                                    monkeypatch):
    """A TF32Array's key is its tensors' key: a process whose first products are tf32 (or whose
    plain tensors all went through the compiled dispatch) still keeps their plan."""
    monkeypatch.setenv(native.ENV_SWITCH, "on")
    # A process that has met no plain tensor yet: the dispatch's per-process tables emptied (they
    # are no setting a caller passes; test_import_graph's allowlist names these two lines).
    monkeypatch.setattr(dispatch, "_KEYS", {gemmzoo.TF32Array: dispatch._tf32_key})
    monkeypatch.setattr(dispatch, "_ROUTES", {})
    if route == "compiled":
        dispatch.use_compiled(compiled_dispatch_module)
    planned = []
    original = dispatch.make_plan
    monkeypatch.setattr(dispatch, "make_plan", lambda *args: planned.append(args) or original(*args))
    a, b = random_operands(6, 5, 4, torch.float32, "NN", 13)
    backend = Tf32Cpu()
    for _ in range(3):
        c = gemmzoo.matmul(gemmzoo.TF32Array(a), gemmzoo.TF32Array(b), backend)
    assert len(planned) == 1
    assert torch.equal(c.data, torch.mm(a, b))


def test_a_plan_let_go_may_call_gemmzoo_matmul(compiled):
    """Emptying the table lets go of the plans; a plan's finalizer that multiplies then finds a table
    it can use."""
    a, b = random_operands(5, 4, 3, torch.float32, "NN", 16)
    results = []

    class Finalized(TorchCpuBackend):
        name = "finalized"

        def prepare(self, x, y):
            class Plan:
                def __call__(self, x, y):
                    return torch.mm(x, y)

                def __del__(self):
                    results.append(gemmzoo.matmul(a, b, "torch-cpu"))

            return self_checking(Plan())

    backend = Finalized()
    for seed in range(3):  # several problems, each with a plan of its own
        x, y = random_operands(4 + seed, 3, 2, torch.float32, "NN", seed)
        assert torch.equal(gemmzoo.matmul(x, y, backend), torch.mm(x, y))
    del backend
    state.plan_cache.plans.clear()  # the table holds the only references left
    state.plan_cache.last = NO_PLAN
    compiled.forget()
    assert len(results) == 3 and all(torch.equal(c, torch.mm(a, b)) for c in results)
    assert compiled.planned() == 1  # the finalizers' problem, planned while the table was emptied
