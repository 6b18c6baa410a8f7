"""The measurement engine: inputs for a grid point, a one-off correctness check, and timing.

Shared by ``gemmzoo bench``, the pytest-benchmark fixtures, ``gemmzoo tune`` and
``best_backend``. Inputs are random normal values made outside any timed region. On a CUDA
backend each call is timed with device events (start and end recorded around the GEMM alone,
the L2 cache flushed between calls outside the events, one synchronisation per batch of calls),
so a sample is the device time of one GEMM; on the CPU a sample is the wall time of one call.
:class:`DeviceClock` offers the same device time as a clock, for pytest-benchmark's ``timer=``.
See docs/benchmarks.md.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import math
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from gemmzoo.conformance.bounds import reference
from gemmzoo.conformance.judge import CheckFailedError, judge_result
from gemmzoo.errors import GemmError
from gemmzoo.grids import GridPoint

L2_FLUSH_BYTES = 256 * 1024 * 1024  # larger than any current GPU's L2, like triton.testing.do_bench


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
    """Seconds per GEMM: median and quartiles over ``samples`` timed calls."""

    median_s: float
    q1_s: float
    q3_s: float
    samples: int
    method: str

    @property
    def spread_s(self) -> float:
        """The interquartile range."""
        return self.q3_s - self.q1_s


@dataclass(frozen=True)
class Measurement:
    """One backend on one grid point: its timing and its error relative to the bound."""

    backend: str
    point: GridPoint
    timing: Timing
    error_ratio: float
    rel_error: float = float("nan")

    @property
    def tflops(self) -> float:
        return self.point.flops / self.timing.median_s / 1e12 if self.timing.median_s > 0 else 0.0


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
    of the backend's accuracy class.

    Raises :class:`WrongResultError` saying what is wrong when any of that fails.
    """
    point, backend = problem.point, problem.backend
    c = backend.matmul(problem.a, problem.b)
    try:
        verdict = judge_result(backend, point.dtype, problem.a, c, problem.a_host, problem.b_host,
                               reference=_reference(problem.a_host, problem.b_host))
    except CheckFailedError as failure:
        raise WrongResultError(f"{backend.name}: {point.id}: {failure}") from None
    return CheckResult(verdict.error_ratio, verdict.rel_error, verdict.max_abs_error)


def check(problem: Problem) -> float:
    """Run the GEMM once and judge it (see :func:`compare`); returns the largest
    ``|error| / bound`` (at most 1), or raises :class:`WrongResultError`."""
    return compare(problem).error_ratio


def _cpu_samples(call: Callable[[], Any], backend: Any, budget_s: float, max_samples: int) -> list[float]:
    samples: list[float] = []
    deadline = time.perf_counter() + budget_s
    while len(samples) < max_samples and (len(samples) < 3 or time.perf_counter() < deadline):
        start = time.perf_counter()
        call()
        backend.synchronize()
        samples.append(time.perf_counter() - start)
    return samples


def _torch_cuda() -> bool:
    """Whether torch is installed with CUDA usable (a CPU build on a CuPy machine is not)."""
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


#: What a spin on the GPU is sized in: a Hopper's boost clock, near enough.
GPU_CYCLES_PER_S = 2e9

#: A spin before the first flush after a synchronisation, when the GPU's queue is empty, for
#: GEMMs shorter than the flush: the host gets this much of a lead before the first calls of a
#: round or batch. Without it, rounds of ~130 calls of a 29 µs GEMM (2048^3) read 10-15% over
#: do_bench for backends with 50-80 µs launch paths, while batches five times longer did not: a
#: fixed cost per round. Longer GEMMs give the host its lead by themselves, and there the spin
#: only cooled the GPU: rounds of a 4096^3 GEMM read 6-7% under do_bench with it.
HEAD_START_S = 1e-3


class LaunchPacer:
    """How long the GPU should spin before the next flush, so that it never waits for the host
    between a call's start event and its kernel.

    For each timed call the host launches the flush, records the start event, runs the backend's
    launch path and records the end event, while the GPU runs the previous flush and GEMM. If the
    host is the slower, the GPU idles inside the events and launch time counts as GEMM time:
    triton-grouped's ~70 µs Python path against a 29 µs GEMM at 2048³ read 0.55× of do_bench's
    time on the H100. ``note_launch`` takes the host time of that whole timed call (flush,
    events, launch path); the spin asked for is twice it, less the flush and the GEMM that keep
    the GPU busy anyway: none for fast launch paths and for long GEMMs, which then run back
    to back with their flushes as in ``triton.testing.do_bench``. A longer spin would not be
    harmless: idle gaps let the GPU run cooler, and a 4096³ GEMM run back to back draws enough
    power that the H100 lowers its clock; timings with gaps read ~7% faster than do_bench
    (docs/results/2026-11-21-timing-agreement.md).

    The launch and GEMM times are the shortest seen: a launch that found the launch queue full
    waited for the GPU, and a GEMM whose events the GPU idled between (for want of a spin) only
    look longer. ``flush_s`` is the device time of one flush.
    """

    def __init__(self, flush_s: float) -> None:
        self.flush_s = flush_s
        self.launch_s = math.inf
        self.gemm_s = 0.0

    def note_launch(self, host_s: float) -> None:
        """A timed call's host time: flush, events and the backend's launch path."""
        self.launch_s = min(self.launch_s, host_s)

    def note_gemm(self, device_s: float) -> None:
        """A call's device time (the shortest counts: a sample the GPU idled in reads longer)."""
        self.gemm_s = device_s if self.gemm_s == 0.0 else min(self.gemm_s, device_s)

    def spin_s(self, drained: bool = False) -> float:
        """Seconds of GPU spin to put before the next flush (0 before any launch was seen), plus
        :data:`HEAD_START_S` when the GPU's queue is ``drained`` and the GEMM is shorter than the
        flush (or not yet timed)."""
        head_start = HEAD_START_S if drained and self.gemm_s < self.flush_s else 0.0
        if math.isinf(self.launch_s):
            return head_start
        return head_start + max(0.0, 2 * self.launch_s - self.flush_s - self.gemm_s)


