"""The adapters to other libraries' internals (gemmzoo/adapters/ and the plugins' own): each fails
here, loudly, when the library it reaches into changes."""

from __future__ import annotations

import json
import os
import random
from types import SimpleNamespace

import pytest

from gemmzoo.adapters import pytest_benchmark as bench_session


def test_pytest_benchmark_is_a_tested_version_with_the_session_attributes(request):
    assert bench_session.unsupported_reason(request.config) is None


def test_pytest_benchmark_refuses_an_untested_major_version(monkeypatch):
    monkeypatch.setattr(bench_session, "version", lambda: "99.0.0")
    assert "99.0.0" in bench_session.unsupported_reason()
    assert not bench_session.supported()


def test_a_session_missing_an_attribute_is_named(monkeypatch):
    config = SimpleNamespace(_benchmarksession=SimpleNamespace(disabled=True))
    reason = bench_session.unsupported_reason(config)
    assert reason is not None and "benchmarks" in reason and "compare_fail" in reason


def test_benchmarks_survive_the_trip_from_a_worker_to_the_controller():
    rng = random.Random(7)
    data = [rng.uniform(1e-6, 1e-3) for _ in range(9)]
    sent = [{
        "name": "test_gemm[8x8x8-float32-NN-numpy]", "fullname": "t.py::test_gemm[8x8x8-float32-NN-numpy]",
        "group": "8x8x8-float32-NN", "param": "8x8x8-float32-NN-numpy", "params": {"gemm_point": "p"},
        "extra_info": {"tflops": rng.random()}, "options": {"timer": "DeviceClock"},
        "stats": {"iterations": 1, "data": data},
    }]
    controller = SimpleNamespace(_benchmarksession=SimpleNamespace(benchmarks=[]))
    assert bench_session.add_finished(controller, json.dumps(sent)) == 1
    # The controller's records read back as pytest-benchmark writes them into its JSON.
    received = controller._benchmarksession.benchmarks
    worker = SimpleNamespace(_benchmarksession=SimpleNamespace(benchmarks=received))
    (back,) = json.loads(bench_session.finished_json(worker))
    for key in ("name", "fullname", "group", "param", "params", "extra_info", "options"):
        assert back[key] == sent[0][key], key
    assert back["stats"]["data"] == data
    assert back["stats"]["median"] == pytest.approx(sorted(data)[4])
    assert back["stats"]["rounds"] == len(data)


# Triton: the launcher's and the autotuner's internals ------------------------------------------


def _triton_internals():
    pytest.importorskip("torch")
    pytest.importorskip("triton")
    from gemmzoo_triton.core import triton_internals

    return triton_internals


def test_triton_is_a_tested_version():
    assert _triton_internals().unsupported_reason() is None


def test_a_first_compiles_per_process_work_is_done_once_ahead(monkeypatch):
    internals = _triton_internals()
    from triton.runtime import cache

    calls = []
    monkeypatch.setattr(cache, "triton_key", lambda: calls.append("key") or "k")
    internals.warm_compiler()
    import sys

    assert calls == ["key"] and "triton.experimental.gluon.language" in sys.modules


def test_an_untested_triton_major_version_is_refused(monkeypatch):
    internals = _triton_internals()
    import triton

    monkeypatch.setattr(triton, "__version__", "9.1.0")
    internals.unsupported_reason.cache_clear()
    try:
        assert "9.1.0" in internals.unsupported_reason()
    finally:
        monkeypatch.undo()
        internals.unsupported_reason.cache_clear()


def _compiled_mode_kernels(monkeypatch):
    """A ``triton.jit`` kernel and an autotuner over one, made as on a GPU (not interpreted)."""
    import triton
    import triton.language as tl

    monkeypatch.setenv("TRITON_INTERPRET", "0")

    @triton.jit
    def scale(x_ptr, n, FACTOR: tl.constexpr, BLOCK: tl.constexpr):  # noqa: N803 - constexprs
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(x_ptr + offsets, tl.load(x_ptr + offsets, mask=offsets < n) * FACTOR, mask=offsets < n)

    tuned = triton.autotune(configs=[triton.Config({"BLOCK": 64})], key=["n"])(scale)
    return scale, tuned


def test_a_jit_kernel_lists_its_constexpr_parameters_in_order(monkeypatch):
    internals = _triton_internals()
    kernel, _ = _compiled_mode_kernels(monkeypatch)
    assert [param.name for param in kernel.params if param.is_constexpr] == ["FACTOR", "BLOCK"]
    values = {"BLOCK": 64, "FACTOR": 3, "num_warps": 4}
    assert internals.constexpr_values(kernel, values) == (3, 64)


