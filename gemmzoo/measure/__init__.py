"""The measurement engine, shared by ``gemmzoo bench``, the pytest-benchmark fixtures,
``gemmzoo tune`` and ``best_backend``. One job per module:

- :mod:`~gemmzoo.measure.problems`: random normal operands for a grid point (:func:`make_problem`);
- :mod:`~gemmzoo.measure.reference`: the float64 reference and the judge run before timing
  (:func:`judge_problem`, :class:`ResultDeviation`, :class:`WrongResultError`);
- :mod:`~gemmzoo.measure.engine`: CUDA events behind a stream hold (:class:`Engine`,
  :class:`DeviceClock` for pytest-benchmark);
- :mod:`~gemmzoo.measure.timers`: device, host and caller time (:func:`run_timing`);
- :mod:`~gemmzoo.measure.adaptors`: CUDA-graph replay, ``do_bench`` and nvbench as timers;
- :mod:`~gemmzoo.measure.stats`: :class:`Timing`, the median's noise and the stopping rule;
- :mod:`~gemmzoo.measure.ties`: the tie rule every ranking uses;
- :mod:`~gemmzoo.measure.threads`: the BLAS/OpenMP thread policy while timing;
- :mod:`~gemmzoo.measure.clocks`: the SM clock during a measurement, and throttling;
- :mod:`~gemmzoo.measure.measurement`: :class:`Measurement` and :func:`measure`.

See docs/benchmarks.md.
"""

from gemmzoo.measure.adaptors import do_bench_timing, graph_call, nvbench_timing
from gemmzoo.measure.clocks import THROTTLE_THRESHOLD, ClockReport, ClockWatch
from gemmzoo.measure.engine import MAX_QUEUED_CALLS, DeviceClock, Engine, gc_paused
from gemmzoo.measure.measurement import Measurement, measure
from gemmzoo.measure.problems import Problem, host_operands, make_problem, planned
from gemmzoo.measure.reference import ResultDeviation, WrongResultError, check, judge_problem
from gemmzoo.measure.stats import NOISE_TARGET, StoppingRule, Timing
from gemmzoo.measure.threads import ThreadLimit, ThreadReport
from gemmzoo.measure.ties import Estimate, rank, tied
from gemmzoo.measure.timers import (
    TIMERS,
    WARMUP_S,
    TimedCalls,
    host_timing,
    interleaved_caller_timings,
    loop_per_call_s,
    run_timing,
    time_calls,
    time_problem,
)

prepare = make_problem
"""The former name of :func:`make_problem`, kept for importers (it read like ``Backend.prepare``)."""
compare = judge_problem
"""The former name of :func:`judge_problem`, kept for importers (it read like ``gemmzoo.compare``)."""

__all__ = [
    "MAX_QUEUED_CALLS", "NOISE_TARGET", "THROTTLE_THRESHOLD", "TIMERS", "WARMUP_S", "ClockReport",
    "ClockWatch", "DeviceClock", "Engine", "Estimate", "Measurement", "Problem", "ResultDeviation",
    "StoppingRule", "ThreadLimit", "ThreadReport", "TimedCalls", "Timing", "WrongResultError", "check",
    "compare", "do_bench_timing", "gc_paused", "graph_call", "host_operands", "host_timing",
    "interleaved_caller_timings", "judge_problem", "loop_per_call_s", "make_problem", "measure",
    "nvbench_timing", "planned", "prepare", "rank", "run_timing", "tied", "time_calls", "time_problem",
]
