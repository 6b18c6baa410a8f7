"""Measuring backends and storing the results: what ``gemmzoo tune`` and a ``best_backend`` miss do.

A backend is measured for a dtype only after it *passed conformance* for that dtype: the whole
conformance suite (:func:`gemmzoo.conformance.check_backend` limited to that dtype, tens of
milliseconds per backend and dtype on a CPU) has run on this device with these library versions
and every check passed. The verdict is stored in the database, so it runs once per device,
versions, backend and dtype, not once per process. On top of that each measurement checks its own
result against the conformance bound (``verify``); a result outside it is stored as ``"wrong"``
and never chosen.

Every check and measurement runs under the watchdog's time limit (:mod:`gemmzoo.plugins.watchdog`): a
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

from gemmzoo.contract.accuracy import accuracy_of
from gemmzoo.contract.backend import declared
from gemmzoo.plugins.watchdog import BackendTimeoutError, idle_workers_ended
from gemmzoo.plugins.watchdog import call as watched
from gemmzoo.problems.grids import GridPoint
from gemmzoo.tuning import state
from gemmzoo.tuning.db import ConformanceRecord, Record, TuningStore
from gemmzoo.tuning.fingerprint import canonical, device_fingerprint, library_versions
from gemmzoo.tuning.state import current

#: The conformance suite's revision: part of a stored verdict's key, so a verdict from a suite
#: with other cases or bounds is not reused. Bump it when the cases or the bounds change.
SUITE_REVISION = 4


def verdict_versions(backend: Any) -> str:
    """What a conformance verdict depends on besides the device: the versions of
    :func:`library_versions`, the suite's revision (:data:`SUITE_REVISION`) and the accuracy
    class the backend declares (whose bound the suite checked)."""
    versions = json.loads(library_versions(backend.name, current().registry))
    versions.update(suite=SUITE_REVISION, accuracy=str(accuracy_of(backend)))
    return canonical(versions)


def conformance_verdict(store: TuningStore, backend: Any, dtype: str, *, run: bool = True,
                        cls: str = "gemm") -> bool | None:
    """Whether ``backend`` passed conformance for ``dtype`` here; runs the suite when no verdict is
    stored and ``run`` is true, else answers ``None`` for "unknown". ``cls``: the problem class
    (:mod:`gemmzoo.problems.classes`) the verdict is for, earned by that class's cases alone, so a fault in
    one class never takes a backend's other classes with it. Verdicts of the classes beyond gemm
    are kept in the session, not in the database."""
    if current().drift(backend) is not None:  # not the backend that was registered: no verdict of any other
        return False
    device = device_fingerprint(backend.device)
    versions = verdict_versions(backend)
    key = (device, versions, backend.name, dtype) if cls == "gemm" else (device, versions, backend.name,
                                                                          f"{dtype}:{cls}")
    if key in state.verdicts:
        return state.verdicts[key]
    if cls != "gemm":
        if not run:
            return None
        from gemmzoo.conformance import check_backend

        report = check_backend(backend, [dtype], classes=(cls,))
        state.verdicts[key] = report.passed and report.timed_out is None
        return state.verdicts[key]
    stored = store.conformance(device, versions, backend.name, dtype)
    if stored is None:
        if not run:
            return None
        from gemmzoo.conformance import check_backend

        report = check_backend(backend, [dtype], classes=("gemm",))
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


def measure_record(backend: Any, point: GridPoint, budget_s: float, verify: bool,
                   settle_above_s: float | None = None, problem: Any = None, judge: bool = True) -> Record:
    """Measure ``backend`` on ``point`` and describe the outcome as a :class:`Record`;
    ``settle_above_s``: a rival's time, the samples stop once this backend is slower beyond doubt
    (:class:`gemmzoo.measure.StoppingRule`); ``problem``: its operands, already made; ``judge``
    false: with ``verify``, the timed calls are spot-checked but the first result is not judged
    element by element."""
    from gemmzoo.measure import WrongResultError, measure

    status, detail = "ok", ""
    median = spread = ratio = host = host_spread = None
    samples = None
    try:
        result = watched(backend, f"check and timing at {point.id}", measure, backend, point,
                         budget_s=budget_s, verify=verify, settle_above_s=settle_above_s, problem=problem,
                         judge=judge)
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
        ratio = result.error_ratio if verify and judge else None
    return Record(
        device=device_fingerprint(backend.device),
        versions=library_versions(backend.name, current().registry),
        backend=backend.name, m=point.m, n=point.n, k=point.k, dtype=point.dtype, layout=point.layout,
        status=status, median_s=median, spread_s=spread, error_ratio=ratio, samples=samples,
        detail=detail, created=time.time(), host_s=host, host_spread_s=host_spread,
    )


#: Backends whose device time is within this factor of the fastest caller time (the larger of
#: device and host time) are contenders at a problem: their loops of calls are timed in turn.
CONTENDER_RATIO = 1.10
#: The most contenders whose loops are timed, fastest first.
MAX_CONTENDERS = 4
#: Above this caller time per call, no loops are timed: host time and a warm cache hardly move a
#: loop of such calls, and loops of them would take seconds.
LOOP_LIMIT_S = 0.002


@dataclasses.dataclass(frozen=True)
class LoopPolicy:
    """Which backends' loops of calls :func:`measure_records` times: those whose device time is
    within ``ratio`` of the fastest caller time, at most ``max_contenders`` of them, and none when
    the fastest caller time is above ``limit_s`` (defaults: :data:`CONTENDER_RATIO`,
    :data:`MAX_CONTENDERS`, :data:`LOOP_LIMIT_S`)."""

    ratio: float = CONTENDER_RATIO
    max_contenders: int = MAX_CONTENDERS
    limit_s: float = LOOP_LIMIT_S

    def __post_init__(self) -> None:
        if not self.ratio >= 1.0:
            raise ValueError(f"LoopPolicy: ratio must be at least 1; got {self.ratio!r}")
        if not self.max_contenders >= 2:
            raise ValueError(f"LoopPolicy: max_contenders must be at least 2; got {self.max_contenders!r}")
        if not self.limit_s >= 0.0:
            raise ValueError(f"LoopPolicy: limit_s must be a time in seconds; got {self.limit_s!r}")


def loop_policy(policy: LoopPolicy | None = None) -> LoopPolicy:
    """``policy``, else the current session's (``Session(loops=...)``), else the defaults."""
    if policy is not None:
        return policy
    given = current().loops
    return LoopPolicy() if given is None else given


