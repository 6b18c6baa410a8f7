"""Fresh gemmzoo sessions for tests: each test gets its own configuration, store and caches
instead of resetting or patching module state."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from gemmzoo.plugins import watchdog
from gemmzoo.plugins.registry import forget_availability
from gemmzoo.session import Session, _current, current

# Sessions made current by reconfigure(), closed when the test ends (see `isolated`).
_opened: list[Session] = []


def forget_process_memory() -> None:
    """Forget what the process remembers outside sessions: backends' availability and the
    watchdog's quarantines (the registry's backends are the process's)."""
    forget_availability()
    watchdog.forget()


@contextlib.contextmanager
def scoped(**overrides: Any) -> Iterator[Session]:
    """A new session read from the environment now (``overrides`` on top; ``registry=`` a
    registry of the test's own backends), current inside the block and closed after it."""
    forget_process_memory()
    session = Session(**overrides)
    try:
        with session:
            yield session
    finally:
        session.close()
        forget_process_memory()


def restart(**options: Any) -> Session:
    """What a new process would find: the current session closed (its answers, plans, verdicts
    and database connection gone), and a new one read from the environment now made current
    for the rest of the test (:func:`reconfigure`, ``options`` passed on), availability and
    quarantines forgotten."""
    current().close()
    return reconfigure(**options)


def reconfigure(**overrides: Any) -> Session:
    """A new session read from the environment now (``overrides`` on top; ``registry=`` a
    registry of the test's own backends, else the current session's), current for the rest of
    the test: for a test that changes a variable or its backends and then asks gemmzoo."""
    forget_process_memory()
    session = Session(**overrides)
    _opened.append(session)
    _current.set(session)
    return session


@contextlib.contextmanager
def isolated() -> Iterator[None]:
    """Around each test (conftest): whatever session the test made current is current no more
    after it, and those :func:`reconfigure` made are closed."""
    token = _current.set(current())
    try:
        yield
    finally:
        _current.reset(token)
        while _opened:
            _opened.pop().close()
