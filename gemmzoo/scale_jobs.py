"""What ``gemmzoo bench`` and ``gemmzoo tune`` do per grid point, in this process or in one worker
process per GPU (``--devices``; see :func:`gemmzoo.scale.run_on_devices`).

Every result of a CUDA backend is recorded with the GPU that measured it and that GPU's clocks and
power state right after the measurement (:func:`gemmzoo.gpu_state.gpu_state`).
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable, Sequence
from typing import Any

from gemmzoo.bench import ERROR, BenchResult, bench_one
from gemmzoo.grids import GridPoint
from gemmzoo.measure.stats import NOISE_TARGET
from gemmzoo.scale import DevicePool, parse_devices, visible_gpus

Extra = dict[str, Any]


@functools.lru_cache(maxsize=8)
def _backends(names: tuple[str, ...] | None) -> list[Any]:
    from gemmzoo.session import current

    return current().registry.select(list(names) if names else None)


def gpu_extra(result: BenchResult) -> Extra:
    """``{"gpu": ...}`` for a CUDA backend's result (the GPU now: call it right after measuring),
    ``{}`` otherwise."""
    if result.device != "cuda":
        return {}
    from gemmzoo.gpu_state import gpu_state

    return {"gpu": gpu_state()}


@functools.lru_cache(maxsize=64)
def _available(backend: Any) -> bool:
    from gemmzoo.registry import unavailable_reason

    return unavailable_reason(backend) is None


def warm_backends(names: tuple[str, ...] | None) -> None:
    """A worker's warm-up: ask the backends whether they are available, which imports their
    frameworks and starts CUDA, and make the engine's first-use pieces (the stream hold, the
    flush buffer) when a CUDA backend is available, before the first point is taken."""
    cuda = False
    for backend in _backends(names):
        cuda = (_available(backend) and backend.device == "cuda") or cuda
    if cuda:
        from gemmzoo.gpu_stream import default_gpu

        gpu = default_gpu()
        hold = gpu.hold()
        if hold is not None:
            hold.release()
        gpu.synchronize()


def start_pool(devices: str | None, names: Sequence[str] | None = None) -> DevicePool | None:
    """For ``--devices``: the worker pool, started now so that the workers warm up (the backends
    ``names``, or all) while the parent is still choosing backends and points. ``None`` without
    ``devices``; raises :class:`gemmzoo.scale.DevicesError` for a bad list."""
    if not devices:
        return None
    chosen = parse_devices(devices, visible_gpus())
    return DevicePool(chosen, functools.partial(warm_backends, tuple(names) if names else None))


def start_bench(devices: str | None, names: Sequence[str] | None, points: Sequence[GridPoint],
                budget_s: float, timer: str = "events", threads: int | None = None,
                noise_target: float = NOISE_TARGET) -> DevicePool | None:
    """For ``gemmzoo bench --devices``: the pool (:func:`start_pool`) with the sweep already
    queued, so each worker starts measuring as soon as it is warm while the parent is still
    checking its backends. A worker leaves out the backends unavailable to it;
    :func:`bench_on_devices` collects the results of the backends the parent keeps."""
    pool = start_pool(devices, names)
    if pool is not None:
        key = tuple(names) if names else None
        job = functools.partial(bench_point, key, budget_s, timer, threads=threads, noise_target=noise_target)
        pool.submit(job, points)
    return pool


def bench_point(names: tuple[str, ...] | None, budget_s: float, timer: str, point: GridPoint,
                threads: int | None = None, noise_target: float = NOISE_TARGET,
                ) -> list[tuple[BenchResult, Extra]]:
    """Every named available backend on ``point`` with ``timer`` under the thread policy
    (``threads``): results with their GPU records (a worker's job)."""
    out = []
    for backend in _backends(names):
        if not _available(backend):
            continue
        result = bench_one(backend, point, budget_s, timer=timer, threads=threads, noise_target=noise_target)
        out.append((result, gpu_extra(result)))
    return out


def _cpu_note(backends: Sequence[Any], devices: Sequence[str]) -> None:
    cpu = [b.name for b in backends if b.device == "cpu"]
    if cpu and len(devices) > 1:
        warnings.warn(f"--devices: {', '.join(cpu)} run on the CPU, whose cores the {len(devices)} workers "
                      "share: their timings disturb each other", stacklevel=3)


def bench_on_devices(backends: Sequence[Any], points: Sequence[GridPoint], budget_s: float, devices: str,
                     on_result: Callable[[BenchResult], None] | None = None, pool: DevicePool | None = None,
                     timer: str = "events", threads: int | None = None, noise_target: float = NOISE_TARGET,
                     ) -> tuple[list[BenchResult], list[Extra], list[dict[str, Any]]]:
    """``gemmzoo bench --devices``: one worker per GPU (``all`` or ``0,1,...``), on ``pool`` if
    one was started (:func:`start_pool`, or :func:`start_bench` with the sweep already queued:
    then its points are the ones measured). Returns the results of ``backends`` in grid order
    (point by point, backends in the given order), each one's extra record (``gpu``), and the
    workers' reports. ``on_result`` hears each result as its point finishes."""
    pool = pool or start_pool(devices, [b.name for b in backends])
    assert pool is not None
    _cpu_note(backends, pool.devices)
    names = tuple(b.name for b in backends)
    if pool.submitted is None:
        pool.submit(functools.partial(bench_point, names, budget_s, timer, threads=threads,
                                      noise_target=noise_target), points)
    else:
        points = pool.submitted[1]

    def done(point: GridPoint, device: str, outcome: tuple[str, Any]) -> None:
        for result in _unpack(point, names, outcome, backends):
            if on_result is not None:
                on_result(result[0])

    outcomes, reports = pool.run(on_done=done)
    results, extras = [], []
    for point, outcome in zip(points, outcomes, strict=True):
        for result, extra in _unpack(point, names, outcome, backends):
            results.append(result)
            extras.append(extra)
    return results, extras, [r.as_dict() for r in reports]


def _unpack(point: GridPoint, names: tuple[str, ...], outcome: tuple[str, Any],
            backends: Sequence[Any]) -> list[tuple[BenchResult, Extra]]:
    kind, value = outcome
    if kind == "ok":
        by_name = {result.backend: (result, extra) for result, extra in value}
        lost = "unavailable in the worker process (available in the parent)"
        return [by_name.get(b.name) or (BenchResult(b.name, b.device, point, ERROR, detail=lost), {})
                for b in backends if b.name in by_name or point.dtype in b.dtypes]
    return [(BenchResult(b.name, b.device, point, ERROR, detail=str(value)), {})
            for b in backends if point.dtype in b.dtypes]


def tune_point(names: tuple[str, ...], budget_s: float, verify: bool, point: GridPoint,
               ) -> tuple[list[Any], list[tuple[str, str]]]:
    """``gemmzoo tune`` on one point (a worker's job): the stored records, and the (backend,
    device) pairs skipped (unavailable or not conforming)."""
    from gemmzoo.tuning.tune import tune

    skipped: list[tuple[str, str]] = []

    def step(kind: str, backend: Any, _point: GridPoint, _record: Any) -> None:
        if kind == "skipped":
            skipped.append((backend.name, backend.device))

    return tune([point], list(names), budget_s=budget_s, verify=verify, on_step=step), skipped


def tune_on_devices(names: Sequence[str], points: Sequence[GridPoint], budget_s: float, verify: bool,
                    devices: str, on_point: Callable[[GridPoint], None] | None = None,
                    ) -> tuple[list[Any], dict[tuple[GridPoint, str], list[str]], list[str]]:
    """``gemmzoo tune --devices``: one worker per GPU, each storing into the shared database.
    Returns the records, the skipped backends by (point, device), and errors by point."""
    pool = start_pool(devices, names)
    assert pool is not None
    job = functools.partial(tune_point, tuple(names), budget_s, verify)
    outcomes, _reports = pool.run(job, points, lambda point, _device, _outcome: on_point and on_point(point))
    records: list[Any] = []
    skipped: dict[tuple[GridPoint, str], list[str]] = {}
    failures = []
    for point, (kind, value) in zip(points, outcomes, strict=True):
        if kind != "ok":
            failures.append(f"{point.id}: {value}")
            continue
        made, passed_over = value
        records += made
        for name, device in passed_over:
            skipped.setdefault((point, device), []).append(name)
    return records, skipped, failures
