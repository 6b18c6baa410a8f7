"""The run of ``gemmzoo tune --recorded``: suites beside measurements, problems heaviest first,
within one time budget.

1. The recorded problems, each once, heaviest first (times recorded × FLOPs;
   :func:`gemmzoo.tuning.contenders.gathered`).
2. At each problem, the candidates are the backends that can be the fastest there
   (:func:`gemmzoo.tuning.contenders.contends`); the others are passed over, each reason said
   once. Backends named (``--backend``, ``GEMMZOO_BACKENDS``) are all candidates.
3. The conformance suites missing for the candidates start first, on CUDA in worker processes
   side by side (:class:`gemmzoo.tuning.suites.SuitePool`), each ended after ``--suite-limit``
   seconds. Meanwhile each problem is measured with the candidates already checked (the
   baseline and the current pick first; :func:`gemmzoo.tuning.tune.measure_in_turn`). On the
   CPU the suites would share the cores the timings run on: they run first, then the problems.
4. Once the suites are done, each problem with new checked candidates is measured again: its
   leader, then the new ones against it, in one round.
5. Last, heaviest first, each problem where a backend that searches harder when tuned (Triton's
   full autotune) came close to the leader as a call runs it: the leader and that backend
   searched, in one round.
6. No new work starts once ``--time-budget`` seconds are spent; the problems not reached (or
   not searched) are said with their share of the recorded work, and stay recorded for the next
   run.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from gemmzoo.cli.recorded import caller_library, judged, outcome, problem_text, progress_line, suite_workers
from gemmzoo.cli.recorded import checked as recorded_checks
from gemmzoo.problems.grids import GridPoint
from gemmzoo.tuning.contenders import (
    SEARCH_RESERVE_S,
    Budget,
    Recorded,
    candidate_order,
    contends,
    gathered,
    known_arch,
    work_share,
)


def tune_recorded(args: argparse.Namespace, chosen: Sequence[Any], named: bool,
                  rows: Sequence[tuple[GridPoint, str, int]], skipped: dict[tuple[Any, str], list[str]],
                  records: list[Any], outcomes: dict[tuple[GridPoint, str], Any],
                  say: Callable[[str], None]) -> set[tuple[GridPoint, str]]:
    """Measure the recorded problems ``rows`` (``(point, device, seen)``) with the backends
    ``chosen`` (see the module docstring), adding to ``records``, ``skipped`` and ``outcomes`` as
    it goes, so that an interrupted run keeps what it made. Returns the problems (point, device)
    the time budget left measured with only some of their candidates: they stay recorded."""
    from gemmzoo.plugins.watchdog import idle_workers_ended
    from gemmzoo.tuning import state
    from gemmzoo.tuning.suites import SuitePool
    from gemmzoo.tuning.tune import conformance_verdict

    budget = Budget(args.time_budget)
    problems = gathered(rows)
    library = caller_library()
    store = state.store()
    usable = [b for b in chosen if state.unavailable_reason(b) is None]
    arches: dict[str, str] = {}
    reasons_said: set[tuple[str, str]] = set()
    candidates: dict[tuple[Any, ...], list[Any]] = {}
    for problem in problems:  # who contends where, each reason said once
        device, point = problem.device, problem.point
        if device not in arches:
            arches[device] = known_arch(device)
        here = [b for b in usable if b.device == device and point.dtype in b.dtypes]
        kept = []
        for backend in here:
            why = None if named else contends(backend, point, device, arches[device], library)
            if why is None:
                kept.append(backend)
                continue
            skipped.setdefault((point, device), []).append(backend.name)
            if (backend.name, why) not in reasons_said:
                reasons_said.add((backend.name, why))
                say(f"not timed: {backend.name} where {why} (first: {problem_text(point, device)})")
        candidates[problem.key] = kept
    jobs = list(dict.fromkeys((b.name, p.point.dtype) for p in problems for b in candidates[p.key]
                              if conformance_verdict(store, b, p.point.dtype, run=False) is None))
    device_of = {b.name: b.device for b in usable}
    on_cuda = any(device_of[name] == "cuda" for name, _ in jobs)
    workers = suite_workers("cuda" if on_cuda else "cpu", len(jobs)) if args.suite_workers is None \
        else args.suite_workers
    total = len(problems)
    with idle_workers_ended(), state.lock:
        if jobs and workers < 2:  # in this process, one after another
            for name, dtype in jobs:
                started = time.perf_counter()
                backend = next(b for b in usable if b.name == name)
                passed = conformance_verdict(store, backend, dtype)
                say(f"conformance {name} {dtype}: {'passed' if passed else 'FAILED'} "
                    f"({time.perf_counter() - started:.1f} s)")
            jobs = []
        pool = SuitePool(jobs, workers, min(args.suite_limit, max(budget.left(), 1.0))) if jobs else None
        try:
            if pool is not None:
                overlap = overlaps(on_cuda)
                say(f"conformance: {len(jobs)} {'suite' if len(jobs) == 1 else 'suites'} not yet run here, "
                    f"in {workers} worker processes, at most {args.suite_limit:g} s each"
                    + ("; the backends already checked are measured meanwhile" if overlap else ""))
                if not overlap:  # the CPU's suites and timings would share its cores
                    _heard(pool.wait(budget.left()), say)
            run = _Run(args, problems, candidates, budget, records, outcomes, say)
            waiting = _first_pass(run, pool)
            if pool is not None:
                _heard(pool.wait(budget.left()), say)
            left = _second_pass(run, waiting)
            left += _search_pass(run)
        finally:
            if pool is not None:
                _heard(pool.close(), say)
        state.forget_answers()
    unmeasured = [p for p in problems if (p.point, p.device) not in outcomes]
    if left or (unmeasured and budget.over):
        behind = list({(p.point, p.device): p for p in (unmeasured if budget.over else []) + left}.values())
        say(f"time budget of {args.time_budget:g} s used up: {len(behind)} of {total} problems not (fully) "
            f"measured, {work_share(behind, problems):.0%} of the recorded work; they stay recorded: run "
            "gemmzoo tune --recorded again to go on (or give --time-budget more)")
    elif unmeasured:
        say(f"{len(unmeasured)} of {total} problems had no backend checked here to measure them with")
    return {(p.point, p.device) for p in left}


def overlaps(on_cuda: bool) -> bool:
    """Whether problems are measured while suites run in workers: on CUDA, where the suites'
    device work is small and their compilers keep CPU cores busy; not on the CPU, whose cores the
    timings would share with them."""
    return on_cuda


def _heard(finished: Sequence[Any], say: Callable[[str], None]) -> None:
    """Say how each suite ended; forget the verdicts remembered, so the workers' are read."""
    from gemmzoo.tuning import state

    for one in finished:
        if one.passed is None:
            say(f"conformance {one.name} {one.dtype}: no verdict ({one.why}); left out of this run "
                f"({one.seconds:.1f} s)")
        else:
            verdict = "passed" if one.passed else "FAILED"
            say(f"conformance {one.name} {one.dtype}: {verdict} ({one.seconds:.1f} s)")
    if finished:
        state.verdicts.clear()


