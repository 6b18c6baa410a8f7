"""gemmzoo in pytest-benchmark: one benchmark per backend x grid point, timed right on a GPU.

Used by gemmzoo's pytest plugin and :mod:`gemmzoo.benchmarks`; see docs/benchmarks.md. Only
pytest-benchmark's public API is used here: the ``benchmark`` mark (``timer=``, ``group=``),
``benchmark.pedantic``, ``benchmark.stats`` and ``benchmark.extra_info``. What each benchmark
records is :mod:`gemmzoo.results.benchmark_info`; running under pytest-xdist is :mod:`gemmzoo.pytest.xdist`.

CPU backends are timed by pytest-benchmark as usual (its calibration, its timer). CUDA backends
are timed with :data:`DEVICE_CLOCK`, a :class:`gemmzoo.measure.DeviceClock` that
:func:`benchmark_params` names in each param's ``benchmark`` mark as the timer. They run in
``benchmark.pedantic`` mode with one iteration per round: a round is one batch of timed calls
from :meth:`gemmzoo.measure.Engine.stream` (about :data:`ROUND_S` of GEMMs, at most
:data:`gemmzoo.measure.MAX_QUEUED_CALLS`; each batch queued behind a hold on the stream while
the batch before it runs, the L2 flush before each call outside its events), and the clock moves
by the batch's median device time per GEMM. As many rounds run as fit the wall-clock budget
(``--benchmark-max-time``, read at configuration by :func:`configure`), at least
``--benchmark-min-rounds``: pytest-benchmark's own calibration would spin forever measuring the
precision of a clock that only moves when a GEMM runs.

Every benchmark's ``extra_info`` has device, host and caller time per call (see
:mod:`gemmzoo.measure`), TFLOPS, GB/s and the roofline efficiency where the device is known.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pytest

from gemmzoo.measure import (
    MAX_QUEUED_CALLS,
    NOISE_TARGET,
    WARMUP_S,
    DeviceClock,
    Engine,
    StoppingRule,
    ThreadLimit,
    Timing,
    gc_paused,
    host_timing,
    judge_problem,
    make_problem,
    planned,
    stream_ordered,
)
from gemmzoo.measure.contention import ContentionWatch
from gemmzoo.problems.grids import GridPoint, parse_point
from gemmzoo.results.benchmark_info import extra_info

DEVICE_CLOCK = DeviceClock()
"""The process's device clock; every CUDA benchmark param names it as its timer."""

MAX_ROUNDS = 100_000
#: Wall-clock benchmarks (the CPU): a round lasts at least this long, and there are at most
#: :data:`MAX_CPU_ROUNDS` of them, so that a result file stays small.
CPU_ROUND_S = 0.002
MAX_CPU_ROUNDS = 500
#: Calls made to size a wall-clock benchmark's rounds, at most.
MAX_CALIBRATION_CALLS = 10_000
#: Rounds before the timed ones: at least this many, and at least ``WARMUP_S`` of GEMMs.
WARMUP_ROUNDS = 2
#: ... and at most this many (a GEMM whose device time reads 0 would never warm up otherwise).
MAX_WARMUP_ROUNDS = 1000
#: Device time of the GEMMs of one round (one batch) of a CUDA benchmark.
ROUND_S = 0.01

@dataclass(frozen=True)
class RoundBudget:
    """pytest-benchmark's ``--benchmark-max-time`` (seconds of rounds) and
    ``--benchmark-min-rounds`` for a run (its own defaults unless given)."""

    max_time: float = 1.0
    min_rounds: int = 5

    @classmethod
    def from_config(cls, config: pytest.Config) -> RoundBudget:
        """The budget a pytest run's command line sets."""
        max_time = config.getoption("benchmark_max_time", None)
        min_rounds = config.getoption("benchmark_min_rounds", None)
        return cls(cls.max_time if max_time is None else float(max_time),
                   cls.min_rounds if min_rounds is None else int(min_rounds))


