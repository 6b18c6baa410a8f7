"""gemmzoo in pytest-benchmark: one benchmark per backend x grid point, timed right on a GPU.

Used by gemmzoo's pytest plugin and :mod:`gemmzoo.benchmarks`; see docs/benchmarks.md. Only
pytest-benchmark's public API is used: the ``benchmark`` mark (``timer=``, ``group=``),
``benchmark.pedantic``, ``benchmark.stats`` and ``benchmark.extra_info``.

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

Under pytest-xdist each worker benchmarks on its own GPU and sends its results to the controller,
which hands them to pytest-benchmark there, so ``--benchmark-json``, ``--benchmark-save``,
``--benchmark-compare`` and ``--benchmark-histogram`` see every result.
"""

from __future__ import annotations

import glob
import json
import os
import time
import warnings
from collections.abc import MutableMapping, Sequence
from types import SimpleNamespace
from typing import Any

import pytest

from gemmzoo.accuracy import accuracy_of
from gemmzoo.device import device_info
from gemmzoo.grids import GridPoint, parse_point
from gemmzoo.measure import (
    MAX_QUEUED_CALLS,
    WARMUP_S,
    DeviceClock,
    Engine,
    Measurement,
    Timing,
    compare,
    gc_paused,
    host_timing,
    planned,
    prepare,
)
from gemmzoo.roofline import roofline

DEVICE_CLOCK = DeviceClock()
"""The process's device clock; every CUDA benchmark param names it as its timer."""

MAX_ROUNDS = 100_000
#: Rounds before the timed ones: at least this many, and at least ``WARMUP_S`` of GEMMs.
WARMUP_ROUNDS = 2
#: ... and at most this many (a GEMM whose device time reads 0 would never warm up otherwise).
MAX_WARMUP_ROUNDS = 1000
#: Device time of the GEMMs of one round (one batch) of a CUDA benchmark.
ROUND_S = 0.01
_WORKEROUTPUT_KEY = "gemmzoo_benchmarks"

#: ``--benchmark-max-time`` and ``--benchmark-min-rounds`` of this run (pytest-benchmark's
#: defaults until :func:`configure` reads the command line).
SETTINGS: dict[str, float] = {"max_time": 1.0, "min_rounds": 5}


def configure(config: pytest.Config) -> None:
    """Read the round budget from pytest-benchmark's command-line options."""
    for key in SETTINGS:
        with_option = config.getoption(f"benchmark_{key}", None)
        if with_option is not None:
            SETTINGS[key] = float(with_option)


def benchmark_params(backends: Sequence[Any], points: Sequence[GridPoint]) -> list[Any]:
    """``pytest.param(backend_name, point_id)`` for each backend x point the backend computes.

    Each is marked with its benchmark group (the point's id, so a table compares backends on one
    problem) and, for CUDA backends, the device clock as timer. An unavailable backend is one
    skipped param that says why.
    """
    from gemmzoo.registry import unavailable_reason

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
            if backend.device == "cuda":
                options["timer"] = DEVICE_CLOCK
            params.append(pytest.param(backend.name, point.id, id=f"{point.id}-{backend.name}",
                                       marks=pytest.mark.benchmark(**options)))
    return params


def point_from_id(point_id: str) -> GridPoint:
    """The :class:`GridPoint` whose id is ``point_id``."""
    (m, n, k), dtype, layout = parse_point(point_id)
    return GridPoint(m, n, k, dtype or "float32", layout or "NN")


class TimerNotSetError(RuntimeError):
    """A CUDA benchmark ran without the device clock as its pytest-benchmark timer."""


