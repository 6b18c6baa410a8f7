"""Per-process state of the tuner: open databases, cached answers, verdicts and availability."""

from __future__ import annotations

import os
import threading
import warnings
from typing import Any

from gemmzoo import watchdog
from gemmzoo.plan_cache import PlanCache
from gemmzoo.registry import forget_availability
from gemmzoo.registry import unavailable_reason as guarded_reason
from gemmzoo.tuning.db import TuningCacheWarning, TuningStore, default_cache_dir, open_store

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
"""Unused: availability is remembered by :func:`gemmzoo.registry.unavailable_reason`."""

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


_scratch: dict[int, TuningStore] = {}
_busy_warned: set[str] = set()


def scratch() -> TuningStore:
    """An in-memory store of this process, for answers given while the database is locked."""
    with lock:
        found = _scratch.get(os.getpid())
        if found is None:
            found = _scratch[os.getpid()] = TuningStore(None)
        return found


def warn_busy(why: str) -> None:
    """One :class:`TuningCacheWarning` per cache directory: answering without the database."""
    directory = str(default_cache_dir())
    if directory in _busy_warned:
        return
    _busy_warned.add(directory)
    warnings.warn(f"{why}; gemmzoo.matmul answered without it rather than wait (the answer is kept "
                  "for this process)", TuningCacheWarning, stacklevel=4)


def unavailable_reason(backend: Any) -> str | None:
    """``backend.unavailable_reason()``, guarded and remembered for the rest of the process
    (:func:`gemmzoo.registry.unavailable_reason`: never raises, never hangs)."""
    return guarded_reason(backend)


def forget_answers() -> None:
    """Drop cached answers and the plans built on them (new measurements were stored)."""
    global plan_cache
    answers.clear()
    plan_cache = PlanCache()  # after the answers: a plan made from an old answer goes to the old cache


def reset() -> None:
    """Forget everything: answers, verdicts, availability, quarantines (:mod:`gemmzoo.watchdog`),
    and close the databases."""
    with lock:
        forget_answers()
        verdicts.clear()
        availability.clear()
        forget_availability()
        watchdog.forget()
        for (pid, _directory), opened in _stores.items():
            if pid == os.getpid():
                opened.close()
        _stores.clear()
        for pid, opened in _scratch.items():
            if pid == os.getpid():
                opened.close()
        _scratch.clear()
        _busy_warned.clear()
