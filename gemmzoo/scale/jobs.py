"""What ``gemmzoo bench`` and ``gemmzoo tune`` do per grid point, in this process or in one worker
process per GPU (``--devices``; see :func:`gemmzoo.scale.shards.run_on_devices`).

Every result of a CUDA backend is recorded with the GPU that measured it and that GPU's clocks and
power state right after the measurement (:func:`gemmzoo.measure.gpu_state.gpu_state`).
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from gemmzoo.measure.stats import NOISE_TARGET
from gemmzoo.problems.grids import GridPoint
from gemmzoo.scale.bench import ERROR, BenchResult, bench_one
from gemmzoo.scale.shards import DevicePool, parse_devices, visible_gpus

if TYPE_CHECKING:
    from gemmzoo.scale.executors import Executor, ExecutorSettings

Extra = dict[str, Any]


def _backends(names: tuple[str, ...] | None) -> list[Any]:
    from gemmzoo.session import current

    return current().select(list(names) if names else None)


def gpu_extra(result: BenchResult) -> Extra:
    """``{"gpu": ...}`` for a CUDA backend's result (the GPU now: call it right after measuring),
    ``{}`` otherwise."""
    if result.device != "cuda":
        return {}
    from gemmzoo.measure.gpu_state import gpu_state

    return {"gpu": gpu_state()}


def _available(backend: Any) -> bool:
    from gemmzoo.plugins.registry import unavailable_reason

    return unavailable_reason(backend) is None  # remembered by the registry for the process


def warm_backends(names: tuple[str, ...] | None) -> None:
    """A worker's warm-up: ask the backends whether they are available, which imports their
    frameworks and starts CUDA, and make the engine's first-use pieces (the stream hold, the
    flush buffer) when a CUDA backend is available, before the first point is taken."""
    cuda = False
    for backend in _backends(names):
        cuda = (_available(backend) and backend.device == "cuda") or cuda
    if cuda:
        from gemmzoo.measure.gpu_stream import default_gpu

        gpu = default_gpu()
        hold = gpu.hold()
        if hold is not None:
            hold.release()
        gpu.synchronize()


def start_pool(devices: str | None, names: Sequence[str] | None = None) -> DevicePool | None:
    """For ``--devices``: the worker pool, started now so that the workers warm up (the backends
    ``names``, or all) while the parent is still choosing backends and points. ``None`` without
    ``devices``; raises :class:`gemmzoo.scale.shards.DevicesError` for a bad list."""
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

    from gemmzoo.scale.executors import ExecutorSettings, LocalExecutor

    job = pool.submitted[0]
    local = LocalExecutor(ExecutorSettings("local", devices=pool.devices), pool=pool)
    outcomes, reports = local.run(job, points, done)
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
    from gemmzoo.scale.executors import ExecutorSettings, LocalExecutor

    pool = start_pool(devices, names)
    assert pool is not None
    job = functools.partial(tune_point, tuple(names), budget_s, verify)
    local = LocalExecutor(ExecutorSettings("local", devices=pool.devices), pool=pool)
    outcomes, _reports = local.run(job, points, lambda point, _device, _outcome: on_point and on_point(point))
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


# Engine executors (--executor slurm|ray): the jobs return JSON-ready values, which come back
# through a results folder or an engine's object store and are checked before they are used.


def _verdict_here(backend: Any, dtype: str) -> bool | None:
    """The backend's conformance verdict for ``dtype`` on this worker's device, earned here (the
    suite runs once per backend, dtype and device; ``None`` when it could not be asked). Kept in
    the current session's ``facts``: a verdict that could not be asked (its database busy, say)
    is not asked again, with its suite, at every point."""
    from gemmzoo.session import current
    from gemmzoo.tuning.tune import conformance_verdict

    session = current()
    key = ("verdict here", backend, dtype)
    if key not in session.facts:
        try:
            session.facts[key] = conformance_verdict(session.store(), backend, dtype, run=True)
        except Exception:  # the timing's own check against the reference still judges every result
            session.facts[key] = None
    return session.facts[key]


def _fingerprint(device: str) -> Any:
    import json

    from gemmzoo.tuning.fingerprint import device_fingerprint

    try:
        return json.loads(device_fingerprint(device))
    except Exception:  # no such device in this worker
        return None


def setup_worker(names: tuple[str, ...] | None, points: Sequence[GridPoint], tuning: bool = False,
                 ) -> dict[str, Any]:
    """An engine worker's setup, once before its first point: the backends warmed up
    (:func:`warm_backends`: frameworks imported, CUDA started) and, for each one available here and
    each dtype of ``points`` it computes, its conformance verdict earned on this worker's device
    (the suite run now, or the verdict this device's tuning database holds), so that no point pays
    for either. ``tuning``: the verdicts of the backends as ``gemmzoo tune`` measures them. Returns
    seconds per step: ``warm_s``, and ``suites`` by ``backend:dtype`` (``seconds``, ``verdict``)."""
    import time

    began = time.perf_counter()
    warm_backends(names)
    found: dict[str, Any] = {"warm_s": round(time.perf_counter() - began, 3)}
    dtypes = list(dict.fromkeys(point.dtype for point in points))
    suites: dict[str, Any] = {}
    for backend in _backends(names):
        if tuning:
            backend = getattr(backend, "for_tuning", lambda b=backend: b)()
        if not _available(backend):
            continue
        for dtype in dtypes:
            if dtype not in backend.dtypes:
                continue
            began = time.perf_counter()
            passed = _verdict_here(backend, dtype)
            suites[f"{backend.name}:{dtype}"] = {"seconds": round(time.perf_counter() - began, 3),
                                                 "verdict": _VERDICT_WORDS[passed]}
    found["suites"] = suites
    return found


_VERDICT_WORDS = {True: "passed", False: "failed", None: "unknown"}


def bench_records(names: tuple[str, ...] | None, budget_s: float, timer: str, point: GridPoint,
                  threads: int | None = None, noise_target: float = NOISE_TARGET) -> list[dict[str, Any]]:
    """An engine worker's job for ``gemmzoo bench``: every named backend available here that
    computes the point's dtype, checked by the conformance suite on this worker's device first (a
    backend that fails it is not timed: ``wrong``), then timed; JSON-ready result records with the
    GPU's state, the worker's device fingerprint and the verdict."""
    from gemmzoo.results.schema import finite
    from gemmzoo.scale.bench import WRONG

    out = []
    for backend in _backends(names):
        if not _available(backend) or point.dtype not in backend.dtypes:
            continue
        passed = _verdict_here(backend, point.dtype)
        if passed is False:
            why = (f"{backend.name} failed the conformance suite for {point.dtype} on this worker's device "
                   f"(gemmzoo check {backend.name} there): not timed")
            result = BenchResult(backend.name, backend.device, point, WRONG, detail=why)
        else:
            result = bench_one(backend, point, budget_s, timer=timer, threads=threads,
                               noise_target=noise_target)
        record = {**result.as_dict(), **gpu_extra(result),
                  "worker_device": _fingerprint(backend.device),
                  "conformance": _VERDICT_WORDS[passed]}
        out.append(finite(record))
    return out


def bench_pairs(value: Any) -> list[tuple[BenchResult, Extra]]:
    """A worker's :func:`bench_records` as results and their extra fields, each record checked
    like a result file's (:func:`gemmzoo.results.schema.check_result`); raises ``ValueError``."""
    from gemmzoo.results.runs import _KNOWN, result_from_dict
    from gemmzoo.results.schema import FieldError, check_result

    if not isinstance(value, list):
        raise ValueError("a worker sent something other than a list of results")
    pairs = []
    for record in value:
        try:
            check_result(record)
        except FieldError as error:
            raise ValueError(f"a worker's result {' '.join(error.where)}: {error.message}") from None
        extra = {key: item for key, item in record.items() if key not in _KNOWN and key != "verdict"}
        pairs.append((result_from_dict(record), extra))
    return pairs


def make_executor(settings: ExecutorSettings) -> Executor:
    """The executor ``settings.name`` names (its engine imported now: a clear error if missing):
    :class:`gemmzoo.scale.executors.LocalExecutor`, or the engine executors built on that
    module's interface."""
    from gemmzoo.scale.executors import EXECUTORS, ExecutorError, LocalExecutor

    if settings.name == "local":
        return LocalExecutor(settings)
    if settings.name == "slurm":
        from gemmzoo.scale.slurm_executor import SlurmExecutor

        return SlurmExecutor(settings)
    if settings.name == "ray":
        from gemmzoo.scale.ray_executor import RayExecutor

        return RayExecutor(settings)
    raise ExecutorError(f"--executor {settings.name!r}: expected one of {', '.join(EXECUTORS)}")


def bench_with_executor(settings: Any, backends: Sequence[Any], points: Sequence[GridPoint], budget_s: float,
                        on_result: Callable[[BenchResult], None] | None = None, timer: str = "events",
                        threads: int | None = None, noise_target: float = NOISE_TARGET,
                        ) -> tuple[list[BenchResult], list[Extra], list[dict[str, Any]]]:
    """``gemmzoo bench --executor slurm|ray``: the sweep on the engine's workers (see
    :mod:`gemmzoo.scale.executors`); results of ``backends`` in grid order, their extra records
    (``gpu``, ``worker_device``, ``conformance``, ``worker``) and the workers' reports."""
    names = tuple(b.name for b in backends)
    job = functools.partial(bench_records, names, budget_s, timer, threads=threads, noise_target=noise_target)
    workers: dict[GridPoint, Any] = {}

    def decoded(point: GridPoint, outcome: tuple[str, Any]) -> list[tuple[BenchResult, Extra]]:
        kind, value = outcome
        if kind == "ok":
            try:
                outcome = ("ok", bench_pairs(value))
            except (ValueError, KeyError, TypeError) as error:
                outcome = ("error", str(error))
        return _unpack(point, names, outcome, backends)

    def done(point: GridPoint, worker: str, outcome: tuple[str, Any]) -> None:
        workers[point] = worker
        if on_result is not None:
            for result, _extra in decoded(point, outcome):
                on_result(result)

    setup = functools.partial(setup_worker, names)
    outcomes, reports = make_executor(settings).run(job, points, done, setup)
    results, extras = [], []
    for point, outcome in zip(points, outcomes, strict=True):
        for result, extra in decoded(point, outcome):
            results.append(result)
            extras.append({**extra, "worker": workers.get(point)} if point in workers else extra)
    return results, extras, [{**r.as_dict(), "executor": settings.name} for r in reports]


def tune_rows(names: tuple[str, ...], budget_s: float, verify: bool, point: GridPoint) -> dict[str, Any]:
    """An engine worker's job for ``gemmzoo tune``: each named backend available here that computes
    the point's dtype and passes the conformance suite on this worker's device, measured
    (:func:`gemmzoo.tuning.tune.measure_records`); the rows as a tuning file holds them (stored by
    the submitting process through the validated import) and the backends skipped."""
    from gemmzoo.tuning.portable import measurement_row
    from gemmzoo.tuning.tune import measure_records

    usable, skipped = [], []
    for backend in _backends(names):
        backend = getattr(backend, "for_tuning", lambda b=backend: b)()
        if point.dtype not in backend.dtypes:
            continue
        if _available(backend) and _verdict_here(backend, point.dtype):
            usable.append(backend)
        else:
            skipped.append([backend.name, backend.device])
    records = measure_records(usable, point, budget_s, verify)
    return {"rows": [measurement_row(r) for r in records], "skipped": skipped}


def tune_with_executor(settings: Any, names: Sequence[str], points: Sequence[GridPoint], budget_s: float,
                       verify: bool, on_point: Callable[[GridPoint], None] | None = None,
                       ) -> tuple[list[Any], dict[tuple[GridPoint, str], list[str]], list[str], str]:
    """``gemmzoo tune --executor slurm|ray``: the workers measure; their rows go into this
    machine's tuning store through :func:`gemmzoo.tuning.portable.import_tuning` (checked whole;
    rows made on another device or with other versions are kept out, as for any import). Returns
    the stored records, the skipped backends by (point, device), errors by point, and the
    import's one-line summary."""
    import tempfile
    from pathlib import Path

    from gemmzoo.tuning import state
    from gemmzoo.tuning.portable import import_tuning, read_measurements, write_measurements

    job = functools.partial(tune_rows, tuple(names), budget_s, verify)
    setup = functools.partial(setup_worker, tuple(names), tuning=True)
    outcomes, _reports = make_executor(settings).run(
        job, points, lambda point, _worker, _outcome: on_point and on_point(point), setup)
    rows: list[Any] = []
    skipped: dict[tuple[GridPoint, str], list[str]] = {}
    failures = []
    for point, (kind, value) in zip(points, outcomes, strict=True):
        if kind != "ok" or not isinstance(value, dict) or not isinstance(value.get("rows"), list):
            failures.append(f"{point.id}: {value if kind != 'ok' else 'a worker sent no rows'}")
            continue
        rows += value["rows"]
        for pair in value.get("skipped") or []:
            if isinstance(pair, list) and len(pair) == 2:
                skipped.setdefault((point, str(pair[1])), []).append(str(pair[0]))
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(settings.folder or scratch) / "tuning-import.json"
        write_measurements(rows, path)
        report = import_tuning(state.store(), path)
        records = [r for r in read_measurements(path) if _made_here(r)]
    state.forget_answers()
    return records, skipped, failures, f"{path.name}: {report.summary()}"


def _made_here(record: Any) -> bool:
    """Whether a measurement was made on this machine's device with its library versions (the
    import keeps only those)."""
    import json

    from gemmzoo.plugins.registry import get_registry
    from gemmzoo.tuning.fingerprint import device_fingerprint, library_versions

    try:
        kind = json.loads(record.device).get("kind")
        return record.device == device_fingerprint(kind) and \
            record.versions == library_versions(record.backend, get_registry())
    except Exception:  # no such device here
        return False
