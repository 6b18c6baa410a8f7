"""Measuring backends and storing the results: what ``gemmzoo tune`` and a ``best_backend`` miss do.

A backend is measured for a dtype only after it *passed conformance* for that dtype: the whole
conformance suite (:func:`gemmzoo.conformance.check_backend` limited to that dtype, tens of
milliseconds per backend and dtype on a CPU) has run on this device with these library versions
and every check passed. The verdict is stored in the database, so it runs once per device,
versions, backend and dtype, not once per process. On top of that each measurement checks its own
result against the conformance bound (``verify``); a result outside it is stored as ``"wrong"``
and never chosen.

Every check and measurement runs under the watchdog's time limit (:mod:`gemmzoo.watchdog`): a
measurement that overruns is stored as ``"timeout"``, and a suite that overruns fails for this
process only (no verdict is stored: the next process asks again). Either way the backend is
quarantined for the rest of the process.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from gemmzoo.accuracy import accuracy_of
from gemmzoo.grids import GridPoint
from gemmzoo.registry import get_registry
from gemmzoo.tuning import state
from gemmzoo.tuning.db import ConformanceRecord, Record, TuningStore
from gemmzoo.tuning.fingerprint import canonical, device_fingerprint, library_versions
from gemmzoo.watchdog import BackendTimeoutError, idle_workers_ended
from gemmzoo.watchdog import call as watched

#: The conformance suite's revision: part of a stored verdict's key, so a verdict from a suite
#: with other cases or bounds is not reused. Bump it when the cases or the bounds change.
SUITE_REVISION = 3


def verdict_versions(backend: Any) -> str:
    """What a conformance verdict depends on besides the device: the versions of
    :func:`library_versions`, the suite's revision (:data:`SUITE_REVISION`) and the accuracy
    class the backend declares (whose bound the suite checked)."""
    versions = json.loads(library_versions(backend.name, get_registry()))
    versions.update(suite=SUITE_REVISION, accuracy=str(accuracy_of(backend)))
    return canonical(versions)


def conformance_verdict(store: TuningStore, backend: Any, dtype: str, *, run: bool = True) -> bool | None:
    """Whether ``backend`` passed conformance for ``dtype`` here; runs the suite when no verdict is
    stored and ``run`` is true, else answers ``None`` for "unknown"."""
    device = device_fingerprint(backend.device)
    versions = verdict_versions(backend)
    key = (device, versions, backend.name, dtype)
    if key in state.verdicts:
        return state.verdicts[key]
    stored = store.conformance(device, versions, backend.name, dtype)
    if stored is None:
        if not run:
            return None
        from gemmzoo.conformance import check_backend

        report = check_backend(backend, [dtype])
        if report.timed_out is not None:  # this process's trouble, not a verdict to keep
            state.verdicts[key] = False
            return False
        failures = report.failures
        detail = report.unavailable or "; ".join(f"{f.check}: {f.detail}" for f in failures[:3])
        stored = ConformanceRecord(device, versions, backend.name, dtype, report.passed,
                                   len(report.results), len(failures), detail, time.time())
        store.add_conformance(stored)
    state.verdicts[key] = stored.passed
    return stored.passed


def measure_record(backend: Any, point: GridPoint, budget_s: float, verify: bool) -> Record:
    """Measure ``backend`` on ``point`` and describe the outcome as a :class:`Record`."""
    from gemmzoo.measure import WrongResultError, measure

    status, detail = "ok", ""
    median = spread = ratio = host = host_spread = None
    samples = None
    try:
        result = watched(backend, f"check and timing at {point.id}", measure, backend, point,
                         budget_s=budget_s, verify=verify)
    except WrongResultError as error:
        status, detail = "wrong", str(error)
    except BackendTimeoutError as error:
        status, detail = "timeout", str(error)
    except Exception as error:  # a backend that breaks on one shape must not stop the others
        status, detail = "failed", f"{type(error).__name__}: {error}"
    else:
        median, spread, samples = result.timing.median_s, result.timing.spread_s, result.timing.samples
        if result.host is not None:
            host, host_spread = result.host.median_s, result.host.spread_s
        ratio = result.error_ratio if verify else None
    return Record(
        device=device_fingerprint(backend.device),
        versions=library_versions(backend.name, get_registry()),
        backend=backend.name, m=point.m, n=point.n, k=point.k, dtype=point.dtype, layout=point.layout,
        status=status, median_s=median, spread_s=spread, error_ratio=ratio, samples=samples,
        detail=detail, created=time.time(), host_s=host, host_spread_s=host_spread,
    )


def measure_records(backends: Sequence[Any], point: GridPoint, budget_s: float, verify: bool) -> list[Record]:
    """:func:`measure_record` for each backend on ``point``; then, where two or more of them are
    launch-bound (host time above device time), their caller times measured again as loops of
    calls, in interleaved rounds (:func:`gemmzoo.measure.interleaved_caller_timings`), and stored
    as their host time: such backends are ranked by what a calling loop gets, and one measurement
    after another does not separate times a few per cent apart."""
    records = [measure_record(backend, point, budget_s, verify) for backend in backends]
    bound = [index for index, r in enumerate(records)
             if r.status == "ok" and r.median_s is not None and (r.host_s or 0.0) > r.median_s]
    if len(bound) < 2:
        return records
    from gemmzoo.measure import interleaved_caller_timings, make_problem

    def caller_timings() -> list[Any]:
        problems = [make_problem(backends[index], point) for index in bound]
        return interleaved_caller_timings(problems, [float(records[index].host_s) for index in bound])

    try:  # several backends in one task: an overrun quarantines none of them
        timings = watched(None, f"caller timings at {point.id}", caller_timings)
    except Exception:  # keep the first measurement: it is a correct, if noisier, answer
        return records
    for index, timing in zip(bound, timings, strict=True):
        record = records[index]
        records[index] = dataclasses.replace(record, host_s=max(timing.median_s, float(record.median_s)),
                                             host_spread_s=timing.spread_s)
    return records


@idle_workers_ended()
def tune(
    points: Iterable[GridPoint],
    backends: Sequence[str] | None = None,
    *,
    budget_s: float = 0.2,
    verify: bool = True,
    on_step: Callable[[str, Any, GridPoint, Record | None], None] | None = None,
) -> list[Record]:
    """Measure every available, conforming backend (``backends`` or ``GEMMZOO_BACKENDS``, else
    all) that computes each point's dtype, storing each measurement as soon as it is made.

    ``on_step(kind, backend, point, record)`` is called with kind ``"measured"`` (and the record)
    or ``"skipped"`` (unavailable, or failed conformance; record None) for each backend and point.
    """
    store = state.store()
    chosen = [getattr(b, "for_tuning", lambda b=b: b)() for b in get_registry().select(backends)]
    made: list[Record] = []
    with state.lock:
        for point in points:
            usable = []
            for backend in chosen:
                if point.dtype not in backend.dtypes:
                    continue
                usable_here = state.unavailable_reason(backend) is None
                if usable_here and conformance_verdict(store, backend, point.dtype):
                    usable.append(backend)
                elif on_step is not None:
                    on_step("skipped", backend, point, None)
            records = measure_records(usable, point, budget_s, verify)
            store.add(records)
            made += records
            if on_step is not None:
                for backend, record in zip(usable, records, strict=True):
                    on_step("measured", backend, point, record)
        state.forget_answers()
    return made