def contenders(records: Sequence[Record], policy: LoopPolicy | None = None) -> list[int]:
    """Indices of the ``ok`` records whose loops :func:`measure_records` times
    (:func:`gemmzoo.tuning.choose.contenders` under ``policy``, default :func:`loop_policy`)."""
    from gemmzoo.tuning.choose import contenders as near_fastest

    return near_fastest(records, loop_policy(policy))


def measure_records(backends: Sequence[Any], point: GridPoint, budget_s: float, verify: bool,
                    loops: LoopPolicy | None = None) -> list[Record]:
    """:func:`measure_record` for each backend on ``point``; then, for the contenders (see
    :func:`contenders` under ``loops``, default :func:`loop_policy`), loops of calls on the same
    operands, each ended by one synchronisation, timed in interleaved rounds
    (:func:`gemmzoo.measure.interleaved_caller_timings`) and stored as ``loop_s``: what a program
    calling in a loop gets, launch path, device work and warm caches together, measured for the
    near-fastest backends under the same drift of the host. The records of one call share one
    ``created``, which is what lets their loop times be ranked against each other (see
    :func:`gemmzoo.tuning.select.explain`). The operands are made once for the backends that
    convert arrays with the same code (:class:`SharedOperands`), for their measurements and
    their loops alike."""
    operands = SharedOperands(point)
    records = [operands.measured(backend, budget_s, verify, None) for backend in backends]
    return with_loops(backends, point, records, loops, operands)


def with_loops(backends: Sequence[Any], point: GridPoint, records: Sequence[Record],
               loops: LoopPolicy | None = None, operands: SharedOperands | None = None) -> list[Record]:
    """``records`` (one per backend, measured at ``point``) as one round: one ``created`` for all,
    and loops of calls timed for the contenders among them under ``loops`` (see
    :func:`measure_records`), on the operands the measurements used where ``operands`` holds
    them (else made again)."""
    created = time.time()
    records = [dataclasses.replace(r, created=created) for r in records]
    near = contenders(records, loops)
    if not near:
        return records
    from gemmzoo.measure import interleaved_caller_timings

    shared = operands if operands is not None else SharedOperands(point)

    def loop_timings() -> list[Any]:
        problems = [shared.problem(backends[index]) for index in near]
        return interleaved_caller_timings(problems, [float(records[index].measured_caller_s)  # type: ignore[arg-type]
                                                     for index in near])

    try:  # several backends in one task: an overrun quarantines none of them
        timings = watched(None, f"loops of calls at {point.id}", loop_timings)
    except Exception:  # keep the measurements without loops: correct, if further from a caller's loop
        return records
    for index, timing in zip(near, timings, strict=True):
        records[index] = dataclasses.replace(records[index], loop_s=timing.median_s,
                                             loop_spread_s=timing.spread_s)
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
    chosen = [declared(b, "for_tuning") for b in current().select(backends)]
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


