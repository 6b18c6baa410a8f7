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
- :mod:`~gemmzoo.measure.contention`: whether a CPU timing shared its cores;
- :mod:`~gemmzoo.measure.calibration`: the machine's speed, timed between a CPU timing's samples;
- :mod:`~gemmzoo.measure.clocks`: the SM clock during a measurement, and throttling;
- :mod:`~gemmzoo.measure.measurement`: :class:`Measurement` and :func:`measure`.

See docs/benchmarks.md.
"""

from __future__ import annotations

import importlib
from typing import Any

# Names are loaded from their module on first use, so that importing one small module of the
# package (``gemmzoo.measure.ties`` from the dispatch path) does not import the whole engine.
_HOMES = {
    "adaptors": ("do_bench_timing", "graph_call", "nvbench_timing"),
    "clocks": ("THROTTLE_THRESHOLD", "ClockReport", "ClockWatch"),
    "engine": ("MAX_QUEUED_CALLS", "DeviceClock", "Engine", "gc_paused"),
    "measurement": ("Measurement", "measure"),
    "problems": ("Problem", "e4m3_operands", "host_operands", "make_problem", "planned"),
    "reference": ("ResultDeviation", "WrongResultError", "check", "judge_problem"),
    "stats": ("NOISE_TARGET", "StoppingRule", "Timing"),
    "threads": ("ThreadLimit", "ThreadReport"),
    "ties": ("Estimate", "rank", "tied"),
    "timers": ("TIMERS", "WARMUP_S", "TimedCalls", "host_timing", "interleaved_caller_timings",
               "loop_per_call_s", "run_timing", "stream_ordered", "time_calls", "time_problem"),
}
_WHERE = {name: module for module, names in _HOMES.items() for name in names}

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    """``gemmzoo.measure.X`` for the names above, from the module that holds X."""
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'gemmzoo.measure' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"gemmzoo.measure.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
