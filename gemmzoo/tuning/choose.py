"""Choosing a backend, as a pure function: :func:`choose`.

``choose(problem, measurements, prior, policy)`` takes everything it decides on as values, in
memory: the problem, the timings that rank the candidates (each candidate's stored row at the
problem's shape, or rows carried from the nearest measured shape), the shipped prior's advice
for a problem nothing ranks, and a :class:`RankPolicy` holding the rule's constants. It reads no
database, imports no framework, runs no conformance suite and measures nothing: gathering the
measurements, checking verdicts and probing backends is the first-answer step of
:func:`gemmzoo.tuning.select.explain`, which hands the results in.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gemmzoo.measure import ties

DEFAULT_ORDER = ("torch", "cupy", "numpy", "torch-cpu")
WARM_SPEEDUP_MAX = 3.0
CHECK_GAIN_MIN = 0.03


@dataclass(frozen=True)
class Problem:
    """What is asked: ``shape = (M, N, K)``, the gemmzoo dtype and the device; the operands'
    ``layout``, the caller's array ``library`` (``"numpy"``, ``"torch"``, ``"cupy"``, or ``None``)
    and the ``accuracy`` class the caller accepts (:mod:`gemmzoo.contract.accuracy`), which a prior may
    route by."""

    shape: tuple[int, int, int]
    dtype: str
    device: str
    layout: str = "NN"
    library: str | None = None
    accuracy: str = "componentwise"


@dataclass(frozen=True)
class RankPolicy:
    """The constants of the ranking rule (see :mod:`gemmzoo.tuning.select`): what candidates are
    ranked ``by`` (``"caller"`` or ``"device"`` time), the ``default_order`` that breaks ties and
    orders unmeasured candidates, and ``warm_speedup_max``, how much faster than its L2-flushed
    device time a GEMM may run in a loop whose operands stay in L2 (below the device time divided
    by it, a host time bounds no loop), and ``check_gain_min``: how much faster a backend whose
    conformance suite compiles kernels (:attr:`gemmzoo.Backend.suite_compiles`) and has not run
    here must be than a candidate that needs no such suite, for an answer to wait for that suite
    (short of it, the other answers, and ``gemmzoo check``/``tune`` earn the first its place)."""

    by: str = "caller"
    default_order: tuple[str, ...] = DEFAULT_ORDER
    warm_speedup_max: float = WARM_SPEEDUP_MAX
    check_gain_min: float = CHECK_GAIN_MIN

    def preference(self, name: str) -> tuple[int, str]:
        """Position in :attr:`default_order`, then the name."""
        order = self.default_order
        return (order.index(name) if name in order else len(order)), name


@dataclass(frozen=True)
class Timed:
    """One candidate's stored timing at the shape that decided: the time it was ranked by, its
    IQR, and what that time is (``"device"`` or ``"host"`` time, whichever bounds a call, or
    ``"loop"``: the time per call of timed loops of calls); ``half_width_s``, the
    median's uncertainty where known (else half the IQR stands for it), and ``converged``,
    false for a measurement that missed its noise target (noisy: not ranked with the others)."""

    backend: str
    median_s: float
    spread_s: float
    bound: str = "device"
    half_width_s: float | None = None
    converged: bool = True

    def estimate(self) -> ties.Estimate:
        """This timing as :mod:`gemmzoo.measure.ties` ranks it."""
        width = self.spread_s / 2 if self.half_width_s is None else self.half_width_s
        return ties.Estimate(self.backend, self.median_s, width, self.converged)


@dataclass(frozen=True)
class Measurements:
    """What ranks the candidates: ``timings`` (one per measured candidate; a
    :class:`Timed`), ``rows`` the stored rows at the problem's own shape by
    backend (empty where the timings come from another shape: the host-time rule reads them),
    ``searches_over`` each candidate's declared :attr:`gemmzoo.Backend.searches_over`, ``native``
    the candidates that compute on the caller's own arrays (``None``: no caller's arrays), and
    ``broke`` those whose newest row at this shape is a failure."""

    timings: tuple[Any, ...] = ()
    rows: Mapping[str, Any] = field(default_factory=dict)
    searches_over: Mapping[str, Sequence[str]] = field(default_factory=dict)
    native: Collection[str] | None = None
    broke: Collection[str] = frozenset()


Prior = Callable[[Problem], "str | None"]
"""``prior(problem)``: a backend name for a problem nothing measured ranks, or ``None`` (the
session's hook, :attr:`gemmzoo.Session.prior`; by default the shipped prior,
:func:`gemmzoo.tuning.prior.shipped`)."""


def advice(prior: Prior | None, problem: Problem) -> str | None:
    """``prior(problem)``, where a prior raising or answering something other than a name counts
    as no advice: a prior is advice, and a broken one must not stop an answer."""
    if prior is None:
        return None
    try:
        pick = prior(problem)
    except Exception:
        return None
    return pick if isinstance(pick, str) else None


@dataclass(frozen=True)
class Decision:
    """The choice: ``winner`` (``None`` when nothing measured ranks the candidates), the timings
    fastest first, the names tied with the fastest, and ``order``: without a winner, the
    candidates in the order to try them (the first that passed conformance is the answer)."""

    winner: str | None
    ranking: tuple[Any, ...] = ()
    tied: tuple[str, ...] = ()
    order: tuple[str, ...] = ()


def rank(timings: Sequence[Any], order: Callable[[str], Any]) -> tuple[str, tuple[Any, ...], tuple[str, ...]]:
    """The winner under the tie rule (:func:`gemmzoo.measure.ties.rank`), the timings fastest
    first, and the names tied with the fastest; ``order`` orders the tied ones."""
    # the order's keys taken here, once each: the tie rule sorts by them without calling back up
    keys = {t.backend: order(t.backend) for t in timings}
    ranking = ties.rank([t.estimate() for t in timings], keys.__getitem__)
    ordered = tuple(sorted(timings, key=lambda t: (t.median_s, t.backend)))
    assert ranking.winner is not None, "rank needs at least one timing"
    return ranking.winner, ordered, ranking.tied


def tied_names(measurements: Measurements, policy: RankPolicy) -> tuple[str, ...]:
    """The candidates tied with the fastest, before any tie order (those whose ``native`` the
    caller must know to order them)."""
    return rank(measurements.timings, policy.preference)[2]


def tie_order(measurements: Measurements, policy: RankPolicy) -> Callable[[str], Any]:
    """How backends tied in the ranking are ordered: ranked by caller time, those whose host time
    also ties with the least host time among them first, where that host time can bound a loop of
    calls whose operands stay in L2 (``policy.warm_speedup_max``); then those computing on the
    caller's own arrays; then, at a measured shape, those no tied backend searches over; then the
    policy's preference."""
    rows, native = measurements.rows, measurements.native
    light: set[str] | None = None
    tied = tied_names(measurements, policy)
    searched = {name for one in tied for name in measurements.searches_over.get(one, ()) if name != one} \
        if rows else set()
    if policy.by == "caller":
        hosts = [rows[name] for name in tied if name in rows]
        if len(tied) > 1 and len(hosts) == len(tied) and all(r.host_s is not None for r in hosts):
            estimates = [ties.Estimate(r.backend, float(r.host_s), float(r.host_spread_s or 0.0) / 2)
                         for r in hosts]
            least = min(estimates, key=lambda e: e.median_s)
            device = min(float(r.median_s) for r in hosts)
            if least.median_s * policy.warm_speedup_max >= device:  # host time can bound a warm loop
                light = {e.name for e in estimates if ties.tied(least, e)}

    def order(name: str) -> tuple[bool, bool, bool, tuple[int, str]]:
        return (light is not None and name not in light, native is not None and name not in native,
                name in searched, policy.preference(name))

    return order