def _checked(backends: Sequence[Any], dtype: str, pool: Any) -> tuple[list[Any], list[Any]]:
    """Of ``backends``: those that passed their suite here, and those whose suite is still pending
    in ``pool``; the rest (failed, or no verdict) are neither."""
    from gemmzoo.tuning import state
    from gemmzoo.tuning.tune import conformance_verdict

    pending = set(pool.pending) if pool is not None else set()
    ready, waiting = [], []
    for backend in backends:
        if (backend.name, dtype) in pending:
            waiting.append(backend)
        elif conformance_verdict(state.store(), backend, dtype, run=False):
            ready.append(backend)
    return ready, waiting


@dataclass
class _Run:
    """What the passes of one run share."""

    args: argparse.Namespace
    problems: Sequence[Recorded]
    candidates: dict[Any, list[Any]]
    budget: Budget
    records: list[Any]
    outcomes: dict[tuple[GridPoint, str], Any]
    say: Callable[[str], None]
    #: Backends that search harder when tuned and came close to the leader, by problem.
    close: dict[Any, list[Any]] = field(default_factory=dict)

    def measure(self, problem: Recorded, backends: Sequence[Any], first: Sequence[str | None],
                search: bool = False) -> tuple[Any, bool]:
        """Measure ``problem`` with ``backends`` (``first`` at the front), store the records, and
        return the outcome now and whether its results were judged. Unless ``search``, backends
        that search harder when tuned are not searched: those that came close to the leader are
        noted in :attr:`close` (searched in the last pass, time permitting)."""
        from gemmzoo.tuning import state
        from gemmzoo.tuning.tune import measure_in_turn

        point, args = problem.point, self.args
        names = [b.name for b in backends]
        ordered = [next(b for b in backends if b.name == name) for name in candidate_order(names, first)]
        checked = judged(point, not args.no_verify, args.verify_all)  # element by element

        def later(backend: Any) -> None:
            self.close.setdefault(problem.key, []).append(backend)

        spot = recorded_checks(point, not args.no_verify, args.verify_all)  # Freivalds' test
        made = measure_in_turn(ordered, point, args.budget, spot or checked, search=search, on_close=later,
                               judge=checked)
        state.store().add(made)
        self.records.extend(made)
        state.forget_answers()
        found = self.outcomes[point, problem.device] = outcome(point, problem.device)
        return found, checked or args.no_verify

    def line(self, index: int, problem: Recorded, found: Any, started: float, checked: bool,
             note: str = "") -> str:
        """The progress line of ``problem``, ``note`` after the problem's name."""
        text = progress_line(index, len(self.problems), problem.point, problem.device, found,
                             time.perf_counter() - started, checked)
        return text.replace(":", f" ({note}):", 1) if note else text


