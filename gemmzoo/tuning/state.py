"""The session's state, and the current session: what gemmzoo's modules below the public facade
read of the session.

:class:`SessionState` holds everything gemmzoo remembers between calls (see :mod:`gemmzoo.session`):
the configuration, the registry it sees, the tuning store, verdicts, answers and plans. The public
:class:`gemmzoo.Session` is a ``SessionState`` with the two calls that go through the call path
(``matmul`` and ``best_backend``); it lives above the call path, so that this module imports
nothing of tuning's choice, the dispatch or the facade. :func:`current` is the session of the
innermost ``with Session(...)`` block, else the default session, made here on first use (the
context variable and the default's slot are kept by :mod:`gemmzoo.config`).

The module-level names the tuner has always used name the current session's pieces:
``state.store()`` is ``current().store()``, ``state.answers`` is ``current().answers``, and so on.
This module keeps nothing of its own.
"""

from __future__ import annotations

import contextvars
import os
import threading
import warnings
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from gemmzoo.config import (
    Config,
    _current,
    _default,
    _default_lock,
    active,
    default_session,
    swap_default_session,
)
from gemmzoo.dispatch.plan_cache import CACHE_SIZE, LRUCache, PlanCache

if TYPE_CHECKING:
    from gemmzoo.plugins.registry import Registry
    from gemmzoo.tuning.choose import Problem
    from gemmzoo.tuning.db import TuningStore

__all__ = ["Prior", "SessionState", "_current", "_default", "_default_lock", "active", "current", "default",
           "forget_answers", "replace_default", "scratch", "store", "unavailable_reason", "warn_busy"]

Prior = Callable[["Problem"], str | None]
"""``prior(problem)``: a backend name for a problem nothing measured ranks, or ``None``
(``problem``: a :class:`gemmzoo.tuning.choose.Problem`)."""

S = TypeVar("S", bound="SessionState")