def measure_in_turn(backends: Sequence[Any], point: GridPoint, budget_s: float, verify: bool, *,
                    search: bool = True, on_close: Callable[[Any], None] | None = None,
                    judge: bool = True) -> list[Record]:
    """Measure ``backends`` at ``point`` one after another, each against the fastest so far
    (:mod:`gemmzoo.tuning.contenders`): a backend's samples stop once it is slower than that
    leader beyond doubt. A backend whose tuning run searches harder than a call
    (:meth:`gemmzoo.Backend.for_tuning`: Triton's full autotune, which compiles and times every
    config) is timed as a call runs it; where that came within
    :data:`~gemmzoo.tuning.contenders.ESCALATE_RATIO` of the leader it is searched too when
    ``search``, else ``on_close(backend)`` hears of it (to be searched later, time permitting).
    Then the records as one round, with loops for the near-fastest (:func:`with_loops`). Put the
    backends most likely to lead first: the baseline, the current pick. ``judge``: as in
    :func:`measure_record`. Stores nothing."""
    from gemmzoo.tuning.contenders import escalates, rival_s

    measured: list[Any] = []
    records: list[Record] = []
    leader: Record | None = None
    operands = SharedOperands(point, judge)
    for backend in backends:
        settle = rival_s(float(leader.measured_caller_s), leader.spread_s or 0.0) if leader else None  # type: ignore[arg-type]
        tuned = declared(backend, "for_tuning")
        used, record = backend, operands.measured(backend, budget_s, verify, settle)
        close = tuned is not backend and record.status == "ok" and escalates(
            record.measured_caller_s, leader.measured_caller_s if leader else None)
        if close and search:
            searched = operands.measured(tuned, budget_s, verify, settle)
            if searched.status == "ok":
                used, record = tuned, searched
        elif close and on_close is not None:
            on_close(backend)
        measured.append(used)
        records.append(record)
        if record.status == "ok" and record.median_s is not None and (
                leader is None or float(record.measured_caller_s) < float(leader.measured_caller_s)):  # type: ignore[arg-type]
            leader = record
    return with_loops(measured, point, records, operands=operands)


class SharedOperands:
    """One point's operands, made once for every backend that converts arrays with the same code
    (the same ``from_numpy`` and ``to_numpy``: torch's backends, a Triton backend and its tuning
    twin), with their host copies: a large problem's operands take seconds to draw, move to the
    device and copy back, and the backends measured in turn at it would each pay that. A
    backend never changes its operands (the conformance suite checks it), so sharing them changes
    no result."""

    def __init__(self, point: GridPoint, judge: bool = True) -> None:
        self.point = point
        self.judge = judge
        self._made: dict[tuple[Any, Any, Any], Any] = {}

    @staticmethod
    def _code(backend: Any) -> tuple[Any, Any, Any] | None:
        """What decides which operands a backend can share: its class's ``from_numpy`` and
        ``to_numpy``, and its device (one class serves torch's CPU and CUDA backends)."""
        kind = type(backend)
        make, back = getattr(kind, "from_numpy", None), getattr(kind, "to_numpy", None)
        own = getattr(backend, "__dict__", {})
        if make is None or back is None or "from_numpy" in own or "to_numpy" in own:
            return None
        return make, back, getattr(backend, "device", None)

    def measured(self, backend: Any, budget_s: float, verify: bool, settle: float | None) -> Record:
        """:func:`measure_record` of ``backend`` on operands shared with the backends before it
        that convert arrays with its code (made now for the first of them)."""
        code = self._code(backend)
        if code is None:
            return measure_record(backend, self.point, budget_s, verify, settle, judge=self.judge)
        shared = self._made.get(code)
        problem = None
        if shared is not None:  # this backend's own Problem, over the same arrays and host copies
            problem = dataclasses.replace(shared, backend=backend)
        else:
            from gemmzoo.measure import make_problem

            try:
                problem = watched(backend, f"operands at {self.point.id}", make_problem, backend, self.point)
            except Exception:  # measure_record makes them again and says what went wrong
                return measure_record(backend, self.point, budget_s, verify, settle, judge=self.judge)
        record = measure_record(backend, self.point, budget_s, verify, settle, problem, self.judge)
        self._made[code] = problem  # with whatever host copies the judge made
        return record

    def problem(self, backend: Any) -> Any:
        """``backend``'s problem on the operands made for its code, else new ones (made here, in
        this thread: for the loops of calls, after every backend was measured)."""
        from gemmzoo.measure import make_problem

        code = self._code(backend)
        shared = self._made.get(code) if code is not None else None
        if shared is not None:
            return dataclasses.replace(shared, backend=backend)
        return make_problem(backend, self.point)
