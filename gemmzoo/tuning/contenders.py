"""What ``gemmzoo tune --recorded`` measures, in what order, and within what time: pure rules.

- **Problems** (:func:`gathered`): each recorded problem once (the same product and layout met by
  several call sites, or by a forward and a backward product of one shape, is one problem),
  ordered by *weight*: how often it was recorded times its FLOPs, so a time budget is spent
  on the products that carry the most work first.
- **Candidates** (:func:`contends`, :func:`candidate_order`): a backend is timed at a problem
  only where it can be the fastest. A backend says where that is with
  :attr:`gemmzoo.Backend.contends` (routes in the prior's keys, :mod:`gemmzoo.tuning.prior`,
  plus ``max_m``: A has at most that many rows, and ``max_mn``: C has at most that many
  elements), and why it cannot win elsewhere (``why``: what it runs there, say another
  backend's plan). A backend that declares nothing contends everywhere. The baseline (the
  caller's own library) and the current pick are always timed, first, so every later candidate
  has a rival to be settled against.
- **Rivals** (:func:`rival_s`): the time a candidate's samples must stay above to be settled
  slower (:class:`gemmzoo.measure.StoppingRule`'s ``settle_above_s``): the leader's time plus
  its uncertainty and the tie rule's floor, so a settled candidate never ties with the leader.
- **Searching harder** (:func:`escalates`): a backend whose tuning run searches harder than a call
  (:meth:`gemmzoo.Backend.for_tuning`, Triton's full autotune) is timed as a call runs it first,
  and searched only where that comes within :data:`ESCALATE_RATIO` of the leader.
- **Time** (:class:`Budget`): one deadline for the whole run; a problem is started only while
  time is left, and what is left over is said.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gemmzoo.measure.ties import TIE_FLOOR
from gemmzoo.problems.grids import GridPoint
from gemmzoo.tuning.prior import ROUTE_KEYS, route_matches

#: Keys a ``contends`` route may have beyond the prior's.
CONTEND_KEYS = ROUTE_KEYS | {"max_m", "max_mn", "why"}
#: A backend whose tuning run searches harder than a call is searched only where its call's
#: timing is within this factor of the leader: a fuller search of the same kernels gains less.
ESCALATE_RATIO = 1.25
#: The default of ``gemmzoo tune --recorded --time-budget``, in seconds: with Python's start and
#: the problem under way when it runs out, the command stays within two minutes.
DEFAULT_TIME_BUDGET_S = 80.0
#: A search (Triton's full autotune: every config compiled and timed) starts only with this much
#: of the budget left (at most half the budget): the first one compiles every config.
SEARCH_RESERVE_S = 30.0


@dataclass(frozen=True)
class Recorded:
    """One recorded problem on one device: how often it was recorded (``seen``, summed over
    every row that named it) and its weight, ``seen`` times its FLOPs."""

    point: GridPoint
    device: str
    seen: int

    @property
    def weight(self) -> float:
        return float(self.seen) * self.point.flops

    @property
    def key(self) -> tuple[Any, ...]:
        p = self.point
        return (p.m, p.n, p.k, p.dtype, p.layout, self.device)


def gathered(rows: Iterable[tuple[GridPoint, str, int]]) -> list[Recorded]:
    """``(point, device, seen)`` rows as one :class:`Recorded` per problem (duplicates' counts
    summed), heaviest first; equal weights keep their first order."""
    found: dict[tuple[Any, ...], Recorded] = {}
    for point, device, seen in rows:
        one = Recorded(point, device, max(1, int(seen)))
        if one.key in found:
            one = Recorded(point, device, found[one.key].seen + one.seen)
        found[one.key] = one
    return sorted(found.values(), key=lambda r: -r.weight)


def work_share(part: Sequence[Recorded], whole: Sequence[Recorded]) -> float:
    """The fraction of ``whole``'s weight that ``part`` carries (0 for no weight at all)."""
    total = sum(r.weight for r in whole)
    return sum(r.weight for r in part) / total if total > 0 else 0.0


