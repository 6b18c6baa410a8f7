"""The one rule for deciding that two backends tie, used by ``best_backend``
(:func:`gemmzoo.tuning.select.rank`) and by ``gemmzoo bench``'s best column.

Each backend's time is an :class:`Estimate`: its median and the half-width of its uncertainty
(the median's confidence interval where the samples gave one, else half the interquartile
range). Two backends tie only when

- their intervals overlap: the slower median minus its half-width is at most the faster median
  plus its half-width, each interval built from that backend's own noise (the median's
  confidence interval, not the spread of the samples: a noisy backend's spread says little about
  where its median lies); medians within :data:`TIE_FLOOR` of the faster one overlap however
  tight the intervals, since two runs of one backend drift by about that much; and
- neither median is more than :data:`TIE_MAX_RATIO` times the other: a backend that much slower
  is never a tie, however noisy the measurements.

A measurement whose noise target was not met is *noisy*: :func:`rank` leaves it out of the
winner and the ties, and says so, rather than rank it silently.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

TIE_FLOOR = 0.01
"""Medians closer than this fraction of the faster one always overlap (run-to-run drift)."""
TIE_MAX_RATIO = 1.2
"""Medians further apart than this ratio never tie."""


@dataclass(frozen=True)
class Estimate:
    """A backend's time per call for ranking: the median, the half-width of its uncertainty, and
    whether the measurement met its noise target (``False``: noisy)."""

    name: str
    median_s: float
    half_width_s: float
    converged: bool = True

    @property
    def low_s(self) -> float:
        return self.median_s - self.half_width_s

    @property
    def high_s(self) -> float:
        return self.median_s + self.half_width_s


def tied(a: Estimate, b: Estimate) -> bool:
    """Whether ``a`` and ``b`` are within both their noises of each other (see the module
    docstring); symmetric."""
    fast, slow = (a, b) if a.median_s <= b.median_s else (b, a)
    if fast.median_s <= 0:
        return slow.median_s <= 0
    if slow.median_s > TIE_MAX_RATIO * fast.median_s:
        return False
    reach = max(fast.half_width_s + slow.half_width_s, TIE_FLOOR * fast.median_s)
    return slow.median_s - fast.median_s <= reach


@dataclass(frozen=True)
class Ranking:
    """The answer of :func:`rank`: the winner, every estimate fastest first, the names tied with
    the fastest (the winner among them), and the noisy names left out."""

    winner: str | None
    ordered: tuple[Estimate, ...]
    tied: tuple[str, ...]
    noisy: tuple[str, ...]


def rank(estimates: Sequence[Estimate], preference: Callable[[str], object] = str) -> Ranking:
    """Rank ``estimates``: the fastest converged one and those :func:`tied` with it, the first
    of those by ``preference`` winning (a stable rule, so re-ranking equals does not flip). When
    every estimate is noisy they are ranked among themselves, and all are reported noisy."""
    ordered = tuple(sorted(estimates, key=lambda e: (e.median_s, e.name)))
    if not ordered:
        return Ranking(None, (), (), ())
    noisy = tuple(e.name for e in ordered if not e.converged)
    pool = [e for e in ordered if e.converged] or list(ordered)
    fastest = pool[0]
    tied_names = tuple(sorted((e.name for e in pool if tied(fastest, e)), key=preference))
    return Ranking(tied_names[0], ordered, tied_names, noisy)