def choose(problem: Problem, candidates: Sequence[str], measurements: Measurements,
           prior: Prior | None = None, policy: RankPolicy = RankPolicy()) -> Decision:
    """The backend for ``problem`` among ``candidates`` (names), from ``measurements`` alone.

    With timings, the fastest under the tie rule wins (:func:`tie_order` orders the tied). With
    none, there is no winner and :attr:`Decision.order` lists ``candidates`` to try: those whose
    newest row here is a failure last, those computing on the caller's own arrays first, then
    ``prior``'s pick (``prior(problem)``; none by default; a prior that raises or names no
    candidate counts as none, :func:`advice`), then the policy's preference.
    """
    if measurements.timings:
        winner, ranking, tied = rank(measurements.timings, policy.preference)
        if len(tied) > 1:  # the tie order picks among the tied; alone, the fastest needs none
            winner, ranking, tied = rank(measurements.timings, tie_order(measurements, policy))
        return Decision(winner, ranking, tied)
    pick = advice(prior, problem)
    native, broke = measurements.native, measurements.broke

    def order(name: str) -> tuple[bool, bool, bool, tuple[int, str]]:
        return name in broke, native is not None and name not in native, name != pick, policy.preference(name)

    return Decision(None, order=tuple(sorted(candidates, key=order)))


def contenders(records: Sequence[Any], policy: Any) -> list[int]:
    """Indices of the ``ok`` records (:class:`gemmzoo.tuning.db.Record`) whose loops of calls are
    timed together: those whose device time is within ``policy.ratio`` of the fastest caller time
    (the larger of device and host time: loop times, where records have them, play no part),
    fastest caller time first, at most ``policy.max_contenders``; none when fewer than two qualify
    or the fastest caller time is above ``policy.limit_s`` (a
    :class:`gemmzoo.tuning.tune.LoopPolicy`)."""
    timed = [(float(r.measured_caller_s), float(r.median_s), index) for index, r in enumerate(records)
             if r.status == "ok" and r.median_s is not None]
    if not timed:
        return []
    best = min(caller for caller, _, _ in timed)
    near = sorted((caller, index) for caller, device, index in timed if device <= best * policy.ratio)
    if best > policy.limit_s or len(near) < 2:
        return []
    return [index for _, index in near[:policy.max_contenders]]