def contends(backend: Any, point: GridPoint, device: str, arch: str, library: str | None) -> str | None:
    """``None`` when ``backend`` can be the fastest at ``point`` (a route of its
    :attr:`~gemmzoo.Backend.contends` matches, or it declares none); otherwise why not, in words.
    A declaration that cannot be read, or a route with keys this gemmzoo does not know, makes the
    backend contend (it is timed rather than wrongly passed over)."""
    from gemmzoo.contract.backend import declared

    try:
        routes = tuple(declared(backend, "contends") or ())
    except Exception:
        return None
    if not routes:
        return None
    reason = ""
    for rule in routes:
        if not isinstance(rule, Mapping) or not set(rule) <= CONTEND_KEYS:
            return None
        if matches(rule, point, device, arch, library):
            return None
        reason = reason or str(rule.get("why", ""))
    return reason or "its declared routes (contends) do not match this problem"


def known_arch(device: str) -> str:
    """:func:`gemmzoo.tuning.prior.device_arch` of ``device``, or ``""`` where it cannot be told
    (a route keyed on the architecture then matches nothing)."""
    from gemmzoo.tuning.prior import device_arch

    try:
        return device_arch(device)
    except Exception:
        return ""


def matches(rule: Mapping[str, Any], point: GridPoint, device: str, arch: str, library: str | None) -> bool:
    """Whether one ``contends`` route matches ``point``: the prior's keys as the prior reads
    them, ``max_m`` and ``max_mn`` as limits on M and M·N (a limit that is not a number never
    matches)."""
    for key, size in (("max_m", point.m), ("max_mn", point.m * point.n)):
        if key in rule:
            limit = rule[key]
            if isinstance(limit, bool) or not isinstance(limit, (int, float)) or size > limit:
                return False
    common = {key: value for key, value in rule.items() if key in ROUTE_KEYS}
    shape = (point.m, point.n, point.k)
    return route_matches(common, shape, point.dtype, point.layout, device, arch, library)


def candidate_order(names: Sequence[str], first: Sequence[str | None]) -> list[str]:
    """``names`` with those of ``first`` (the baseline, the current pick) that are among them at
    the front, in that order; the others keep theirs."""
    front = [name for name in dict.fromkeys(first) if name is not None and name in names]
    return front + [name for name in names if name not in front]


def rival_s(caller_s: float, spread_s: float) -> float:
    """The time a candidate must be slower than, beyond doubt, to be settled against a leader of
    caller time ``caller_s`` and interquartile range ``spread_s``: the leader's median plus half
    its IQR (a stored row's uncertainty) plus the tie rule's floor, so the two can never tie."""
    return caller_s + spread_s / 2 + TIE_FLOOR * caller_s


def escalates(call_s: float | None, leader_s: float | None) -> bool:
    """Whether a backend timed as a call runs it (``call_s``) is searched harder too: where it
    came within :data:`ESCALATE_RATIO` of the leader (``leader_s``), or where either is unknown."""
    if call_s is None or leader_s is None or leader_s <= 0:
        return True
    return call_s <= ESCALATE_RATIO * leader_s


@dataclass
class Budget:
    """One deadline for a whole run: ``seconds`` from when it is made (``clock`` replaceable for
    tests). A problem starts only while :meth:`left` is positive."""

    seconds: float
    clock: Callable[[], float] = time.perf_counter
    started: float = field(default=0.0, init=False)

    def __post_init__(self) -> None:
        if not self.seconds > 0:
            raise ValueError(f"a time budget must be positive, not {self.seconds!r} seconds")
        self.started = self.clock()

    def left(self) -> float:
        """Seconds left (negative once overrun)."""
        return self.started + self.seconds - self.clock()

    def spent(self) -> float:
        return self.clock() - self.started

    @property
    def over(self) -> bool:
        return self.left() <= 0