def _first_names(problem: Recorded) -> list[str | None]:
    """The baseline and the current pick of ``problem``: timed first, the rivals of the rest."""
    from gemmzoo.cli.recorded import BASELINES

    now = outcome(problem.point, problem.device)
    return [*BASELINES.get(problem.device, ()), now.backend if now else None]


def _first_pass(run: _Run, pool: Any) -> dict[Any, list[Any]]:
    """Each problem, heaviest first, with the candidates checked by now; the candidates still
    waiting for their suites, by problem."""
    waiting_for: dict[Any, list[Any]] = {}
    for index, problem in enumerate(run.problems, 1):
        if run.budget.over:
            break
        if pool is not None:
            _heard(pool.poll(), run.say)
        point, device = problem.point, problem.device
        ready, waiting = _checked(run.candidates[problem.key], point.dtype, pool)
        started = time.perf_counter()
        if waiting:
            waiting_for[problem.key] = waiting
        if not ready:
            if not waiting:
                run.outcomes[point, device] = None
                run.say(run.line(index, problem, None, started, True))
            continue
        found, checked = run.measure(problem, ready, _first_names(problem))
        line = run.line(index, problem, found, started, checked)
        if waiting:
            line += f"; waiting for the suites of {', '.join(b.name for b in waiting)}"
        run.say(line)
    return waiting_for


def _second_pass(run: _Run, waiting: dict[Any, list[Any]]) -> list[Recorded]:
    """Each problem that had candidates waiting, heaviest first: its leader and those that passed
    their suites since, in one round. Returns the problems the budget did not reach."""
    left: list[Recorded] = []
    for index, problem in enumerate(run.problems, 1):
        if problem.key not in waiting:
            continue
        new, _still = _checked(waiting[problem.key], problem.point.dtype, None)
        if not new:
            continue
        if run.budget.over:
            left.append(problem)
            continue
        leader = run.outcomes.get((problem.point, problem.device))
        lead = [b for b in run.candidates[problem.key] if leader is not None and b.name == leader.backend]
        started = time.perf_counter()
        found, checked = run.measure(problem, lead + new, [leader.backend if leader else None])
        run.say(run.line(index, problem, found, started, checked,
                         f"again, with {', '.join(b.name for b in new)}"))
    return left


def _search_pass(run: _Run) -> list[Recorded]:
    """Each problem, heaviest first, where a backend that searches harder when tuned came close to
    the leader as a call runs it: its leader, then that backend searched (its tuning twin), in
    one round, started only while :data:`~gemmzoo.tuning.contenders.SEARCH_RESERVE_S` of the
    budget (at most half of it) is left. Returns the problems the budget did not reach."""
    from gemmzoo.contract.backend import declared

    left: list[Recorded] = []
    reserve = min(SEARCH_RESERVE_S, run.budget.seconds / 2)
    for index, problem in enumerate(run.problems, 1):
        if problem.key not in run.close:
            continue
        if run.budget.left() < reserve:
            left.append(problem)
            continue
        leader = run.outcomes.get((problem.point, problem.device))
        by_name = {b.name: b for b in run.close[problem.key]}
        searched = [declared(backend, "for_tuning") for backend in by_name.values()]
        lead = [b for b in run.candidates[problem.key]
                if leader is not None and b.name == leader.backend and b.name not in by_name]
        started = time.perf_counter()
        first = [leader.backend if leader else None]
        found, checked = run.measure(problem, lead + searched, first, search=True)
        run.say(run.line(index, problem, found, started, checked, f"searched: {', '.join(by_name)}"))
    return left