class CudaEvents:
    """Timing events, an L2 flush and a device synchronisation for the current CUDA device.

    Events come from torch when it is installed, else from CuPy; both record on the current
    stream, which is where the bundled backends launch their work. The flush writes a buffer
    larger than the L2 cache, as ``triton.testing.do_bench`` does, so no operand stays cached
    from the previous call. With torch, ``flush(spin_s)`` first spins the GPU for ``spin_s``
    (see :class:`LaunchPacer`); with CuPy alone there is no spin. ``flush_s`` is the device time
    of one flush, measured once.
    """

    def __init__(self) -> None:
        if _torch_cuda():
            import torch

            self._new_event = lambda: torch.cuda.Event(enable_timing=True)
            self._flush_buffer = torch.empty(L2_FLUSH_BYTES // 4, dtype=torch.int32, device="cuda")

            def flush(spin_s: float = 0.0) -> None:
                if spin_s > 0:
                    torch.cuda._sleep(int(spin_s * GPU_CYCLES_PER_S))
                self._flush_buffer.zero_()

            self.flush = flush
            self.synchronize = torch.cuda.synchronize
            self._elapsed_ms = lambda start, end: start.elapsed_time(end)
        else:
            import cupy

            self._new_event = cupy.cuda.Event
            self._flush_buffer = cupy.empty(L2_FLUSH_BYTES // 4, dtype=cupy.int32)
            self.flush = lambda spin_s=0.0: self._flush_buffer.fill(0)
            self.synchronize = cupy.cuda.Device().synchronize
            self._elapsed_ms = lambda start, end: cupy.cuda.get_elapsed_time(start, end)
        self.flush_s = self._time_flush()

    def _time_flush(self, count: int = 3) -> float:
        pairs = []
        for _ in range(count):
            start, end = self.pair()
            start.record()
            self.flush()
            end.record()
            pairs.append((start, end))
        self.synchronize()
        return min(self.elapsed_s(start, end) for start, end in pairs)

    def pair(self) -> tuple[Any, Any]:
        """A fresh (start, end) pair of timing events; each has ``record()``."""
        return self._new_event(), self._new_event()

    def elapsed_s(self, start: Any, end: Any) -> float:
        """Seconds of device time between two recorded events (both completed)."""
        return self._elapsed_ms(start, end) / 1e3


def _pacer(events: Any) -> LaunchPacer:
    return LaunchPacer(getattr(events, "flush_s", 0.0))  # event sources made for tests may lack it


class CudaEventTimer:
    """Device-time samples from CUDA events, one synchronisation per batch of calls."""

    def __init__(self, events: Any = None) -> None:
        self.events = events if events is not None else CudaEvents()
        self.pacer = _pacer(self.events)

    def batch(self, call: Callable[[], Any], count: int, flush: bool = True) -> list[float]:
        """Seconds of device time for each of ``count`` calls (L2 flushed before each, outside
        its events)."""
        pairs = []
        for index in range(count):
            began = time.perf_counter()
            if flush:
                self.events.flush(self.pacer.spin_s(drained=index == 0))
            start, end = self.events.pair()
            start.record()
            call()
            end.record()
            self.pacer.note_launch(time.perf_counter() - began)
            pairs.append((start, end))
        self.events.synchronize()
        samples = [self.events.elapsed_s(start, end) for start, end in pairs]
        self.pacer.note_gemm(min(samples))
        return samples


class DeviceClock:
    """A clock that reads the GEMM time a device has spent, for pytest-benchmark's ``timer=``.

    ``clock.wrap(call)`` gives a function that flushes L2, then records a start event, runs
    ``call`` and records an end event, and keeps the pair. Reading the clock (``clock()``)
    synchronises once if pairs are pending, adds their elapsed device times to a running total
    and returns that total. pytest-benchmark reads its timer before and after each round, so the
    duration of a round is the device time of the wrapped calls in it: not their launch time,
    not the flush, and not the synchronisation, which happens once per round outside the pairs.

    ``events`` supplies ``pair()``, ``flush()``, ``synchronize()`` and ``elapsed_s(start, end)``
    (:class:`CudaEvents` by default, made on first use so that building a clock touches no GPU).
    """

    __name__ = "DeviceClock"  # pytest-benchmark names its timer by __module__ and __name__

    def __init__(self, events: Any = None) -> None:
        self._events = events
        self._pending: list[tuple[Any, Any, LaunchPacer]] = []
        self._total = 0.0
        self.syncs = 0
        self._drained = True  # nothing queued on the GPU since the last synchronisation

    @property
    def events(self) -> Any:
        """The event source (created on first use)."""
        if self._events is None:
            self._events = CudaEvents()
        return self._events

    def __call__(self) -> float:
        if self._pending:
            events = self.events
            events.synchronize()
            self.syncs += 1
            for start, end, pacer in self._pending:
                elapsed = events.elapsed_s(start, end)
                pacer.note_gemm(elapsed)
                self._total += elapsed
            self._pending.clear()
            self._drained = True
        return self._total

    def wrap(self, call: Callable[[], Any], flush: bool = True) -> Callable[[], Any]:
        """``call`` with an event pair around it (and the L2 flush before, outside the pair, with
        the spin its :class:`LaunchPacer` asks for, plus :data:`HEAD_START_S` after a read of
        the clock)."""
        pacer: LaunchPacer | None = None

        def timed() -> Any:
            nonlocal pacer
            events = self.events
            pacer = pacer or _pacer(events)
            began = time.perf_counter()
            if flush:
                events.flush(pacer.spin_s(drained=self._drained))
                self._drained = False
            start, end = events.pair()
            start.record()
            result = call()
            end.record()
            pacer.note_launch(time.perf_counter() - began)
            self._pending.append((start, end, pacer))
            return result

        return timed

    def __repr__(self) -> str:
        return "DeviceClock()"


#: Seconds of timed-but-discarded calls before the samples on a GPU (do_bench's warm-up is 25 ms
#: by default, plus five calls to size its run).
WARMUP_S = 0.05


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Python's garbage collector off inside, as ``timeit`` does. A full collection in a process
    holding torch and Triton takes milliseconds; in the middle of a batch of short GEMMs it
    stalls the host until the GPU has run dry, and the GPU then idles between some call's events."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _cuda_samples(call: Callable[[], Any], budget_s: float, max_samples: int,
                  events: Any = None) -> list[float]:
    with gc_paused():
        return _cuda_batches(call, budget_s, max_samples, events)


def _cuda_batches(call: Callable[[], Any], budget_s: float, max_samples: int, events: Any) -> list[float]:
    timer = CudaEventTimer(events)
    first = timer.batch(call, 1)[0]
    # Warm up as do_bench does, for about 50 ms of calls, samples discarded: a large GEMM's clock
    # settles (under the power cap) in that time, and the samples should come from there.
    timer.batch(call, max(1, int(WARMUP_S / max(first + timer.pacer.flush_s, 1e-6))))
    batch = max(1, min(max_samples, int(0.02 / max(first, 1e-6))))  # about 20 ms of GEMMs per batch
    samples: list[float] = []
    deadline = time.perf_counter() + budget_s
    while len(samples) < max_samples and (len(samples) < 3 or time.perf_counter() < deadline):
        samples += timer.batch(call, batch)
    return samples


def time_problem(problem: Problem, budget_s: float = 0.5, warmup: int = 2, max_samples: int = 1000,
                 events: Any = None) -> Timing:
    """Time the GEMM of ``problem``: warm-up calls first, then samples until the budget is spent
    (at least 3). ``events`` replaces the CUDA event source (:class:`CudaEvents`), for tests."""
    backend = problem.backend

    def call() -> Any:
        return backend.matmul(problem.a, problem.b)

    for _ in range(warmup):
        call()
    backend.synchronize()
    if backend.device == "cuda":
        samples, method = _cuda_samples(call, budget_s, max_samples, events), "cuda-events, L2 flushed"
    else:
        samples, method = _cpu_samples(call, backend, budget_s, max_samples), "wall clock"
    if len(samples) > 1:
        q1, median, q3 = statistics.quantiles(samples, n=4, method="inclusive")
    else:
        q1 = median = q3 = samples[0]
    return Timing(median, q1, q3, len(samples), method)


def measure(backend: Any, point: GridPoint, budget_s: float = 0.5, verify: bool = True,
            seed: int = 0) -> Measurement:
    """Prepare, check once (unless ``verify`` is False) and time one backend on one point."""
    problem = prepare(backend, point, seed)
    result = compare(problem) if verify else CheckResult(float("nan"), float("nan"), float("nan"))
    timing = time_problem(problem, budget_s)
    return Measurement(backend.name, point, timing, result.error_ratio, result.rel_error)
