"""Taking the samples: device and host time of one problem's GEMM, and caller time of several.

- **device time**: on a CUDA backend, CUDA events around the GEMM alone, the L2 flushed before
  each call, the calls queued behind a stream hold (:class:`~gemmzoo.measure.engine.Engine`); on
  the CPU, the wall time of one call; on a CUDA backend that runs on streams of its own
  (``stream_ordered = False``: no event on the caller's stream brackets its work), the wall time
  per call of loops of calls, each ended by the backend's ``synchronize``. Samples are taken
  until the stopping rule says the median is known well enough or the budget is spent
  (:class:`~gemmzoo.measure.stats.StoppingRule`).
- **host time**: what one call costs the calling thread, from loops of calls (on a GPU, queued
  behind a hold, so the loop never waits for the device).
- **caller time** of several problems: loops of calls ended by one synchronisation, in
  interleaved rounds (:func:`interleaved_caller_timings`).

Every timed region runs under the thread policy (:mod:`gemmzoo.measure.threads`); on CUDA the SM
clock is read between batches (:mod:`gemmzoo.measure.clocks`).
"""

from __future__ import annotations

import functools
import itertools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from gemmzoo.measure.adaptors import cuda_bench, current_cuda_device, do_bench_timing, graph_call
from gemmzoo.measure.calibration import Calibration, CalibrationWork
from gemmzoo.measure.clocks import ClockReport, ClockWatch, nvml_watch
from gemmzoo.measure.contention import ContentionReport, ContentionWatch
from gemmzoo.measure.engine import MAX_QUEUED_CALLS, Engine, gc_paused
from gemmzoo.measure.nvbench_child import timing_in_child
from gemmzoo.measure.problems import Problem, operand_copies, planned
from gemmzoo.measure.stats import NOISE_TARGET, StoppingRule, Timing
from gemmzoo.measure.threads import ThreadLimit, ThreadReport

TIMERS = ("events", "graph", "do_bench", "nvbench")
"""The device timers on CUDA: the engine's events, the engine replaying a CUDA graph, and the
timers of ``triton.testing.do_bench`` and nvbench (``cuda-bench``) as cross-checks."""

#: Seconds of timed-but-discarded calls before the samples on a GPU: do_bench's warm-up, since a
#: large GEMM's clock keeps sinking for longer than that and the two must sample the same stretch.
WARMUP_S = 0.025
#: Seconds of samples a GPU timing takes at least (the budget permitting), do_bench's default
#: repetition time: under a power cap a large GEMM's clock is still sinking after the warm-up, so
#: a timing that stopped at its first converged batches would read an earlier, faster stretch
#: than do_bench and pytest-benchmark do.
MIN_SAMPLE_S = 0.1
#: Device time per batch of timed calls, and the host-time batches taken per measurement.
BATCH_S = 0.01
HOST_BATCHES = 9
CALLER_ROUNDS = 5
"""Rounds of :func:`interleaved_caller_timings`."""
CALLER_LOOP_S = 0.005
"""About how long each loop of :func:`interleaved_caller_timings` runs."""


@dataclass(frozen=True)
class TimedCalls:
    """What :func:`run_timing` found: device and host time, the thread policy as applied, and the
    SM clock during the device samples (``None`` off CUDA or without NVML)."""

    device: Timing
    host: Timing
    threads: ThreadReport
    clocks: ClockReport | None = None
    #: ``(A, B, C)`` of the last timed call whose result could be kept (``None`` for timers that
    #: replay or time elsewhere): what :func:`gemmzoo.measure.reference.spot_check` judges.
    last: tuple[Any, Any, Any] | None = None
    #: On the CPU: whether the timing shared its cores (:mod:`gemmzoo.measure.contention`).
    contention: ContentionReport | None = None
    #: On the CPU, when asked for: the machine's speed during the samples
    #: (:mod:`gemmzoo.measure.calibration`).
    calibration: Calibration | None = None


#: Operand allocations a CPU timing takes its samples from in turn (see
#: :func:`gemmzoo.measure.problems.operand_copies`).
CPU_ALLOCATIONS = 4


def cpu_samples(call: Callable[[], Any], synchronize: Callable[[], None], rule: StoppingRule,
                beside: Callable[[float], None] | None = None) -> list[float]:
    """Wall seconds of single calls until ``rule`` says stop; ``beside`` is called with each
    sample's seconds after it is taken (the machine's calibration, :mod:`gemmzoo.measure.calibration`)."""
    samples: list[float] = []
    rule.start()
    with gc_paused():
        while True:
            start = time.perf_counter()
            call()
            synchronize()
            seconds = time.perf_counter() - start
            samples.append(seconds)
            if beside is not None:
                beside(seconds)
            if rule.done(samples):
                return samples


