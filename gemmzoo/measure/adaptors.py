"""Other ways to take device samples, beside the engine's events: a CUDA graph replay, and the
timers of other tools (``triton.testing.do_bench``, NVIDIA's nvbench through ``cuda-bench``), as
cross-checks of the engine."""

from __future__ import annotations

import contextlib
import importlib
import itertools
import os
import tempfile
import warnings
from collections.abc import Callable
from typing import Any

from gemmzoo.errors import GemmError
from gemmzoo.measure.stats import MIN_SAMPLES, Timing


def graph_call(call: Callable[[], Any]) -> Callable[[], Any]:
    """``call`` captured once in a CUDA graph (torch); the result replays it. The call must
    launch its work on torch's current stream and return a torch tensor: a call that launches
    elsewhere (CuPy on its own stream) would leave the graph empty, and raises
    :class:`~gemmzoo.errors.GemmError` instead of replaying nothing."""
    import torch

    from gemmzoo.contract.backend import TF32Array

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # torch asks for a warm-up on a side stream before capture
        call()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            with torch.cuda.graph(graph):
                output = call()
        except Exception as error:
            raise GemmError(
                f"this call cannot be captured in a CUDA graph: {type(error).__name__}: {error}") from error
    empty = [w for w in caught if "graph is empty" in str(w.message).lower()]
    for w in caught:
        if w not in empty:
            warnings.warn(w.message, w.category, stacklevel=2)
    result = output.data if isinstance(output, TF32Array) else output
    if empty:
        raise GemmError("a CUDA graph of this call is empty: it launches nothing on torch's current stream")
    if not isinstance(result, torch.Tensor):
        raise GemmError(f"this call returns {type(result).__name__}, not a torch tensor: its work is not "
                        "launched on torch's stream, and a CUDA graph of that stream would not hold it")

    def replay() -> Any:
        graph.replay()
        return output

    return replay


def do_bench_timing(call: Callable[[], Any], budget_s: float, target: float | None = None) -> Timing:
    """Device time per call from ``triton.testing.do_bench`` (its own flush, events and number of
    calls); with a noise ``target``, whether its samples met it."""
    from triton.testing import do_bench

    rep_ms = max(1.0, budget_s * 1e3)
    method = "triton.testing.do_bench"
    try:
        times = do_bench(call, warmup=25, rep=rep_ms, return_mode="all")
    except (TypeError, ValueError, AssertionError):  # a Triton without return_mode="all"
        q1, median, q3 = do_bench(call, warmup=25, rep=rep_ms, quantiles=[0.25, 0.5, 0.75])
        return Timing(median / 1e3, q1 / 1e3, q3 / 1e3, 0, method)
    return Timing.of([t / 1e3 for t in times], method, target)


NVBENCH_MISSING = ("--timer nvbench needs NVIDIA's cuda-bench package, not installed here: "
                   "pip install 'gemmzoo[nvbench]' (cuda-bench[cu12] or [cu13] to match the CUDA driver)")
_NVBENCH_NAMES = itertools.count()


def cuda_bench() -> Any:
    """The ``cuda.bench`` module, or a :class:`~gemmzoo.errors.GemmError` naming the extra."""
    try:
        import cuda.bench as bench
    except ImportError:
        raise GemmError(NVBENCH_MISSING) from None
    return bench


def torch_stream(stream: Any) -> contextlib.AbstractContextManager[Any]:
    """Make the CUDA stream nvbench hands a launch (``CudaStream.addressof()``) torch's current
    stream, so that a backend that launches on torch's current stream launches on it."""
    import torch

    return torch.cuda.stream(torch.cuda.ExternalStream(stream.addressof()))


def current_cuda_device() -> int:
    """The CUDA ordinal torch works on in this process (0 before torch has started CUDA)."""
    import sys

    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        return int(torch.cuda.current_device())
    return 0


def nvbench_timing(call: Callable[[], Any], budget_s: float, target: float, device: int | None = None,
                   bench: Any = None, on_stream: Callable[[Any], Any] = torch_stream) -> Timing:
    """Device time per call measured by nvbench (``cuda-bench``'s public API): ``call`` is
    registered as a benchmark of its own, run alone (``--benchmark``) on ``device`` with
    nvbench's cold measurement (its stream hold, L2 flush and events) and its stdrel stopping rule
    at ``target`` within ``budget_s``, and read back from its JSON output with the samples
    (``--jsonbin``). Calls run inside ``on_stream(launch stream)``: a backend that launches on
    torch's current stream is timed; one that launches on a stream of its own (CuPy) is not, as
    with the graph timer. ``bench`` replaces the ``cuda.bench`` module, for tests."""
    bench = bench if bench is not None else cuda_bench()
    device = current_cuda_device() if device is None else device
    name = f"gemmzoo-{os.getpid()}-{next(_NVBENCH_NAMES)}"
    failures: list[BaseException] = []

    def body(state: Any) -> None:
        def launcher(launch: Any) -> None:
            with on_stream(launch.get_stream()):
                call()

        try:
            state.exec(launcher, batched=False)
        except BaseException as error:  # nvbench reports it on stdout only; keep it to raise here
            failures.append(error)
            raise

    benchmark = bench.register(body)
    benchmark.set_name(name)
    benchmark.set_min_samples(MIN_SAMPLES)
    benchmark.set_timeout(max(budget_s, 0.01))
    benchmark.set_stopping_criterion("stdrel")
    benchmark.set_criterion_param_float64("max-noise", target)
    benchmark.set_criterion_param_float64("min-time", budget_s / 4)
    with tempfile.TemporaryDirectory(prefix="gemmzoo-nvbench-") as folder:
        path = os.path.join(folder, "result.json")
        bench.run_all_benchmarks(["gemmzoo", "--quiet", "--benchmark", name, "--devices", str(device),
                                  "--jsonbin", path])
        if failures:
            raise GemmError(f"nvbench: the call raised {type(failures[0]).__name__}: {failures[0]}")
        if not os.path.exists(path):
            raise GemmError(f"nvbench wrote no result for {name} (run with --timer events to see why)")
        results = getattr(bench, "results", None) or importlib.import_module("cuda.bench.results")
        return nvbench_result_timing(results.BenchmarkResult.from_json(path), name, target)


def nvbench_result_timing(result: Any, name: str, target: float) -> Timing:
    """The :class:`Timing` of benchmark ``name`` in an nvbench ``BenchmarkResult``: from its
    samples where it kept them, else its mean and relative deviation (no quartiles)."""
    method = "nvbench cold measurement (cuda-bench)"
    if name not in result or not len(result[name]):
        raise GemmError(f"nvbench: no measurement of {name} in its result (skipped, or no GPU)")
    state = result[name][0]
    samples = state.samples
    if samples is not None and len(samples):
        return Timing.of([float(s) for s in samples], method, target)
    mean = state.summaries.get("nv/cold/time/gpu/mean")
    noise = state.summaries.get("nv/cold/time/gpu/stdev/relative")
    if mean is None or mean.value is None:
        raise GemmError(f"nvbench: {name} has neither samples nor a mean GPU time")
    seconds = float(mean.value)
    relative = float(noise.value) if noise is not None and noise.value is not None else float("nan")
    return Timing(seconds, seconds, seconds, 0, method + ", mean", noise=relative,
                  converged=relative <= target, target=target)