def run_benchmark(benchmark: Any, backend: Any, point: GridPoint, seed: int = 0,
                  clock: DeviceClock | None = None) -> dict[str, Any]:
    """Check ``backend`` on ``point`` once, then benchmark its GEMM with pytest-benchmark's
    ``benchmark`` fixture, and fill ``benchmark.extra_info``. Returns the extra info.

    A wrong result raises :class:`gemmzoo.measure.WrongResultError` before any timing, so the
    test fails instead of reporting a speed. For a CUDA backend the test must carry
    ``pytest.mark.benchmark(timer=clock)`` (:func:`benchmark_params` puts it there; ``clock``
    defaults to :data:`DEVICE_CLOCK`); without it :class:`TimerNotSetError` is raised rather than
    a wall-clock figure reported as device time.
    """
    problem = prepare(backend, point, seed)
    checked = compare(problem)
    a, b = problem.a, problem.b
    run = planned(backend, a, b)  # what gemmzoo.matmul calls for such operands

    def call() -> Any:
        return run(a, b)

    host: Timing | None = None
    extra: dict[str, Any] = {}
    if backend.device == "cuda":
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
                rounds = max(int(SETTINGS["min_rounds"]), min(MAX_ROUNDS, int(SETTINGS["max_time"] / wall)))
                reads = clock.reads
                benchmark.pedantic(target, rounds=rounds, iterations=1, warmup_rounds=0)
            finally:
                clock.finish()
        if benchmark.enabled and clock.reads == reads:
            raise TimerNotSetError(
                f"{backend.name}: {point.id}: the benchmark's timer is not the device clock; mark the test "
                "with pytest.mark.benchmark(timer=gemmzoo.pytest_bench.DEVICE_CLOCK)")
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

        benchmark(target)
        timing = "wall clock around each call (pytest-benchmark's timer)"
        median = _median(benchmark)
    info = extra_info(backend, point, checked.error_ratio, checked.rel_error, median, timing, host)
    info.update(extra)
    if backend.device == "cuda":  # the GPU that measured it, and its state right after
        from gemmzoo.gpu_state import gpu_state

        info["gpu"] = gpu_state()
    benchmark.extra_info.update(info)
    return info


def _median(benchmark: Any) -> float | None:
    stats = getattr(benchmark, "stats", None)  # None when benchmarks are disabled
    return float(stats.stats.median) if stats else None


def extra_info(backend: Any, point: GridPoint, error_ratio: float, rel_error: float,
               median_s: float | None, timing: str, host: Timing | None = None) -> dict[str, Any]:
    """The ``extra_info`` of one benchmark: problem, device, host and caller time, speed, share
    of the roofline, error, device, versions.

    ``host`` is the host time per call (``None``: the same as the median, as on the CPU).
    ``peak_percent``, ``peak_tflops`` and the roofline fields are ``None`` on devices gemmzoo has
    no figures for (see :mod:`gemmzoo.device` and :mod:`gemmzoo.roofline`).
    """
    info = device_info(backend.device)
    record: dict[str, Any] = {
        "backend": backend.name,
        "m": point.m, "n": point.n, "k": point.k, "dtype": point.dtype, "layout": point.layout,
        "accuracy": str(accuracy_of(backend)),
        "flops": point.flops,
    }
    if median_s:
        device = Timing.of([median_s], timing)
        measured = Measurement(backend.name, point, device, error_ratio, rel_error, host or device)
        record.update(speed_fields(measured, backend.device, info["device_name"]))
    record.update({
        "error_ratio": error_ratio,
        "rel_error": rel_error,
        "timing": timing,
        "device": backend.device,
        "device_name": info["device_name"],
        "driver": info["driver"],
        "cuda_driver": info["cuda_driver"],
        "libraries": info["libraries"],
    })
    return record


def speed_fields(measured: Measurement, device: str, device_name: str) -> dict[str, Any]:
    """Times, rates and roofline figures of one measurement, as flat fields."""
    roof = roofline(measured.point, measured.timing.median_s, device, device_name)
    tflops = measured.tflops
    return {
        "device_s": measured.timing.median_s,
        "host_s": measured.host_s,
        "caller_s": measured.caller_s,
        "launch_bound": measured.launch_bound,
        "tflops": tflops,
        "gflops": tflops * 1e3,
        "caller_tflops": measured.caller_tflops,
        "gbps": roof.gbps,
        "peak_tflops": roof.peak_tflops,
        "peak_percent": 100 * tflops / roof.peak_tflops if roof.peak_tflops else None,
        "bandwidth_gbps": roof.bandwidth_gbps,
        "roofline_bound": roof.bound,
        "roofline_percent": roof.percent,
    }