def stream_ordered(backend: Any) -> bool:
    """Whether CUDA events on the current stream bracket ``backend``'s work
    (:attr:`gemmzoo.Backend.stream_ordered`); an attribute that cannot be read counts as true."""
    try:
        return getattr(backend, "stream_ordered", True) is not False
    except Exception:
        return True


def loop_samples(call: Callable[[], Any], synchronize: Callable[[], None], rule: StoppingRule) -> list[float]:
    """Seconds per call of loops of calls, each loop about :data:`BATCH_S` long and ended by
    ``synchronize``, until ``rule`` says stop: :func:`cpu_samples` of one loop, divided by its
    length (one sample per loop)."""
    first = loop_per_call_s(call, 1, synchronize)
    count = max(1, min(1000, int(BATCH_S / max(first, 1e-7))))

    def loop() -> None:
        for _ in range(count):
            call()

    warm_until = time.perf_counter() + WARMUP_S
    while time.perf_counter() < warm_until:
        loop()
        synchronize()
    return [seconds / count for seconds in cpu_samples(loop, synchronize, rule)]


def device_samples(call: Callable[[], Any], engine: Engine, rule: StoppingRule,
                   watch: ClockWatch | None = None) -> list[float]:
    """Device seconds of calls in batches of about :data:`BATCH_S` from one stream of batches:
    :data:`WARMUP_S` of them discarded, then batches until ``rule`` says stop; the SM clock read
    after each batch."""
    first = max(engine.batch(call, 1)[0], 1e-7)
    batches = engine.stream(call, max(1, min(MAX_QUEUED_CALLS, int(BATCH_S / first))))
    samples: list[float] = []
    try:
        warm_until = time.perf_counter() + WARMUP_S  # warm-up and samples from one stream: no gap
        for _ in batches:
            if time.perf_counter() >= warm_until:
                break
        rule.start()
        for batch in batches:
            samples += batch
            if watch is not None:
                watch.read()
            if rule.done(samples):
                break
    finally:
        batches.close()
    return samples[:rule.max_samples]


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
                               rounds: int = CALLER_ROUNDS, threads: int | None = None) -> list[Timing]:
    """Caller time of each problem's GEMM (:func:`loop_per_call_s`, loops of about
    :data:`CALLER_LOOP_S`), over ``rounds`` rounds that take the problems in turn, alternating which
    goes first. Host times drift from one measurement to the next by more than they vary within
    one; taking the backends in turn puts the same drift into every backend's rounds, and the
    spread over the rounds (their interquartile range) is what ranking them must allow for.
    ``caller_s`` is a first estimate of each one's time per call (it sets the loop's length);
    ``threads`` the thread policy's count (see :mod:`gemmzoo.measure.threads`)."""
    calls = [functools.partial(planned(p.backend, p.a, p.b), p.a, p.b) for p in problems]
    counts = [max(8, min(2000, int(CALLER_LOOP_S / max(t, 1e-7)))) for t in caller_s]
    per_round: list[list[float]] = [[] for _ in problems]
    with ThreadLimit(threads):
        for call, problem in zip(calls, problems, strict=True):  # warm: allocator, launch caches
            loop_per_call_s(call, 8, problem.backend.synchronize)
        order = list(range(len(problems)))
        for number in range(rounds):
            for index in (order if number % 2 == 0 else order[::-1]):
                sync = problems[index].backend.synchronize
                per_round[index].append(loop_per_call_s(calls[index], counts[index], sync))
    method = f"loops of calls ended by one synchronisation, {rounds} interleaved rounds"
    return [Timing.of(values, method) for values in per_round]


