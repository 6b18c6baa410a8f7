"""The measurement engine: inputs for a grid point, a one-off correctness check, and timing.

Shared by ``gemmzoo bench``, the pytest-benchmark fixtures, ``gemmzoo tune`` and
``best_backend``. Inputs are random normal values made outside any timed region. Each
measurement gives two times per call:

- **device time**: on a CUDA backend, the time between CUDA events recorded around the GEMM
  alone, with the L2 cache flushed before each call outside the events. The calls of a batch are
  queued behind a hold on the stream (:mod:`gemmzoo.gpu_stream`) and run back to back once it is
  released, so no launch time can enter a sample; the next batch is queued while one runs, so
  the GPU does not idle between batches either. At most :data:`MAX_QUEUED_CALLS` calls make a
  batch, well inside CUDA's launch queue. On the CPU, the wall time of one call.
- **host time**: what one call costs the calling thread, from a loop of calls (on a GPU, queued
  behind a hold, so the loop never waits for the device).

A caller that loops over calls waits for the larger of the two (:attr:`Measurement.caller_s`);
when host time is the larger the call is *launch-bound*. :class:`DeviceClock` gives the device
time as a clock for pytest-benchmark's ``timer=``. ``timer="graph"`` replays the call from a CUDA
graph (torch), ``timer="do_bench"`` asks ``triton.testing.do_bench`` for the device time, as a
cross-check. See docs/benchmarks.md.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import statistics
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from gemmzoo.conformance.bounds import reference
from gemmzoo.conformance.judge import CheckFailedError, judge_result
from gemmzoo.errors import GemmError
from gemmzoo.grids import GridPoint

TIMERS = ("events", "graph", "do_bench")
"""The device timers :func:`measure` offers (see the module docstring)."""

#: Calls queued behind one hold. CUDA's launch queue holds about a thousand entries and a timed
#: call makes at least four (flush, two events, the GEMM), and two batches may be queued at once:
#: beyond the queue the host would block on a launch while the GPU waits for the host.
MAX_QUEUED_CALLS = 64


class WrongResultError(GemmError):
    """A backend's result is outside the conformance error bound: it is wrong, not fast."""


@dataclass
class Problem:
    """Native inputs for one grid point on one backend."""

    backend: Any
    point: GridPoint
    a: Any
    b: Any
    a_host: np.ndarray
    b_host: np.ndarray


@dataclass(frozen=True)
class Timing:
    """Seconds per GEMM: median and quartiles over ``samples`` timed calls (``data``: the
    samples themselves, kept so that rounds can be merged)."""

    median_s: float
    q1_s: float
    q3_s: float
    samples: int
    method: str
    data: tuple[float, ...] = field(default=(), repr=False, compare=False)

    @property
    def spread_s(self) -> float:
        """The interquartile range."""
        return self.q3_s - self.q1_s

    @classmethod
    def of(cls, samples: Sequence[float], method: str) -> Timing:
        """Median and quartiles of ``samples`` (at least one)."""
        if not samples:
            raise ValueError("no samples to summarise")
        if len(samples) > 1:
            q1, median, q3 = statistics.quantiles(samples, n=4, method="inclusive")
        else:
            q1 = median = q3 = samples[0]
        return cls(median, q1, q3, len(samples), method, tuple(samples))

    def merged(self, other: Timing) -> Timing:
        """Both timings' samples as one (the method of the first); a timing that kept no samples
        (do_bench's quartiles) gives way to the one with more."""
        if not self.data or not other.data:
            return self if self.samples >= other.samples else other
        return Timing.of([*self.data, *other.data], self.method)