def test_an_autotuner_keeps_its_function_and_argument_names(monkeypatch):
    internals = _triton_internals()
    kernel, tuned = _compiled_mode_kernels(monkeypatch)
    assert internals.kernel_name(tuned) == "scale"
    assert internals.jit_function(tuned) is kernel
    assert internals.argument_names(tuned) == ["x_ptr", "n", "FACTOR", "BLOCK"]


def test_a_compiled_kernel_gives_a_launcher_per_grid():
    internals = _triton_internals()
    from triton.compiler.compiler import CompiledKernel

    assert callable(getattr(CompiledKernel, "__getitem__", None))

    class Compiled:
        def __getitem__(self, grid):
            return ("launcher", grid)

    class Future:
        def result(self):
            return Compiled()

    assert internals.compiled_launcher(Compiled(), (2, 1, 1)) == ("launcher", (2, 1, 1))
    assert internals.compiled_launcher(Future(), (3, 1, 1)) == ("launcher", (3, 1, 1))
    assert internals.compiled_launcher(None, (1, 1, 1)) is None


def test_the_stream_launcher_calls_the_drivers_launcher_as_tritons_own_does(monkeypatch):
    """The direct launch passes what the compiled kernel's own launcher passes (this Triton's
    source is read for it: a release that changes the call fails here), and hands launches to
    that launcher while a launch hook is set."""
    import inspect

    from triton import knobs
    from triton.compiler.compiler import CompiledKernel

    internals = _triton_internals()
    source = inspect.getsource(CompiledKernel.__getitem__)
    assert "self.run(grid[0], grid[1], grid[2], stream, self.function, self.packed_metadata" in source
    assert callable(getattr(CompiledKernel, "_init_handles", None))
    calls = []

    class Compiled:
        function, packed_metadata = "function", "packed"

        def _init_handles(self):
            calls.append("init")

        def run(self, *args):
            calls.append(("run", args))

        def __getitem__(self, grid):
            return lambda *args, stream: calls.append(("own", grid, stream, args))

    for name in ("launch_enter_hook", "launch_exit_hook"):  # none listening, whatever this Triton's default
        hook = getattr(knobs.runtime, name)
        monkeypatch.setattr(knobs.runtime, name, type(hook)() if hasattr(hook, "calls") else None)
    launch = internals.stream_launcher(Compiled(), (4, 2, 1))
    launch(77, "x", 5)
    assert calls == ["init", ("run", (4, 2, 1, 77, "function", "packed", None, None, None, "x", 5))]
    if hasattr(knobs.runtime.launch_exit_hook, "add"):
        knobs.runtime.launch_exit_hook.add(lambda metadata: None)
    else:
        monkeypatch.setattr(knobs.runtime, "launch_exit_hook", lambda metadata: None)
    launch(78, "y")
    assert calls[-1] == ("own", (4, 2, 1), 78, ("y",))

    class Bare:
        def _init_handles(self):
            pass

    assert internals.stream_launcher(Bare(), (1, 1, 1)) is None


def test_the_autotuner_keeps_the_config_it_picked(empty_cache):  # a full pick is kept on disk
    internals = _triton_internals()
    import torch

    from gemmzoo_triton.core import autotune
    from gemmzoo_triton.grouped import pointer_kernel

    gen = torch.Generator().manual_seed(5)
    x, y = torch.randn(23, 41, generator=gen), torch.randn(41, 17, generator=gen)  # a shape of its own
    if os.environ.get("TRITON_INTERPRET") != "1":  # compiled kernels: the operands on the GPU
        x, y = x.cuda(), y.cuda()
    c = torch.empty(23, 17, device=x.device)
    assert pointer_kernel.picked(x, y, "ieee", "full") is None
    config = pointer_kernel.launch(x, y, c, "ieee", mode="full")  # through the autotuner
    assert internals.picked_config(pointer_kernel.grouped_matmul_kernel) is config
    assert autotune.PICKED[pointer_kernel.pointer_key(x, y, "ieee")] is config
    torch.testing.assert_close(c, x @ y, rtol=1e-4, atol=1e-4)


def test_an_autotuner_without_the_attribute_is_a_clear_error():
    internals = _triton_internals()
    with pytest.raises(RuntimeError, match="best_config"):
        internals.picked_config(object())


def test_bound_launch_takes_the_public_path_on_an_unknown_triton(monkeypatch):
    internals = _triton_internals()
    from gemmzoo_triton.core import launch

    monkeypatch.setattr(launch, "interpreter_mode", lambda: False)
    monkeypatch.setattr(internals, "unsupported_reason", lambda: "an unknown Triton")
    calls = []

    class Kernel:  # no ``params``: the bound launch must not read Triton's internals
        def __getitem__(self, grid):
            return lambda *args, **constexprs: calls.append((grid, args, constexprs))

    bound = launch.BoundLaunch(Kernel(), (4,), {"BLOCK": 8})
    bound("a", "b")
    bound("c", "d")
    assert calls == [((4, 1, 1), ("a", "b"), {"BLOCK": 8}), ((4, 1, 1), ("c", "d"), {"BLOCK": 8})]