def benchmark_params(backends: Sequence[Any], points: Sequence[GridPoint]) -> list[Any]:
    """``pytest.param(backend_name, point_id)`` for each backend x point the backend computes.

    Each is marked with its benchmark group (the point's id, so a table compares backends on one
    problem) and, for CUDA backends, the device clock as timer. An unavailable backend is one
    skipped param that says why.
    """
    from gemmzoo.plugins.registry import unavailable_reason

    params, usable = [], []
    for backend in backends:
        reason = unavailable_reason(backend)  # guarded: a broken plugin is skipped, not a crash
        if reason is None:
            usable.append(backend)
            continue
        skip = pytest.mark.skip(reason=f"{backend.name} unavailable: {reason}")
        params.append(pytest.param(backend.name, None, id=f"{backend.name}-unavailable", marks=skip))
    # Point-major order: the backends of one point run one after another and share its float64
    # reference (see gemmzoo.measure._reference), which is slow to compute for large shapes.
    for point in points:
        for backend in usable:
            if point.dtype not in backend.dtypes:
                continue
            options: dict[str, Any] = {"group": point.id}
            if _events_time(backend):
                options["timer"] = DEVICE_CLOCK
            params.append(pytest.param(backend.name, point.id, id=f"{point.id}-{backend.name}",
                                       marks=pytest.mark.benchmark(**options)))
    return params


def _events_time(backend: Any) -> bool:
    """Whether ``backend`` is timed by the device clock: a CUDA backend whose work CUDA events on
    the current stream bracket. One on streams of its own (``stream_ordered = False``) is timed
    by pytest-benchmark's wall clock around each call and its ``synchronize``, as CPU backends are."""
    return backend.device == "cuda" and stream_ordered(backend)


def point_from_id(point_id: str) -> GridPoint:
    """The :class:`GridPoint` whose id is ``point_id``."""
    (m, n, k), dtype, layout = parse_point(point_id)
    return GridPoint(m, n, k, dtype or "float32", layout or "NN")


class TimerNotSetError(RuntimeError):
    """A CUDA benchmark ran without the device clock as its pytest-benchmark timer."""


def run_benchmark(benchmark: Any, backend: Any, point: GridPoint, seed: int = 0,
                  clock: DeviceClock | None = None, budget: RoundBudget = RoundBudget()) -> dict[str, Any]:
    """Check ``backend`` on ``point`` once, then benchmark its GEMM with pytest-benchmark's
    ``benchmark`` fixture, and fill ``benchmark.extra_info``. Returns the extra info. ``budget``
    sizes the rounds (:meth:`RoundBudget.from_config` gives the run's command line's).

    A wrong result raises :class:`gemmzoo.measure.WrongResultError` before any timing, so the
    test fails instead of reporting a speed. For a CUDA backend the test must carry
    ``pytest.mark.benchmark(timer=clock)`` (:func:`benchmark_params` puts it there; ``clock``
    defaults to :data:`DEVICE_CLOCK`); without it :class:`TimerNotSetError` is raised rather than
    a wall-clock figure reported as device time. A backend with no passing conformance verdict
    for the point's dtype on this machine (the suite runs first when there is none,
    :func:`gemmzoo.tuning.verdicts.passing`) raises :class:`gemmzoo.measure.WrongResultError`
    before anything is timed.
    """
    from gemmzoo.measure import WrongResultError
    from gemmzoo.tuning.verdicts import PASSED, passing

    answer, why_not = passing(backend, point.dtype)
    if answer != PASSED:
        raise WrongResultError(f"{backend.name}: {point.id}: not timed: {why_not}")
    problem = make_problem(backend, point, seed)
    checked = judge_problem(problem)
    a, b = problem.a, problem.b
    run = planned(backend, a, b)  # what gemmzoo.matmul calls for such operands

    def call() -> Any:
        return run(a, b)

    host: Timing | None = None
    extra: dict[str, Any] = {}
    if _events_time(backend):
        clock = clock or DEVICE_CLOCK
        with gc_paused():
            first = max(clock.engine.batch(call, 1)[0], 1e-7)
            calls = max(1, min(MAX_QUEUED_CALLS, int(ROUND_S / first)))
            target = clock.wrap(call, calls)
            try:
                # The warm-up sizes the rounds too, and the rounds follow it in one stream: as
                # long a stretch of GEMMs as the engine's and do_bench's, since a large GEMM's
                # clock under the power cap sinks the longer it runs.
                warmed, start, device = 0, time.perf_counter(), clock()
                while warmed < WARMUP_ROUNDS or (
                        (clock() - device) * calls < WARMUP_S and warmed < MAX_WARMUP_ROUNDS):
                    target()
                    warmed += 1
                wall = (time.perf_counter() - start) / warmed
                rounds = max(budget.min_rounds, min(MAX_ROUNDS, int(budget.max_time / wall)))
                reads = clock.reads
                benchmark.pedantic(target, rounds=rounds, iterations=1, warmup_rounds=0)
            finally:
                clock.finish()
        if benchmark.enabled and clock.reads == reads:
            raise TimerNotSetError(
                f"{backend.name}: {point.id}: the benchmark's timer is not the device clock; mark the test "
                "with pytest.mark.benchmark(timer=gemmzoo.pytest.bench.DEVICE_CLOCK)")
        timing = (f"{clock.engine.method}; each round the median of {calls} GEMMs run back to back, "
                  "the next round's already queued")
        extra["calls_per_round"] = calls
        median = _median(benchmark)
        if median is not None:
            host = host_timing(call, Engine(clock.engine.gpu), median)
    else:

        def target() -> Any:
            result = call()
            backend.synchronize()
            return result

        # the thread policy gemmzoo bench times under (oversubscribed BLAS pools on a few cores
        # are what a benchmark would otherwise time), and whether the cores were shared meanwhile
        with ThreadLimit(None) as limit:
            watch = ContentionWatch(limit.threads)
            watch.start()
            iterations, rounds = _cpu_rounds(target, budget)
            benchmark.pedantic(target, rounds=rounds, iterations=iterations, warmup_rounds=1)
            shared = watch.stop()
            threads = limit.report()
        timing = (f"wall clock around rounds of {iterations} calls (pytest-benchmark's timer), "
                  "per call")
        median = _median(benchmark)
        extra.update(_trust_info(benchmark, threads, shared, budget))
    info = extra_info(backend, point, checked.error_ratio, checked.rel_error, median, timing, host)
    info.update(extra)
    if backend.device == "cuda":  # the GPU that measured it, and its state right after
        from gemmzoo.measure.gpu_state import gpu_state

        info["gpu"] = gpu_state()
    benchmark.extra_info.update(info)
    return info


