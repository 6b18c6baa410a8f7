"""Per-process state of the tuner: open databases, cached answers, verdicts and availability."""

from __future__ import annotations

import os
import threading
from typing import Any

from gemmzoo.plan_cache import PlanCache
from gemmzoo.tuning.db import TuningStore, default_cache_dir, open_store

lock = threading.RLock()
"""Held while a question is answered the slow way, so one process never measures twice at once."""

answers: dict[tuple[Any, ...], Any] = {}
"""``best_backend`` answers by (shape, dtype, device, measure, relevant environment)."""

plan_cache = PlanCache()
"""``gemmzoo.matmul``'s plans (see :mod:`gemmzoo.dispatch`); they embed answers, so a new cache
replaces this one when the answers are dropped."""

verdicts: dict[tuple[str, str, str, str], bool] = {}
"""Conformance verdicts by (device fingerprint, versions, backend, dtype)."""

availability: dict[str, str | None] = {}
"""``unavailable_reason()`` of each backend, asked once per process."""

# By (process id, directory): a child made by fork() must not use its parent's SQLite connection.
_stores: dict[tuple[int, str], TuningStore] = {}


def store() -> TuningStore:
    """The tuning database of the current cache directory, opened on first use in each process."""
    directory = default_cache_dir()
    key = (os.getpid(), str(directory))
    with lock:
        found = _stores.get(key)
        if found is None:
            found = _stores[key] = open_store(directory)
        return found


def unavailable_reason(backend: Any) -> str | None:
    """``backend.unavailable_reason()``, remembered for the rest of the process."""
    try:
        return availability[backend.name]
    except KeyError:
        reason = availability[backend.name] = backend.unavailable_reason()
        return reason


def forget_answers() -> None:
    """Drop cached answers and the plans built on them (new measurements were stored)."""
    global plan_cache
    answers.clear()
    plan_cache = PlanCache()  # after the answers: a plan made from an old answer goes to the old cache


def reset() -> None:
    """Forget everything: answers, verdicts, availability, and close the databases."""
    with lock:
        forget_answers()
        verdicts.clear()
        availability.clear()
        for (pid, _directory), opened in _stores.items():
            if pid == os.getpid():
                opened.close()
        _stores.clear()