def test_a_bound_launch_given_a_device_launches_directly_on_its_current_stream(monkeypatch):
    internals = _triton_internals()
    from gemmzoo_triton.core import launch

    monkeypatch.setattr(launch, "interpreter_mode", lambda: False)
    monkeypatch.setattr(internals, "unsupported_reason", lambda: None)
    monkeypatch.setattr(internals, "constexpr_values", lambda kernel, constexprs: (constexprs["BLOCK"],))
    streams = iter([11, 12])
    monkeypatch.setattr(internals, "stream_reader_of",
                        lambda device: (lambda: next(streams)) if device == "gpu:0" else None)
    direct, own = [], []
    monkeypatch.setattr(internals, "compiled_launcher",
                        lambda launched, grid: lambda *args, stream=None: own.append(args))
    monkeypatch.setattr(internals, "stream_launcher",
                        lambda launched, grid: lambda stream, *args: direct.append((stream, args)))

    class Kernel:
        def __getitem__(self, grid):
            return lambda *args, **constexprs: "compiled"

    class Tensor:
        def data_ptr(self):
            return 64

    x = Tensor()
    bound = launch.BoundLaunch(Kernel(), (4,), {"BLOCK": 8}, pointers=(0,), device="gpu:0")
    bound(x, 3)  # the first launch of an alignment goes through triton.jit
    bound(x, 5)
    bound(x, 6)
    assert direct == [(11, (x, 5, 8)), (12, (x, 6, 8))] and own == []
    bound = launch.BoundLaunch(Kernel(), (4,), {"BLOCK": 8}, pointers=(0,))  # no device
    bound(x, 3)
    bound(x, 5)
    assert own == [(x, 5, 8)] and len(direct) == 2


# torch: the private cuBLAS switch accessors --------------------------------------------------


def test_torch_keeps_its_cublas_switch_accessors():
    torch = pytest.importorskip("torch")
    from gemmzoo_torch import torch_internals
    from gemmzoo_torch.precision import _NEEDS

    assert torch_internals.unsupported_reason() is None
    switches = {name for needs in _NEEDS.values() for name, _ in needs}
    present = [name for name in switches if hasattr(torch.backends.cuda.matmul, name)]
    assert "allow_tf32" in present
    for name in present:
        accessors = torch_internals.cublas_accessors(name)
        assert accessors is not None, name
        get, _, pair = accessors
        public = getattr(torch.backends.cuda.matmul, name)
        assert (get()[0] if pair else get()) == public, name


def test_an_untested_torch_major_version_uses_the_public_switches(monkeypatch):
    torch = pytest.importorskip("torch")
    from gemmzoo_torch import torch_internals

    monkeypatch.setattr(torch, "__version__", "3.0.0")
    assert "3.0.0" in torch_internals.unsupported_reason()
    assert torch_internals.cublas_accessors("allow_tf32") is None


def test_the_stream_lookup_is_tritons_own_where_it_has_one(monkeypatch):
    internals = _triton_internals()
    import triton

    class Active:
        def get_current_stream(self, index):
            return 1000 + index

    class Drivers:
        active = Active()

    monkeypatch.setattr(triton.runtime, "driver", Drivers())
    assert internals.current_stream_reader(3)() == 1003


def test_without_an_active_triton_driver_the_stream_lookup_is_torchs(monkeypatch):
    internals = _triton_internals()
    import triton

    class Drivers:
        @property
        def active(self):
            raise RuntimeError("0 active drivers")

    monkeypatch.setattr(triton.runtime, "driver", Drivers())
    torch = pytest.importorskip("torch")

    class Stream:
        cuda_stream = 77

    monkeypatch.setattr(torch.cuda, "current_stream", lambda index: Stream())
    assert internals.current_stream_reader(0)() == 77


class _Warming:
    """A stand-in for a ``triton.jit`` function: it records each warmup, whether Triton's
    compile mode was active then, and the descriptor block shape the config's pre_hook set."""

    def __init__(self, fail_on: int | None = None) -> None:
        self.calls: list[tuple[dict, tuple, bool, object]] = []
        self.fail_on = fail_on
        self.block: object = None

    def warmup(self, *args, grid, **kwargs):
        from triton.runtime._async_compile import active_mode

        self.calls.append((kwargs, grid, active_mode.get() is not None, self.block))
        if kwargs.get("BLOCK") == self.fail_on:
            raise RuntimeError("does not compile")
        return self.compiled(kwargs.get("BLOCK"))

    def compiled(self, block):
        """What a warmup returns: a compiled kernel (a stand-in), or its future in the compile mode."""
        return _Compiled(block)


