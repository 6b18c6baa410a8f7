"""gemmzoo in pytest-benchmark: one benchmark per backend x grid point, timed right on a GPU.

Used by ``benchmarks/conftest.py`` and ``benchmarks/test_gemm.py``; see docs/benchmarks.md.

CPU backends are timed by pytest-benchmark as usual (its calibration, its timer). CUDA backends
are timed with :data:`DEVICE_CLOCK`, a :class:`gemmzoo.measure.DeviceClock` given to
pytest-benchmark as the test's timer: each GEMM is wrapped in a CUDA event pair (the L2 flush
before it, outside the pair) and reading the clock synchronises once per round, so a round's
duration is the device time of its GEMMs. They run in ``benchmark.pedantic`` mode, rounds of
about :data:`ROUND_S` of back-to-back calls, as many rounds as fit ``--benchmark-max-time`` (a
wall-clock budget, flush and sync included), at least ``--benchmark-min-rounds``:
pytest-benchmark's own calibration would spin forever measuring the precision of a clock that
only moves when a GEMM runs, and would count the round budget in device time, which for small
shapes is a tiny part of the wall time.

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
from gemmzoo.device import device_info, peak_tflops
from gemmzoo.grids import GridPoint, parse_point
from gemmzoo.measure import DeviceClock, compare, gc_paused, prepare

DEVICE_CLOCK = DeviceClock()
"""The process's device clock; every CUDA benchmark param names it as its timer."""

MAX_ROUNDS = 100_000
WARMUP_ROUNDS = 5
#: Wall time of one round of a CUDA benchmark. A round runs its GEMMs back to back, each with its
#: flush, and synchronises once at the end, so the GPU works without gaps as in do_bench.
ROUND_S = 0.02
_WORKEROUTPUT_KEY = "gemmzoo_benchmarks"


def benchmark_params(backends: Sequence[Any], points: Sequence[GridPoint]) -> list[Any]:
    """``pytest.param(backend_name, point_id)`` for each backend x point the backend computes.

    Each is marked with its benchmark group (the point's id, so a table compares backends on one
    problem) and, for CUDA backends, the device clock as timer. An unavailable backend is one
    skipped param that says why.
    """
    params, usable = [], []
    for backend in backends:
        reason = backend.unavailable_reason()
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


def _wall_per_call(target: Any, clock: DeviceClock, calls: int = 3) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        clock()
        target()
        clock()
    return (time.perf_counter() - start) / calls


def cuda_rounds(wall_per_call_s: float, max_time_s: float, min_rounds: int) -> tuple[int, int]:
    """(rounds, iterations per round): rounds of about ROUND_S of calls each, as many as fit
    ``max_time_s`` of wall time, at least ``min_rounds``, at most MAX_ROUNDS."""
    wall = max(wall_per_call_s, 1e-9)
    iterations = max(1, int(ROUND_S / wall))
    fitting = int(max_time_s / (wall * iterations))
    return max(min_rounds, min(MAX_ROUNDS, fitting)), iterations


def run_benchmark(benchmark: Any, backend: Any, point: GridPoint, seed: int = 0,
                  clock: DeviceClock | None = None) -> dict[str, Any]:
    """Check ``backend`` on ``point`` once, then benchmark its GEMM with pytest-benchmark's
    ``benchmark`` fixture, and fill ``benchmark.extra_info``. Returns the extra info.

    A wrong result raises :class:`gemmzoo.measure.WrongResultError` before any timing, so the
    test fails instead of reporting a speed. ``clock`` replaces :data:`DEVICE_CLOCK` (tests).
    """
    problem = prepare(backend, point, seed)
    checked = compare(problem)

    def call() -> Any:
        return backend.matmul(problem.a, problem.b)

    if backend.device == "cuda":
        clock = clock or DEVICE_CLOCK
        # The param's mark sets this already; a direct caller (or another plugin) may not have.
        benchmark._timer = clock
        target = clock.wrap(call)
        with gc_paused():
            for _ in range(WARMUP_ROUNDS):
                target()
            clock()
            rounds, iterations = cuda_rounds(_wall_per_call(target, clock),
                                             float(getattr(benchmark, "_max_time", 1.0)),
                                             int(getattr(benchmark, "_min_rounds", 5)))
            benchmark.pedantic(target, rounds=rounds, iterations=iterations, warmup_rounds=WARMUP_ROUNDS)
        timing = ("device time from CUDA events around each GEMM; L2 flushed outside them; "
                  f"{iterations} GEMMs per round, one sync per round")
    else:

        def target() -> Any:
            result = call()
            backend.synchronize()
            return result

        benchmark(target)
        timing = "wall clock around each call (pytest-benchmark's timer)"
    info = extra_info(backend, point, checked.error_ratio, checked.rel_error, _median(benchmark), timing)
    benchmark.extra_info.update(info)
    return info


def _median(benchmark: Any) -> float | None:
    stats = getattr(benchmark, "stats", None)  # None when benchmarks are disabled
    return float(stats.stats.median) if stats else None


def extra_info(backend: Any, point: GridPoint, error_ratio: float, rel_error: float,
               median_s: float | None, timing: str) -> dict[str, Any]:
    """The ``extra_info`` of one benchmark: problem, speed, share of peak, error, device, versions.

    ``peak_percent`` and ``peak_tflops`` are ``None`` on devices without a peak table (see
    :mod:`gemmzoo.device`).
    """
    info = device_info(backend.device)
    tflops = point.flops / median_s / 1e12 if median_s else None
    peak = peak_tflops(info["device_name"], point.dtype)
    return {
        "backend": backend.name,
        "m": point.m, "n": point.n, "k": point.k, "dtype": point.dtype, "layout": point.layout,
        "accuracy": str(accuracy_of(backend)),
        "flops": point.flops,
        "tflops": tflops,
        "gflops": tflops * 1e3 if tflops is not None else None,
        "peak_tflops": peak,
        "peak_percent": 100 * tflops / peak if tflops is not None and peak else None,
        "error_ratio": error_ratio,
        "rel_error": rel_error,
        "timing": timing,
        "device": backend.device,
        "device_name": info["device_name"],
        "driver": info["driver"],
        "cuda_driver": info["cuda_driver"],
        "libraries": info["libraries"],
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

