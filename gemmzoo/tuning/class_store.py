"""Stored measurements of the problem classes beyond gemm, and the winner they name.

Rows live in the tuning database's ``class_measurements`` table (:mod:`gemmzoo.tuning.db`), one
per backend and problem, the problem named by its class and text form
(:meth:`gemmzoo.problems.classes.Problem.text`). Only rows of the versions installed now count, and only
``ok`` rows: a backend gets one only after it passed its class's conformance cases in the run
that measured it.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any, NamedTuple

from gemmzoo.problems.classes import Problem
from gemmzoo.tuning import state
from gemmzoo.tuning.fingerprint import device_fingerprint, library_versions


class ClassAnswer(NamedTuple):
    """A remembered answer: the stored winner's name, or ``None``."""

    backend: str | None


def _versions(backend: str) -> str:
    from gemmzoo.tuning.state import current

    return library_versions(backend, current().registry)


def store_measurements(device: str, problem: Problem,
                       timings: Iterable[tuple[str, str, float | None]]) -> None:
    """Store ``(backend, status, median_s)`` of each backend measured at ``problem`` on ``device``
    ("cpu" or "cuda"); remembered answers are dropped so the next choice reads them."""
    now = time.time()
    rows = [(device_fingerprint(device), _versions(name), name, problem.kind, problem.text(), problem.dtype,
             status, median, now) for name, status, median in timings]
    state.store().add_class_measurements(rows)
    state.forget_answers()


def stored_winner(problem_text: str, dtype: str, device: str) -> str | None:
    """The fastest backend stored for a class problem on this ``device`` with today's versions,
    each backend's newest ``ok`` row counting, or ``None``; remembered for the process until new
    measurements are stored."""
    key = ("class-problem", problem_text, dtype, device)
    found = state.answers.get(key)
    if found is None:
        found = state.answers[key] = ClassAnswer(_winner(problem_text, dtype, device))
    return found.backend


def _winner(problem_text: str, dtype: str, device: str) -> str | None:
    newest: dict[str, Any] = {}
    for backend, versions, status, median, _created in state.store().class_measurements(
            device_fingerprint(device), problem_text, dtype):
        if versions != _versions(str(backend)):
            continue
        newest[str(backend)] = median if status == "ok" and isinstance(median, float) and median > 0 else None
    timed = {name: median for name, median in newest.items() if median is not None}
    return min(timed, key=timed.__getitem__) if timed else None
