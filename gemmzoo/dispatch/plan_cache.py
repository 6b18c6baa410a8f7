"""The per-problem caches a session keeps: ``gemmzoo.matmul``'s plans (see :mod:`gemmzoo.dispatch.matmul`)
and ``best_backend``'s answers, each bounded, forgetting the least recently used problem first.

A program that meets many distinct problems (every sequence length of a model, say) pays the
planning or the answer again for a problem it has not met for a while, never memory that grows
with the number of problems it has seen.
"""

from __future__ import annotations

import contextlib
from collections import OrderedDict
from typing import Any

NO_PLAN: tuple[Any, Any] = ((), None)
"""``(key, plan)`` of no problem: no key equals it."""

#: Entries each per-problem cache of a session keeps by default (``Session(cache_size=...)``).
CACHE_SIZE = 4096


def _check_size(size: int) -> int:
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise ValueError(f"cache_size: a whole number of entries, at least 1; got {size!r}")
    return size


def _make_newest(entries: OrderedDict, key: Any, size: int) -> None:  # type: ignore[type-arg]
    """Move ``key`` to the end of ``entries`` and forget the oldest entries past ``size``."""
    with contextlib.suppress(KeyError):  # forgotten by another thread meanwhile
        entries.move_to_end(key)
    while len(entries) > size:
        try:
            entries.popitem(last=False)
        except KeyError:  # emptied by another thread
            break


class LRUCache(OrderedDict):  # type: ignore[type-arg]
    """A mapping of at most ``size`` entries: reading or writing an entry makes it the most recently
    used, and writing past ``size`` forgets the least recently used ones.

    Threads may share one: an entry another thread forgot meanwhile is simply not found.
    """

    def __init__(self, size: int = CACHE_SIZE) -> None:
        super().__init__()
        self.size = _check_size(size)

    def __getitem__(self, key: Any) -> Any:
        value = super().__getitem__(key)
        with contextlib.suppress(KeyError):  # forgotten by another thread meanwhile: still a hit
            self.move_to_end(key)
        return value

    def get(self, key: Any, default: Any = None) -> Any:
        try:
            return self[key]
        except KeyError:
            return default

    def __setitem__(self, key: Any, value: Any) -> None:
        super().__setitem__(key, value)
        _make_newest(self, key, self.size)


class PlanCache:
    """One generation of plans: ``plans`` by problem key (an :class:`OrderedDict`, least recently
    used first, at most ``size`` of them), and ``last``, the ``(key, plan)`` of the problem met
    last (looked at before ``plans``: a program that repeats one problem skips hashing its key).

    Plans embed ``best_backend``'s answers, so when the answers are dropped the whole cache is
    replaced by a new one (:func:`gemmzoo.tuning.state.forget_answers`), never emptied in place: a
    call that found or made a plan while that happened writes it into the cache it started with,
    which nobody reads any more. ``last`` is one tuple, read and written whole, so threads never
    pair one problem's key with another's plan.

    The dispatch is its one reader and writer (:mod:`gemmzoo.dispatch.matmul`): the lookup on the
    hot path is a plain dictionary read followed by ``plans.move_to_end(key)``, and
    :func:`gemmzoo.dispatch.matmul.keep_plan` keeps a new plan, forgetting the least recently used
    plans past ``size``.
    """

    __slots__ = ("last", "plans", "size")

    #: Plans kept by default (the compiled dispatch keeps as many of its own).
    MAX_PLANS = CACHE_SIZE

    def __init__(self, size: int = MAX_PLANS) -> None:
        self.plans: OrderedDict[tuple[Any, ...], Any] = OrderedDict()
        self.last: tuple[Any, Any] = NO_PLAN
        self.size = _check_size(size)