class _Compiled:
    def __init__(self, block, module=None):
        self.src, self.metadata, self.module = f"src-{block}", f"meta-{block}", module


class _Future:
    def __init__(self, kernel=None):
        self.kernel = kernel

    def result(self):
        if self.kernel is None:
            raise RuntimeError("its compile failed")
        return self.kernel


def _configs(kernel, blocks):
    import triton

    def hook(named):  # as a TMA kernel's hook sets its descriptors' block shape
        kernel.block = (named["BLOCK"], named["x"])

    return [triton.Config({"BLOCK": b}, num_warps=4, num_stages=s, pre_hook=hook) for b, s in blocks]


def test_configs_are_compiled_at_once_in_tritons_compile_mode_each_after_its_hook():
    internals = _triton_internals()
    pytest.importorskip("triton.runtime._async_compile")
    kernel = _Warming()
    configs = _configs(kernel, [(32, 2), (64, 3), (128, 4)])
    named = {"x": "x-arg", "n": 7}
    assert internals.compile_at_once(kernel, configs, ("x-arg", 7), {"PRECISION": "ieee"}, named)
    assert [c[0] for c in kernel.calls] == [
        {"PRECISION": "ieee", **config.all_kwargs()} for config in configs]
    assert all(c[1] == (1,) for c in kernel.calls)  # a warmup launches nothing: any grid
    assert all(c[2] for c in kernel.calls)  # inside the compile mode: compiled by the pool
    assert [c[3] for c in kernel.calls] == [(32, "x-arg"), (64, "x-arg"), (128, "x-arg")]
    from triton.runtime._async_compile import active_mode

    assert active_mode.get() is None  # and the mode ended with the call


def test_each_compiled_kernels_launcher_is_made_in_the_pool_and_failures_are_left(monkeypatch):
    """Kernels compiled at once get their launchers made in the compile threads (where Triton builds
    them with the C compiler); a failed compile, a kernel already loaded and a launcher that fails
    are left to the kernel's first launch."""
    internals = _triton_internals()
    pytest.importorskip("triton.runtime._async_compile")
    import threading

    import triton

    made = []

    class Active:
        def launcher_cls(self, src, metadata):
            made.append((src, metadata, threading.current_thread().name))
            if src == "src-256":
                raise RuntimeError("the C compiler failed")

    class Drivers:
        active = Active()

    monkeypatch.setattr(triton.runtime, "driver", Drivers())

    class Mixed(_Warming):
        def compiled(self, block):
            return {32: _Compiled(32), 64: _Future(_Compiled(64)), 128: _Future(None),
                    16: _Compiled(16, module="loaded"), 256: _Compiled(256)}[block]

    kernel = Mixed()
    configs = _configs(kernel, [(32, 2), (64, 3), (128, 4), (16, 2), (256, 3)])
    assert internals.compile_at_once(kernel, configs, ("x-arg",), {}, {"x": "x-arg"})
    assert sorted(m[:2] for m in made) == [("src-256", "meta-256"), ("src-32", "meta-32"),
                                           ("src-64", "meta-64")]
    assert all(m[2].startswith("gemmzoo-triton-compile") for m in made)


def test_without_an_active_driver_no_launcher_is_made(monkeypatch):
    internals = _triton_internals()
    pytest.importorskip("triton.runtime._async_compile")
    import triton

    class Drivers:
        @property
        def active(self):
            raise RuntimeError("0 active drivers")

    monkeypatch.setattr(triton.runtime, "driver", Drivers())
    kernel = _Warming()
    assert internals.compile_at_once(kernel, _configs(kernel, [(32, 2), (64, 3)]), ("x-arg",), {},
                                     {"x": "x-arg"})
    assert len(kernel.calls) == 2


def test_a_config_that_fails_to_compile_is_left_to_the_autotuner_and_one_config_is_not_warmed():
    internals = _triton_internals()
    pytest.importorskip("triton.runtime._async_compile")
    kernel = _Warming(fail_on=64)
    configs = _configs(kernel, [(64, 3), (128, 4)])
    assert internals.compile_at_once(kernel, configs, (), {}, {"x": None}) is True
    assert [c[0]["BLOCK"] for c in kernel.calls] == [64, 128]  # the others are still compiled
    lone = _Warming()
    assert internals.compile_at_once(lone, _configs(lone, [(64, 3)]), (), {}, {"x": None}) is False
    assert lone.calls == []
