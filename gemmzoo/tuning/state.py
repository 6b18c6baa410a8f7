"""The current session's tuning state, under the names the tuner has always used.

Everything here belongs to :func:`gemmzoo.session.current` (see :mod:`gemmzoo.session`):
``state.store()`` is ``current().store()``, ``state.answers`` is ``current().answers``, and so on.
This module keeps nothing of its own.
"""

from __future__ import annotations

from typing import Any

from gemmzoo.session import current

_ATTRIBUTES = ("lock", "answers", "plan_cache", "verdicts")


def __getattr__(name: str) -> Any:
    if name in _ATTRIBUTES:
        return getattr(current(), name)
    raise AttributeError(f"module 'gemmzoo.tuning.state' has no attribute {name!r}")


def store() -> Any:
    """The current session's tuning database (:meth:`gemmzoo.Session.store`)."""
    return current().store()


def scratch() -> Any:
    """The current session's in-memory store for answers given while the database is locked."""
    return current().scratch()


def warn_busy(why: str) -> None:
    """One warning per session: answering without the database (:meth:`gemmzoo.Session.warn_busy`)."""
    current().warn_busy(why)


def unavailable_reason(backend: Any) -> str | None:
    """``backend.unavailable_reason()``, guarded and remembered for the rest of the process
    (:func:`gemmzoo.plugins.registry.unavailable_reason`: never raises, never hangs), the members checked
    against the current session's registry."""
    return current().unavailable_reason(backend)


def forget_answers() -> None:
    """Drop the current session's answers and the plans built on them."""
    current().forget_answers()