# pytest-xdist ---------------------------------------------------------------------------------


def xdist_worker_index(environ: MutableMapping[str, str] | None = None) -> int | None:
    """This process's pytest-xdist worker number (``gw3`` → 3), or ``None`` outside a worker."""
    worker = (os.environ if environ is None else environ).get("PYTEST_XDIST_WORKER", "")
    return int(worker[2:]) if worker.startswith("gw") and worker[2:].isdigit() else None


def assign_worker_gpu(environ: MutableMapping[str, str] | None = None,
                      device_files: Sequence[str] | None = None) -> str | None:
    """Give this xdist worker its own GPU through ``CUDA_VISIBLE_DEVICES`` (before CUDA starts).

    Worker ``gwI`` gets the I-th visible GPU (of ``CUDA_VISIBLE_DEVICES`` if set, else of the
    driver's device files); with more workers than GPUs they wrap around and share, with a
    warning. Returns the value set, or ``None`` outside a worker or without a GPU.
    """
    environ = os.environ if environ is None else environ
    index = xdist_worker_index(environ)
    if index is None:
        return None
    visible = environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        devices = [d.strip() for d in visible.split(",") if d.strip() and d.strip() != "-1"]
    else:
        files = glob.glob("/dev/nvidia[0-9]*") if device_files is None else device_files
        devices = [str(i) for i in range(len(files))]
    if not devices:
        return None
    if index >= len(devices):
        warnings.warn(f"xdist worker gw{index}: only {len(devices)} GPU(s); sharing GPU "
                      f"{devices[index % len(devices)]}, so timings of the workers that share it disturb "
                      f"each other", stacklevel=2)
    chosen = devices[index % len(devices)]
    environ["CUDA_VISIBLE_DEVICES"] = chosen
    return chosen


def xdist_requested(config: pytest.Config) -> bool:
    """Whether this run uses pytest-xdist workers (controller or worker)."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        return True
    numprocesses = getattr(config.option, "numprocesses", None)
    return bool(numprocesses) or getattr(config.option, "dist", "no") != "no"


def enable_in_worker(config: pytest.Config) -> None:
    """pytest-benchmark turns itself off under xdist; turn it on again in a worker, with its
    own outputs off (the controller writes them from everything the workers send)."""
    session = getattr(config, "_benchmarksession", None)
    if session is None or not os.environ.get("PYTEST_XDIST_WORKER"):
        return
    if config.getoption("benchmark_disable") or config.getoption("benchmark_skip"):
        return
    session.disabled = False
    session.json = None
    session.save = session.autosave = None
    session.histogram = None
    session.compare = session.compare_fail = None
    session.compared_mapping = {}


def export_from_worker(config: pytest.Config) -> None:
    """Put this worker's finished benchmarks (with their samples) in its workeroutput."""
    session = getattr(config, "_benchmarksession", None)
    output = getattr(config, "workeroutput", None)
    if session is None or output is None:
        return
    done = [bench.as_dict(include_data=True) for bench in session.benchmarks if bench and not bench.has_error]
    output[_WORKEROUTPUT_KEY] = json.dumps(done, default=str)


def import_from_worker(config: pytest.Config, workeroutput: dict[str, Any]) -> int:
    """Add a finished worker's benchmarks to the controller's pytest-benchmark session, as if they
    had run here. Returns how many were added."""
    from pytest_benchmark.stats import Metadata

    session = getattr(config, "_benchmarksession", None)
    text = workeroutput.get(_WORKEROUTPUT_KEY)
    if session is None or not text:
        return 0
    added = 0
    for bench in json.loads(text):
        fixture = SimpleNamespace(
            name=bench["name"], fullname=bench["fullname"], group=bench["group"], param=bench["param"],
            params=bench["params"], extra_info=bench["extra_info"], cprofile_stats=None, has_error=False,
        )
        metadata = Metadata(fixture, iterations=bench["stats"]["iterations"], options=bench["options"])
        metadata.stats.data = [float(x) for x in bench["stats"]["data"]]
        session.benchmarks.append(metadata)
        added += 1
    return added