class SessionState:
    """One user's gemmzoo: configuration, store, verdicts and caches (every piece of a
    :class:`gemmzoo.Session` but its two calls through the call path, ``matmul`` and ``best_backend``).

    ``Session()`` reads the environment now (:meth:`Config.from_environ`); ``Session(config)``
    takes a config made elsewhere; keywords override its fields (``Session(tune=False,
    cache_dir=path)``) and are validated (:class:`~gemmzoo.config.ConfigError`). ``registry``
    gives a registry of its own (default: that of the session current where it is made, else the
    process's, loaded from the entry points).

    ``prior`` answers an unmeasured problem: a callable ``prior(problem)`` (a
    :class:`gemmzoo.tuning.choose.Problem`: shape, dtype, device, layout, the caller's array
    library, the accuracy accepted) giving a backend name, or ``None``. With nothing measured at
    or near the problem on its device, the backend it names answers first, once available,
    reachable with the caller's arrays and conforming here (only that backend is probed);
    otherwise it is tried first among the default candidates. Default: the shipped prior
    (:func:`gemmzoo.tuning.prior.shipped`, the routes the backends declare). It must be cheap
    and do no I/O; one that raises counts as no advice.

    ``cache_size`` bounds each per-problem cache (the answers, the plans): past it, the least
    recently used problem is forgotten first and answered or planned again when it comes back
    (default :data:`gemmzoo.dispatch.plan_cache.CACHE_SIZE`).

    ``loops`` says which backends' loops of calls a measurement times and a ranking reads
    (:class:`gemmzoo.tuning.tune.LoopPolicy`; default: its defaults).

    ``with session:`` makes it the current session inside the block (nested blocks stack);
    :meth:`close` closes the databases it opened. The default session (:func:`default`) is one
    of this class: for it, ``gemmzoo.matmul`` and ``gemmzoo.best_backend`` are its two calls.
    """

    _shown_as = "gemmzoo.tuning.state.SessionState"

    def __init__(self, config: Config | None = None, *, registry: Registry | None = None,
                 prior: Prior | None = None, loops: Any = None, cache_size: int = CACHE_SIZE,
                 **overrides: Any) -> None:
        base = Config.from_environ() if config is None else config
        self.config: Config = base.replace(**overrides) if overrides else base
        if registry is None:  # made inside another session's block: the same backends
            outer = _current.get(None)
            registry = outer._registry if outer is not None else None
        self._registry = registry
        self.prior: Prior = _shipped_prior() if prior is None else prior
        self.loops = loops
        self.lock = threading.RLock()
        """Held while a question is answered the slow way, so one session never measures twice at once."""
        self.cache_size = cache_size
        self.answers: LRUCache = LRUCache(cache_size)
        """``best_backend`` answers by (shape, dtype, device, measure, layout, accuracy, by): at most
        ``cache_size``, the least recently used forgotten first."""
        self.plan_cache = PlanCache(cache_size)
        """``gemmzoo.matmul``'s plans; they embed answers, so :meth:`forget_answers` replaces it."""
        self.verdicts: dict[tuple[str, str, str, str], bool] = {}
        """Conformance verdicts by (device fingerprint, versions, backend, dtype)."""
        self.facts: dict[tuple[Any, ...], Any] = {}
        """What was derived once from this session's store and backends, by a key naming it (a
        device's copy bandwidth, a worker's verdicts): forgotten with the answers."""
        # By process id: a child made by fork() must not use its parent's SQLite connection.
        self._stores: dict[int, TuningStore] = {}
        self._scratch: dict[int, TuningStore] = {}
        self._busy_warned = False
        self.warned: set[tuple[str, str]] = set()
        """The (kind, place) of the tuning database warnings already given (each once a session)."""
        self._tokens: list[contextvars.Token[Any]] = []
        self.compiled_build: Any = None
        """What this session knows of the compiled dispatch's background build
        (:class:`gemmzoo.native.background.Watch`, made when first needed unless given before)."""

    def __repr__(self) -> str:
        return f"{self._shown_as}(cache_dir={str(self.config.cache_dir)!r})"

    # Scope -----------------------------------------------------------------------------------

    def __enter__(self: S) -> S:
        self._tokens.append(_current.set(self))
        return self

    def __exit__(self, *exc: object) -> None:
        _current.reset(self._tokens.pop())

    # What it owns ----------------------------------------------------------------------------

    @property
    def registry(self) -> Registry:
        """The backends this session sees: its own registry, else the process's (built on first
        use under this session's plugin settings)."""
        if self._registry is not None:
            return self._registry
        from gemmzoo.plugins.registry import get_registry

        return get_registry(self.config)

    def select(self, names: Sequence[str] | None = None) -> list[Any]:
        """The backends named, else those of this session's ``backends`` (``GEMMZOO_BACKENDS``),
        else all of them (:meth:`Registry.select <gemmzoo.plugins.registry.Registry.select>`)."""
        return self.registry.select(list(names) if names else list(self.config.backends))

    def drift(self, backend: Any) -> str | None:
        """What moved in ``backend``'s name, device or dtypes since this session's registry
        registered it, or ``None`` (:meth:`Registry.drift <gemmzoo.plugins.registry.Registry.drift>`)."""
        return self.registry.drift(backend)

    def unavailable_reason(self, backend: Any) -> str | None:
        """``backend.unavailable_reason()``, guarded and remembered for the process, its members
        checked against this session's registry (:func:`gemmzoo.plugins.registry.unavailable_reason`)."""
        from gemmzoo.plugins.registry import unavailable_reason

        return unavailable_reason(backend, self.registry)

    def store(self) -> TuningStore:
        """The tuning database in ``config.cache_dir``, opened on first use in each process."""
        pid = os.getpid()
        with self.lock:
            found = self._stores.get(pid)
            if found is None:
                from gemmzoo.tuning.db import open_store

                found = self._stores[pid] = open_store(self.config.cache_dir)
            return found

    def scratch(self) -> TuningStore:
        """An in-memory store of this process, for answers given while the database is locked."""
        pid = os.getpid()
        with self.lock:
            found = self._scratch.get(pid)
            if found is None:
                from gemmzoo.tuning.db import TuningStore

                found = self._scratch[pid] = TuningStore(None)
            return found

    def warn_busy(self, why: str) -> None:
        """One :class:`~gemmzoo.tuning.db.TuningCacheWarning` per session: answering without the
        database."""
        if self._busy_warned:
            return
        self._busy_warned = True
        from gemmzoo.tuning.db import TuningCacheWarning

        warnings.warn(f"{why}; gemmzoo.matmul answered without it rather than wait (the answer is kept "
                      "for this process)", TuningCacheWarning, stacklevel=4)

    def forget_answers(self) -> None:
        """Drop cached answers and the plans built on them (new measurements were stored)."""
        self.answers.clear()
        self.facts.clear()
        # After the answers: a plan made from an old answer goes to the old cache, read by nobody.
        self.plan_cache = PlanCache(self.cache_size)

    def close(self) -> None:
        """Close the databases this session opened in this process, and forget its answers and
        verdicts (it can be used again: they reopen on demand)."""
        with self.lock:
            self.forget_answers()
            self.verdicts.clear()
            pid = os.getpid()
            for opened in (self._stores.pop(pid, None), self._scratch.pop(pid, None)):
                if opened is not None:
                    opened.close()
            self._stores.clear()
            self._scratch.clear()
            self._busy_warned = False

    def backends(self) -> list[Any]:
        """Every backend this session sees, available or not, in a stable order."""
        return self.registry.backends()

    def get_backend(self, name: str) -> Any:
        """The backend called ``name`` (an unknown name raises an error listing the known ones)."""
        return self.registry.get(name)


def _shipped_prior() -> Prior:
    from gemmzoo.tuning.prior import shipped

    return shipped


def current() -> SessionState:
    """The current session: the innermost ``with Session(...)`` block's, else the default one."""
    try:
        return _current.get()
    except LookupError:
        return default()


def default() -> SessionState:
    """The default session, made from the environment on first use."""
    return default_session(SessionState)


def replace_default(session: SessionState | None = None) -> SessionState:
    """Make ``session`` (default: a new one read from the environment now) the default session,
    closing the one it replaces; returns it."""
    fresh = SessionState() if session is None else session
    for session_before in swap_default_session(fresh):
        if session_before is not fresh:
            session_before.close()
    return fresh


# The tuner's names for the current session's pieces ----------------------------------------------

_ATTRIBUTES = ("lock", "answers", "plan_cache", "verdicts")


def __getattr__(name: str) -> Any:
    if name in _ATTRIBUTES:
        return getattr(current(), name)
    raise AttributeError(f"module 'gemmzoo.tuning.state' has no attribute {name!r}")


def store() -> Any:
    """The current session's tuning database (:meth:`SessionState.store`)."""
    return current().store()


def scratch() -> Any:
    """The current session's in-memory store for answers given while the database is locked."""
    return current().scratch()


def warn_busy(why: str) -> None:
    """One warning per session: answering without the database (:meth:`SessionState.warn_busy`)."""
    current().warn_busy(why)


def unavailable_reason(backend: Any) -> str | None:
    """``backend.unavailable_reason()``, guarded and remembered for the rest of the process
    (:func:`gemmzoo.plugins.registry.unavailable_reason`: never raises, never hangs), the members checked
    against the current session's registry."""
    return current().unavailable_reason(backend)


def forget_answers() -> None:
    """Drop the current session's answers and the plans built on them."""
    current().forget_answers()
