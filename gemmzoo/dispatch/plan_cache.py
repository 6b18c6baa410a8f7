"""The plans ``gemmzoo.matmul`` keeps, by problem (see :mod:`gemmzoo.dispatch.matmul`)."""

from __future__ import annotations

from typing import Any

NO_PLAN: tuple[Any, Any] = ((), None)
"""``(key, plan)`` of no problem: no key equals it."""


class PlanCache:
    """One generation of plans: ``plans`` by problem key, and ``last``, the ``(key, plan)`` of the
    problem met last (looked at before ``plans``: a program that repeats one problem skips hashing
    its key).

    Plans embed ``best_backend``'s answers, so when the answers are dropped the whole cache is
    replaced by a new one (:func:`gemmzoo.tuning.state.forget_answers`), never emptied in place: a
    call that found or made a plan while that happened writes it into the cache it started with,
    which nobody reads any more. ``last`` is one tuple, read and written whole, so threads never
    pair one problem's key with another's plan.
    """

    __slots__ = ("last", "plans")

    #: Plans kept; past that the table starts again (a program that meets thousands of problems
    #: pays the planning again, never unbounded memory).
    MAX_PLANS = 4096

    def __init__(self) -> None:
        self.plans: dict[tuple[Any, ...], Any] = {}
        self.last: tuple[Any, Any] = NO_PLAN

    def keep(self, key: tuple[Any, ...], plan: Any) -> None:
        """Keep ``plan`` for ``key`` and make it the last one met."""
        if len(self.plans) >= self.MAX_PLANS:
            self.plans.clear()
        self.plans[key] = plan
        self.last = key, plan