def _cpu_rounds(target: Callable[[], Any], budget: RoundBudget) -> tuple[int, int]:
    """(iterations per round, rounds) for a benchmark timed by the wall clock: rounds of at least
    :data:`CPU_ROUND_S`, as many as ``--benchmark-max-time`` allows up to :data:`MAX_CPU_ROUNDS`
    (pytest-benchmark keeps every round's time in its JSON file: a fast GEMM calibrated call by
    call would leave hundreds of thousands of them)."""
    start = time.perf_counter()
    calls = 0
    while calls < 3 or (time.perf_counter() - start < CPU_ROUND_S and calls < MAX_CALIBRATION_CALLS):
        target()
        calls += 1
    per_call = max((time.perf_counter() - start) / calls, 1e-9)
    iterations = max(1, int(CPU_ROUND_S / per_call))
    rounds = int(budget.max_time / (per_call * iterations))
    return iterations, max(budget.min_rounds, min(MAX_CPU_ROUNDS, rounds))


def _trust_info(benchmark: Any, threads: Any, shared: Any, budget: RoundBudget) -> dict[str, Any]:
    """What ``gemmzoo bench`` records of a CPU row, for a pytest-benchmark one: the thread policy
    and each pool's count, the median's noise judged by bench's stopping rule (its target, its
    ``converged`` flag) and whether the cores were shared (``contended``)."""
    info: dict[str, Any] = dict(threads.as_dict())
    stats = getattr(benchmark, "stats", None)
    data = list(getattr(getattr(stats, "stats", None), "data", None) or [])
    if data:
        timing = StoppingRule(budget.max_time, NOISE_TARGET).timing(data, "pytest-benchmark rounds")
        info.update(noise=timing.noise if math.isfinite(timing.noise) else None, noise_target=timing.target,
                    converged=timing.converged)
    if shared is not None:
        info.update(shared.as_dict())
    return info


def _median(benchmark: Any) -> float | None:
    stats = getattr(benchmark, "stats", None)  # None when benchmarks are disabled
    return float(stats.stats.median) if stats else None