@dataclass(frozen=True)
class Measurement:
    """One backend on one grid point: device and host time per call, and its error against the
    bound. ``host`` is ``None`` only for measurements made without host timing."""

    backend: str
    point: GridPoint
    timing: Timing
    error_ratio: float
    rel_error: float = float("nan")
    host: Timing | None = None

    @property
    def tflops(self) -> float:
        """TFLOPS from the median device time."""
        return self.point.flops / self.timing.median_s / 1e12 if self.timing.median_s > 0 else 0.0

    @property
    def host_s(self) -> float | None:
        """Median host time per call."""
        return self.host.median_s if self.host is not None else None

    @property
    def caller_s(self) -> float:
        """What a loop of calls achieves per call: the larger of device and host time."""
        return max(self.timing.median_s, self.host_s or 0.0)

    @property
    def caller_spread_s(self) -> float:
        """The spread of whichever time :attr:`caller_s` is."""
        return self.host.spread_s if self.launch_bound and self.host else self.timing.spread_s

    @property
    def launch_bound(self) -> bool:
        """Whether the host time per call exceeds the device time: the GPU waits for launches."""
        return self.host_s is not None and self.host_s > self.timing.median_s

    @property
    def caller_tflops(self) -> float:
        """TFLOPS at the caller time."""
        return self.point.flops / self.caller_s / 1e12 if self.caller_s > 0 else 0.0

    def merged(self, other: Measurement) -> Measurement:
        """This measurement and a later round's of the same backend and point, as one."""
        host = self.host.merged(other.host) if self.host and other.host else self.host or other.host
        return replace(self, timing=self.timing.merged(other.timing), host=host)


def _operand(backend: Any, x: np.ndarray, dtype: str, transposed: bool) -> Any:
    if transposed:  # stored as its transpose: a column-major view, as BLAS's "T"
        return backend.from_numpy(np.ascontiguousarray(x.T), dtype).T
    return backend.from_numpy(x, dtype)