def run_timing(problem: Problem, budget_s: float = 0.5, warmup: int = 2, max_samples: int = 1000,
               gpu: Any = None, timer: str = "events", *, threads: int | None = None,
               noise_target: float = NOISE_TARGET, clock_watch: ClockWatch | None = None,
               settle_above_s: float | None = None, calibrate: bool = False) -> TimedCalls:
    """Device and host time of the GEMM of ``problem``: warm-up calls, then device samples under
    the stopping rule (``noise_target`` within ``budget_s``, at most ``max_samples``), then host
    loops, all under the thread policy (``threads``; see :mod:`gemmzoo.measure.threads`).
    ``timer`` is one of :data:`TIMERS` (it matters only on CUDA); ``gpu`` replaces the CUDA device
    interface and ``clock_watch`` the NVML clock reader, for tests. ``settle_above_s``: a rival's
    time; the device samples stop once they are slower than it beyond doubt
    (:class:`~gemmzoo.measure.stats.StoppingRule`; the engine's samples and the CPU's only).
    ``calibrate``: on the CPU, time the calibration workload between the samples
    (:mod:`gemmzoo.measure.calibration`) and return it with them."""
    if timer not in TIMERS:
        raise ValueError(f"unknown timer {timer!r}; known: {', '.join(TIMERS)}")
    backend = problem.backend
    a, b = problem.a, problem.b
    run = planned(backend, a, b)
    kept: list[tuple[Any, Any, Any]] = []

    def call() -> Any:
        result = run(a, b)
        kept[:] = [(a, b, result)]
        return result

    call()  # loads whatever libraries the call needs, so that the thread limit reaches them
    backend.synchronize()
    rule = StoppingRule(budget_s, noise_target, max_samples=max_samples,
                        min_time_s=MIN_SAMPLE_S if backend.device == "cuda" else 0.0,
                        settle_above_s=settle_above_s)
    with ThreadLimit(threads) as limit:
        for _ in range(warmup):
            call()
        backend.synchronize()
        if backend.device != "cuda":
            pairs = [(a, b), *operand_copies(problem, CPU_ALLOCATIONS - 1)]
            for pair in pairs[1:]:
                run(*pair)
            turns = itertools.cycle(pairs)

            def rotating() -> Any:
                pair = next(turns)
                result = run(*pair)
                kept[:] = [(*pair, result)]
                return result

            method = "wall clock" + (f", {len(pairs)} allocations in turn" if len(pairs) > 1 else "")
            work = CalibrationWork(limit.threads) if calibrate else None
            if work is not None:
                work.warm()
            watch_cores = ContentionWatch(limit.threads)
            watch_cores.start()
            beside = work.after if work is not None else None
            samples = cpu_samples(rotating, backend.synchronize, rule, beside)
            calibration = work.report(rule.target if rule.target > 0 else None) if work is not None else None
            device = rule.timing(samples, method)
            return TimedCalls(device, device, limit.report(), last=kept[0] if kept else None,
                              contention=watch_cores.stop(), calibration=calibration)
        watch = clock_watch if clock_watch is not None else nvml_watch()
        engine = Engine(gpu)
        if not stream_ordered(backend):  # whatever the timer: only the backend's own wait sees its work
            device = rule.timing(loop_samples(call, backend.synchronize, rule),
                                 "wall clock of loops of calls, each ended by synchronize (own streams)")
            watch.read()
            host = host_timing(call, engine, device.median_s)
            return TimedCalls(device, host, limit.report(), watch.report(), last=kept[0] if kept else None)
        if timer == "graph":
            kept.clear()  # a replay's output is the graph's own buffer: not one call's result
            call = graph_call(call)
        if timer in ("do_bench", "nvbench"):
            if timer == "do_bench":
                device = do_bench_timing(call, budget_s, noise_target)
            else:  # nvbench runs once a process: each timing in a child (gemmzoo.measure.nvbench_child)
                cuda_bench()  # a missing cuda-bench is said here, before any child starts
                device = timing_in_child(backend.name, problem.point, budget_s, noise_target,
                                         current_cuda_device())
            watch.read()
        else:
            with gc_paused():
                samples = device_samples(call, engine, rule, watch)
            method = engine.method + (", CUDA graph replay" if timer == "graph" else "")
            device = rule.timing(samples, method)
        host = host_timing(call, engine, device.median_s)
        keep = kept[0] if kept and timer == "events" else None
        return TimedCalls(device, host, limit.report(), watch.report(), last=keep)


def time_calls(problem: Problem, budget_s: float = 0.5, warmup: int = 2, max_samples: int = 1000,
               gpu: Any = None, timer: str = "events", threads: int | None = None) -> tuple[Timing, Timing]:
    """Device and host time of the GEMM of ``problem`` (see :func:`run_timing`)."""
    timed = run_timing(problem, budget_s, warmup, max_samples, gpu, timer, threads=threads)
    return timed.device, timed.host


def time_problem(problem: Problem, budget_s: float = 0.5, warmup: int = 2, max_samples: int = 1000,
                 gpu: Any = None, timer: str = "events") -> Timing:
    """The device time of the GEMM of ``problem`` (see :func:`run_timing`)."""
    return time_calls(problem, budget_s, warmup, max_samples, gpu, timer)[0]
