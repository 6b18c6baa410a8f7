"""``gemmzoo.Session``: the configuration, tuning store, verdicts and caches of one user of gemmzoo.

Everything gemmzoo remembers between calls lives on a session: its :class:`~gemmzoo.config.Config`
(read once), the tuning database it opened, the conformance verdicts and ``best_backend``
answers it has seen, ``gemmzoo.matmul``'s plans, and the in-memory store used while the database
is locked. The module functions (``gemmzoo.matmul``, ``best_backend``, the CLI) use the *current*
session: the one a ``with Session(...):`` block scopes (a context variable, so threads and asyncio
tasks each see their own), else a default session made on first use from the environment.

The tuning database's rows of this machine are read once, in one transaction, and held in memory
(:class:`gemmzoo.tuning.known.Known`): a problem whose shape is stored is chosen from memory. What
this process writes (``tune``, ``check``, a measured first answer) goes to the file and to memory
together. What another process writes is seen at this session's next problem new to it, when
the database's ``data_version`` has moved (asked once per such problem, never per call); plans
and answers already made stay until the session is closed or forgets its answers.

This module is the public face, above the call path: :class:`Session` is a
:class:`~gemmzoo.tuning.state.SessionState` (where its state and the current session are kept, for
the modules below to read) with ``matmul`` and ``best_backend``, which go through the dispatch and
the choice. The default session is a ``SessionState``: ``gemmzoo.matmul`` and
``gemmzoo.best_backend`` are its two calls.

What stays per process, by nature: the registry of loaded plugins (imported modules are the
process's) and what it remembers of each backend's availability, and the watchdog's threads and
quarantines (an abandoned thread runs on whatever session started it); the whole list is in
docs/architecture.md ("What stays per process").
"""

from __future__ import annotations

from typing import Any

from gemmzoo.config import _current, _default, _default_lock
from gemmzoo.tuning.state import Prior, SessionState, active, current, default, replace_default

__all__ = ["Prior", "Session", "SessionState", "_current", "_default", "_default_lock", "active", "current",
           "default", "replace_default"]


class Session(SessionState):
    """One user's gemmzoo: configuration, store, verdicts and caches
    (:class:`~gemmzoo.tuning.state.SessionState`, which documents the keywords), and the public
    functions called in it.

    ``with session:`` makes it the current session inside the block (nested blocks stack);
    ``session.matmul``, ``best_backend``, ``backends`` and ``get_backend`` do the same for one
    call. :meth:`close` closes the databases it opened.
    """

    _shown_as = "gemmzoo.Session"

    def matmul(self, a: Any, b: Any, backend: Any = None, **options: Any) -> Any:
        """:func:`gemmzoo.matmul` in this session."""
        from gemmzoo.dispatch.matmul import matmul

        with self:
            return matmul(a, b, backend, **options)

    def best_backend(self, shape: Any, dtype: str = "float32", device: str | None = None,
                     **options: Any) -> Any:
        """:func:`gemmzoo.best_backend` in this session."""
        from gemmzoo.tuning.select import best_backend

        with self:
            return best_backend(shape, dtype, device, **options)