@functools.lru_cache(maxsize=1)
def _host_operands(m: int, n: int, k: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Random normal A (M×K) and B (K×N), read-only. The last pair is kept: the backends measured
    one after another on a point get the same values without drawing them again."""
    rng = np.random.default_rng(seed)
    a, b = rng.standard_normal((m, k)), rng.standard_normal((k, n))
    a.setflags(write=False)
    b.setflags(write=False)
    return a, b


def prepare(backend: Any, point: GridPoint, seed: int = 0) -> Problem:
    """Random normal operands for ``point`` on ``backend``, laid out as ``point.layout`` says."""
    a_values, b_values = _host_operands(point.m, point.n, point.k, seed)
    a = _operand(backend, a_values, point.dtype, point.layout[0] == "T")
    b = _operand(backend, b_values, point.dtype, point.layout[1] == "T")
    return Problem(backend, point, a, b, backend.to_numpy(a), backend.to_numpy(b))


@dataclass(frozen=True)
class CheckResult:
    """How far one result is from the float64 reference.

    ``error_ratio``: the largest ``|error| / bound`` over the elements (at most 1 for a
    conforming result); ``rel_error``: ``‖C - R‖ / ‖R‖`` (Frobenius norms); ``max_abs_error``:
    the largest ``|C - R|``.
    """

    error_ratio: float
    rel_error: float
    max_abs_error: float


_reference_cache: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []


def _reference(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``A·B`` and ``|A|·|B|`` in float64. The last answer is kept: the backends measured one
    after another on a point get the same host operands, and the big references are slow."""
    for cached_a, cached_b, ref, magnitude in _reference_cache:
        if cached_a.shape == a.shape and cached_b.shape == b.shape and np.array_equal(cached_a, a) \
                and np.array_equal(cached_b, b):
            return ref, magnitude
    ref, magnitude = reference(a, b)
    _reference_cache[:] = [(a.copy(), b.copy(), ref, magnitude)]
    return ref, magnitude


def compare(problem: Problem) -> CheckResult:
    """Run the GEMM once and judge it as the conformance suite does
    (:func:`gemmzoo.conformance.judge.judge_result`): C's type, shape and dtype, ``to_numpy``'s
    dtype, NaN and Inf where the float64 reference has them, and every element within the bound
    of the backend's accuracy class. For a CUDA backend the float64 reference is computed on its
    GPU when :mod:`gemmzoo.verify` can, else on the host.

    Raises :class:`WrongResultError` saying what is wrong when any of that fails.
    """
    point, backend = problem.point, problem.backend
    c = backend.matmul(problem.a, problem.b)
    reference = None
    if backend.device == "cuda":  # the float64 products on the GPU where it can (gemmzoo.verify)
        from gemmzoo.verify import device_reference

        reference = device_reference(problem.a, problem.b)
    if reference is None:
        reference = _reference(problem.a_host, problem.b_host)
    try:
        verdict = judge_result(backend, point.dtype, problem.a, c, problem.a_host, problem.b_host,
                               reference=reference)
    except CheckFailedError as failure:
        raise WrongResultError(f"{backend.name}: {point.id}: {failure}") from None
    return CheckResult(verdict.error_ratio, verdict.rel_error, verdict.max_abs_error)


def check(problem: Problem) -> float:
    """Run the GEMM once and judge it (see :func:`compare`); returns the largest
    ``|error| / bound`` (at most 1), or raises :class:`WrongResultError`."""
    return compare(problem).error_ratio


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Python's garbage collector off inside, as ``timeit`` does: a full collection in a process
    holding torch and Triton takes milliseconds, which would land in a host-time sample."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


class Engine:
    """Device and host time of calls on a CUDA device, queued behind holds on the stream.

    ``gpu`` supplies ``pair()``, ``flush()``, ``synchronize()``, ``wait(event)``,
    ``elapsed_s(start, end)`` and ``hold()`` (:class:`gemmzoo.gpu_stream.CudaGpu` by default, made
    on first use so that building an engine touches no GPU). :meth:`queue` is the one place a
    timed call is made; :meth:`batch` (one batch, then a synchronisation) and :meth:`stream`
    (batches back to back: the bench samples and :class:`DeviceClock`'s rounds) build on it.
    """

    def __init__(self, gpu: Any = None) -> None:
        self._gpu = gpu
        self._pending: list[tuple[Any, Any]] = []
        self._hold: Any = None
        self.holding = True  # False once no hold can be used for these calls

    @property
    def gpu(self) -> Any:
        """The device interface (created on first use)."""
        if self._gpu is None:
            from gemmzoo.gpu_stream import default_gpu

            self._gpu = default_gpu()
        return self._gpu

    @property
    def method(self) -> str:
        """How the device samples were taken, in words."""
        how = "queued behind a stream hold" if self.holding else "without a stream hold"
        return f"cuda-events, L2 flushed, {how}"

    def _open(self) -> None:
        if self._hold is None and self.holding:
            self._hold = self.gpu.hold()
            if self._hold is None:  # no hold kernel on this machine
                self.holding = False

    def _release(self) -> bool:
        """Let the queued work run; False when the watchdog had to open the hold (the calls
        synchronise or fill the launch queue, so they cannot wait behind one)."""
        hold, self._hold = self._hold, None
        if hold is None:
            return True
        hold.release()
        if hold.expired:
            self.holding = False
            return False
        return True

    def queue(self, call: Callable[[], Any], flush: bool = True) -> Any:
        """Queue one timed call: the L2 flush, a start event, ``call``, an end event."""
        if not self._pending:
            self._open()
        elif len(self._pending) >= MAX_QUEUED_CALLS:
            self._release()  # the rest of this batch runs unheld rather than fill the queue
        gpu = self.gpu
        if flush:
            gpu.flush()
        start, end = gpu.pair()
        start.record()
        result = call()
        end.record()
        self._pending.append((start, end))
        return result

    def collect(self) -> tuple[list[float], bool]:
        """Release the hold, synchronise once, and return the device seconds of every queued call,
        and whether they ran behind an intact hold."""
        intact = self._release()
        gpu = self.gpu
        gpu.synchronize()
        pairs, self._pending = self._pending, []
        return [gpu.elapsed_s(start, end) for start, end in pairs], intact

    def batch(self, call: Callable[[], Any], count: int, flush: bool = True) -> list[float]:
        """Device seconds of each of ``count`` calls (at most :data:`MAX_QUEUED_CALLS`), run back
        to back after the host queued them all."""
        while True:
            for _ in range(max(1, min(count, MAX_QUEUED_CALLS))):
                self.queue(call, flush)
            samples, intact = self.collect()
            if intact or not self.holding:
                return samples

    def _launch(self, call: Callable[[], Any], count: int, flush: bool) -> tuple[list[tuple[Any, Any]], bool]:
        """Queue ``count`` timed calls behind a fresh hold and release it; the pairs and whether the
        hold stayed intact."""
        for _ in range(count):
            self.queue(call, flush)
        pairs, self._pending = self._pending, []
        return pairs, self._release()

    def stream(self, call: Callable[[], Any], count: int, flush: bool = True) -> Iterator[list[float]]:
        """Batches of ``count`` timed calls (at most :data:`MAX_QUEUED_CALLS`), endlessly: each
        batch is queued behind its own hold while the batch before it runs, so the GPU goes from
        batch to batch without waiting for the host (idle gaps would let a large GEMM's clock
        rise above the sustained one). Yields each batch's device seconds once it has run; at
        most two batches are queued at a time. Closing the generator waits for the last one."""
        count = max(1, min(count, MAX_QUEUED_CALLS))
        gpu = self.gpu
        running = self._launch(call, count, flush)
        try:
            while True:
                queued = self._launch(call, count, flush)
                gpu.wait(running[0][-1][1])  # the end event of the running batch's last call
                pairs, intact = running
                if intact or not self.holding:
                    yield [gpu.elapsed_s(start, end) for start, end in pairs]
                running = queued
        finally:
            gpu.synchronize()

    def host_per_call(self, call: Callable[[], Any], count: int) -> float:
        """Host seconds per call over a loop of ``count`` calls queued behind a hold, so the
        loop never waits for the device."""
        count = max(1, min(count, MAX_QUEUED_CALLS))
        while True:
            self._open()
            start = time.perf_counter()
            for _ in range(count):
                call()
            elapsed = time.perf_counter() - start
            intact = self._release()
            self.gpu.synchronize()
            if intact or not self.holding:
                return elapsed / count


class DeviceClock:
    """A clock that reads the GEMM time a device has spent, for pytest-benchmark's ``timer=``.

    ``clock.wrap(call, calls)`` gives a target that, each time it is called, takes the next batch
    of ``calls`` timed calls from :meth:`Engine.stream` (the batch after it is already queued, so
    the GPU runs from batch to batch without waiting for the host) and adds the batch's median
    device time per call to a running total; reading the clock (``clock()``) returns that total.
    pytest-benchmark reads its timer before and after each round, so with ``iterations=1`` a
    round's duration is the median device time of one GEMM in a batch that ran back to back: not
    launch time, not the flush, not a synchronisation. The median, not the mean, so that a few
    slow calls in a batch (a clock dip under the power cap) move a round as little as they move
    the engine's and do_bench's medians over single calls. :meth:`finish` drains the last batch.
    """

    __name__ = "DeviceClock"  # pytest-benchmark names its timer by __module__ and __name__

    def __init__(self, gpu: Any = None) -> None:
        self.engine = Engine(gpu)
        self._total = 0.0
        self._stream: Iterator[list[float]] | None = None
        self.reads = 0
        self.batches = 0

    def __call__(self) -> float:
        self.reads += 1
        return self._total

    def wrap(self, call: Callable[[], Any], calls: int = 1, flush: bool = True) -> Callable[[], None]:
        """A target that runs one batch of ``calls`` timed calls of ``call`` per invocation."""
        self.finish()
        stream = self._stream = self.engine.stream(call, calls, flush)

        def timed() -> None:
            self._total += statistics.median(next(stream))
            self.batches += 1

        return timed

    def finish(self) -> None:
        """Wait for the batch still queued and drop it (call after the last round)."""
        if self._stream is not None:
            self._stream.close()
            self._stream = None

    def __repr__(self) -> str:
        return "DeviceClock()"


#: Seconds of timed-but-discarded calls before the samples on a GPU: do_bench's warm-up, since a
#: large GEMM's clock keeps sinking for longer than that and the two must sample the same stretch.
WARMUP_S = 0.025
#: Device time per batch of timed calls, and the host-time batches taken per measurement.
BATCH_S = 0.01
HOST_BATCHES = 9
CALLER_ROUNDS = 5
"""Rounds of :func:`interleaved_caller_timings`."""
CALLER_LOOP_S = 0.005
"""About how long each loop of :func:`interleaved_caller_timings` runs."""


def _cpu_samples(call: Callable[[], Any], backend: Any, budget_s: float, max_samples: int) -> list[float]:
    samples: list[float] = []
    deadline = time.perf_counter() + budget_s
    while len(samples) < max_samples and (len(samples) < 3 or time.perf_counter() < deadline):
        start = time.perf_counter()
        call()
        backend.synchronize()
        samples.append(time.perf_counter() - start)
    return samples


def _device_samples(call: Callable[[], Any], engine: Engine, budget_s: float,
                    max_samples: int) -> list[float]:
    first = max(engine.batch(call, 1)[0], 1e-7)
    batches = engine.stream(call, max(1, min(MAX_QUEUED_CALLS, int(BATCH_S / first))))
    try:
        warm_until = time.perf_counter() + WARMUP_S  # warm-up and samples from one stream: no gap
        for _ in batches:
            if time.perf_counter() >= warm_until:
                break
        samples: list[float] = []
        deadline = time.perf_counter() + budget_s
        for batch in batches:
            samples += batch
            if len(samples) >= max_samples or (len(samples) >= 3 and time.perf_counter() >= deadline):
                break
    finally:
        batches.close()
    return samples[:max_samples]


def host_timing(call: Callable[[], Any], engine: Engine, device_s: float) -> Timing:
    """Host seconds per call: :data:`HOST_BATCHES` loops of calls behind a hold, each of about
    10 ms of the GEMM's device time (``device_s`` per call), 1 to :data:`MAX_QUEUED_CALLS` calls
    (three loops of one call for GEMMs over 10 ms, whose host time hardly matters), after one
    loop whose time is dropped, a warm-up: the host comes to the loops from waiting on the device.
    The median over the loops is the figure; host time varies more from one measurement to the
    next than within one (docs/results/2026-11-23-timing-engine.md)."""
    count = max(1, min(MAX_QUEUED_CALLS, int(0.01 / max(device_s, 1e-7))))
    with gc_paused():
        engine.host_per_call(call, count)
        samples = [engine.host_per_call(call, count) for _ in range(HOST_BATCHES if count > 1 else 3)]
    return Timing.of(samples, "host loop behind a stream hold" if engine.holding else "host loop")


def planned(backend: Any, a: Any, b: Any) -> Callable[[Any, Any], Any]:
    """What ``gemmzoo.matmul`` calls for operands like ``a`` and ``b``: the backend's plan
    (:meth:`gemmzoo.Backend.prepare`), or its ``matmul`` for an object without one."""
    prepare = getattr(backend, "prepare", None)
    return prepare(a, b) if prepare is not None else backend.matmul


def loop_per_call_s(call: Callable[[], Any], count: int, synchronize: Callable[[], None]) -> float:
    """Seconds per call of ``count`` calls in a loop ended by one synchronisation: what a program
    that calls in a loop gets, launch path and device work overlapping as they do there."""
    synchronize()
    start = time.perf_counter()
    for _ in range(count):
        call()
    synchronize()
    return (time.perf_counter() - start) / count


def interleaved_caller_timings(problems: Sequence[Problem], caller_s: Sequence[float],
                               rounds: int = CALLER_ROUNDS) -> list[Timing]:
    """Caller time of each problem's GEMM (:func:`loop_per_call_s`, loops of about
    :data:`CALLER_LOOP_S`), over ``rounds`` rounds that take the problems in turn, alternating which
    goes first. Host times drift from one measurement to the next by more than they vary within
    one; taking the backends in turn puts the same drift into every backend's rounds, and the
    spread over the rounds (their interquartile range) is what ranking them must allow for.
    ``caller_s`` is a first estimate of each one's time per call (it sets the loop's length)."""
    calls = [functools.partial(planned(p.backend, p.a, p.b), p.a, p.b) for p in problems]
    counts = [max(8, min(2000, int(CALLER_LOOP_S / max(t, 1e-7)))) for t in caller_s]
    for call, problem in zip(calls, problems, strict=True):  # warm: allocator, launch caches
        loop_per_call_s(call, 8, problem.backend.synchronize)
    per_round: list[list[float]] = [[] for _ in problems]
    order = list(range(len(problems)))
    for number in range(rounds):
        for index in (order if number % 2 == 0 else order[::-1]):
            sync = problems[index].backend.synchronize
            per_round[index].append(loop_per_call_s(calls[index], counts[index], sync))
    method = f"loops of calls ended by one synchronisation, {rounds} interleaved rounds"
    return [Timing.of(values, method) for values in per_round]


def graph_call(call: Callable[[], Any]) -> Callable[[], Any]:
    """``call`` captured once in a CUDA graph (torch); the result replays it. The call must
    launch its work on torch's current stream and return a torch tensor: a call that launches
    elsewhere (CuPy on its own stream) would leave the graph empty, and raises
    :class:`~gemmzoo.errors.GemmError` instead of replaying nothing."""
    import torch

    from gemmzoo.backend import TF32Array

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


def do_bench_timing(call: Callable[[], Any], budget_s: float) -> Timing:
    """Device time per call from ``triton.testing.do_bench`` (its own flush and events)."""
    from triton.testing import do_bench

    rep_ms = max(1.0, budget_s * 1e3)
    method = "triton.testing.do_bench"
    try:
        times = do_bench(call, warmup=25, rep=rep_ms, return_mode="all")
    except (TypeError, ValueError, AssertionError):  # a Triton without return_mode="all"
        q1, median, q3 = do_bench(call, warmup=25, rep=rep_ms, quantiles=[0.25, 0.5, 0.75])
        return Timing(median / 1e3, q1 / 1e3, q3 / 1e3, 0, method)
    return Timing.of([t / 1e3 for t in times], method)


def time_calls(problem: Problem, budget_s: float = 0.5, warmup: int = 2, max_samples: int = 1000,
               gpu: Any = None, timer: str = "events") -> tuple[Timing, Timing]:
    """Device and host time of the GEMM of ``problem``: warm-up calls, then device samples until
    the budget is spent (at least 3), then host batches. ``timer`` is one of :data:`TIMERS` (it
    matters only on CUDA); ``gpu`` replaces the CUDA device interface, for tests."""
    if timer not in TIMERS:
        raise ValueError(f"unknown timer {timer!r}; known: {', '.join(TIMERS)}")
    backend = problem.backend
    a, b = problem.a, problem.b
    run = planned(backend, a, b)

    def call() -> Any:
        return run(a, b)

    for _ in range(warmup):
        call()
    backend.synchronize()
    if backend.device != "cuda":
        device = Timing.of(_cpu_samples(call, backend, budget_s, max_samples), "wall clock")
        return device, device
    if timer == "graph":
        call = graph_call(call)
    engine = Engine(gpu)
    if timer == "do_bench":
        device = do_bench_timing(call, budget_s)
    else:
        with gc_paused():
            samples = _device_samples(call, engine, budget_s, max_samples)
        method = engine.method + (", CUDA graph replay" if timer == "graph" else "")
        device = Timing.of(samples, method)
    return device, host_timing(call, engine, device.median_s)


def time_problem(problem: Problem, budget_s: float = 0.5, warmup: int = 2, max_samples: int = 1000,
                 gpu: Any = None, timer: str = "events") -> Timing:
    """The device time of the GEMM of ``problem`` (see :func:`time_calls`)."""
    return time_calls(problem, budget_s, warmup, max_samples, gpu, timer)[0]


def measure(backend: Any, point: GridPoint, budget_s: float = 0.5, verify: bool = True,
            seed: int = 0, timer: str = "events", gpu: Any = None) -> Measurement:
    """Prepare, check once (unless ``verify`` is False) and time one backend on one point."""
    problem = prepare(backend, point, seed)
    result = compare(problem) if verify else CheckResult(float("nan"), float("nan"), float("nan"))
    device, host = time_calls(problem, budget_s, gpu=gpu, timer=timer)
    return Measurement(backend.name, point, device, result.error_ratio, result.rel_error, host)
