"""``best_backend``: the fastest conforming backend for a GEMM shape, from the tuning database.

How an answer is found, for ``shape = (M, N, K)``, ``dtype`` and a device:

1. Candidates: registered backends (narrowed by ``GEMMZOO_BACKENDS``) on that device that
   declare ``dtype``, are available, are of an accuracy class the caller accepts (``accuracy``:
   componentwise only by default, see :mod:`gemmzoo.contract.accuracy`), and have passed conformance for
   ``dtype`` *on this machine* (see :mod:`gemmzoo.tuning.tune`; verdicts are never imported).
   With measuring on, a candidate that has no verdict here is timed with the others (step 3) and
   its suite runs only if it is the answer by the rule below among the conforming candidates and
   the timed ones, and no conforming one ties with it (:func:`_checked_winners`); a failure
   passes it over. A winner whose suite compiles kernels (:attr:`gemmzoo.Backend.suite_compiles`)
   is checked only when it beats every candidate needing no such suite by more than
   ``RankPolicy.check_gain_min`` (3%), in loops and call by call alike; short of that, the rule
   is asked again without it.
   Until it passes, its rows rank nothing (``gemmzoo check NAME`` earns the verdict).
2. The latest stored measurement of each candidate for exactly this shape, this device
   fingerprint and the candidate's current library versions. Rows from another device or other
   versions are never used.
3. Candidates with no such row are measured now (when measuring is on; not those whose
   :attr:`gemmzoo.Backend.contends` says they cannot be the fastest at this shape), in about
   :data:`MISS_BUDGET_S` of timing split between them, and stored; the near-fastest of them
   also have loops of calls timed in interleaved rounds
   (:func:`gemmzoo.tuning.tune.measure_records`).
   Results are checked against
   the conformance bound when ``M·N·K <= VERIFY_LIMIT`` (the float64 host reference is then cheap);
   larger shapes rely on the conformance verdict.
4. With measuring off (``measure=False`` or ``GEMMZOO_TUNE=0``), an exact miss is answered from
   the *nearest measured shape*: the smallest Euclidean distance between
   ``(ln M, ln N, ln K)`` vectors (sizes below 1 count as 1), equal distances going to the smaller
   ``(M, N, K)``; the search looks in growing boxes of M, N and K around the shape
   (:data:`NEAR_RADII`), read from an index, so it does not scan the database. Its device times
   are carried to the new shape by the ratio of the two problems' roofline costs
   (:func:`work_ratio`); host times per call are carried as measured, so a backend whose host time
   exceeds its device time at the new shape is ranked there by host time. With nothing
   measured at all, the answer is the first candidate in :data:`DEFAULT_ORDER`, then by name
   (and it says it is an unmeasured default); ``gemmzoo.matmul`` puts the backends that compute
   on the caller's own array library first. A default that has no verdict here has the suite
   run on it first (once per device, versions, backend and dtype); one that fails it is passed
   over.
5. Candidates are ranked by *caller time* (``by="caller"``, the default): what a loop of calls
   achieves. Where the near-fastest backends all had their loops timed in one round, and none
   was measured again since, that is their loops' median time per call (launch path, device work
   and warm caches together, under the same drift of the host); otherwise the larger of the
   median device time (caches flushed) and the median host time per call, so a launch-bound
   backend is ranked by its host time. ``by="device"`` ranks by device time alone.
   The fastest wins, but every candidate within measured noise of the fastest ties with it,
   by the one tie rule of :mod:`gemmzoo.measure.ties`: the two intervals (median ± its
   uncertainty, at least ``TIE_FLOOR`` of the median; a stored row's uncertainty is half its
   IQR) overlap, and the slower median is at most ``TIE_MAX_RATIO`` times the faster (a backend
   that much slower never ties, however noisy). Among tied backends the first in
   :data:`DEFAULT_ORDER` wins, then
   the first by name: a stable rule, so re-tuning does not flip between equals, and vendor
   libraries are preferred when nothing separates them. Two rules come before that order,
   at a measured shape ranked by caller time: the tied backends whose *host* times also tie
   with the least host time among them come first, unless that host time is below the tied
   device time divided by :data:`WARM_SPEEDUP_MAX` (where the L2-flushed device times tie, a
   warm loop of calls can be bound by host time; far below the device time it is not);
   and ``gemmzoo.matmul`` puts the tied backends that compute on the caller's own array library
   first: the others' times were measured on their own arrays, and the caller pays an exchange
   on every call besides. Then, either way, at a measured shape, a tied backend that another
   tied one searches over (:attr:`gemmzoo.Backend.searches_over`) comes after that one.

``device=None`` means ``"cuda"`` when any selected CUDA backend is available, else ``"cpu"``.
Answers are kept in memory per process: a repeated call is a dictionary lookup.

``gemmzoo.matmul`` asks :func:`plan_decision`, which never measures (step 3 is skipped) and records
the problems it had to answer from another shape or the default, for ``gemmzoo tune --recorded``;
it passes over a winner that the caller's arrays would reach only through host copies (one
computing on another library's arrays, such as JAX's), which a call names explicitly instead.
Before step 1 it asks the shipped prior (:mod:`gemmzoo.tuning.prior`) where nothing is measured at
or near the problem on this device; where the prior routes the problem to a backend whose product
is the caller's library's own (``torch`` on torch tensors, ``numpy`` on NumPy arrays:
:attr:`gemmzoo.Backend.library_product`), the answer's source is :data:`LIBRARY` and the call is
that library's own product under the caller's precision switches (no suite runs: nothing of
gemmzoo's computes). It never waits on another process's lock of the database for more than
:data:`LOCK_PATIENCE_S`:
past that it answers as if the database were empty (one warning) and records nothing.
Backends whose ``selectable`` is false (baselines such as ``triton-naive``) are candidates only
when ``GEMMZOO_BACKENDS`` names them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import importlib.util
import math
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from gemmzoo.arrays.libraries import OWN_PRODUCT_NAMES, has_own_product, native_kind, native_kind_known
from gemmzoo.contract.accuracy import COMPONENTWISE, accepts, accuracy_of, check_accuracy
from gemmzoo.contract.backend import declared
from gemmzoo.contract.dtypes import DTYPES, dtype_name
from gemmzoo.errors import BackendUnavailableError, GemmError
from gemmzoo.measure import ties
from gemmzoo.plugins import watchdog
from gemmzoo.plugins.registry import unavailable_reason
from gemmzoo.problems.grids import GridPoint
from gemmzoo.tuning import choose as choosing
from gemmzoo.tuning.choose import Timed
from gemmzoo.tuning.db import Record, TuningStore, TuningStoreBusyError, patience
from gemmzoo.tuning.fingerprint import device_fingerprint, library_versions
from gemmzoo.tuning.state import _current, current
from gemmzoo.tuning.state import _default as _default_session
from gemmzoo.tuning.tune import conformance_verdict, loop_policy, measure_records

MISS_BUDGET_S = 0.3
LOCK_PATIENCE_S = 1.0
RECORD_PATIENCE_S = 0.25
NEAR_RADII: tuple[float | None, ...] = (0.1, 0.25, 1.0, 4.0, 16.0, None)
"""Half-widths, in ln-size units, of the boxes of M, N and K searched in turn for the nearest
measured shape (None: everywhere)."""
VERIFY_LIMIT = 2**28
TIE_FLOOR = ties.TIE_FLOOR
# How much faster than its L2-flushed device time a GEMM may run in a loop whose operands stay in
# L2, and the default order: constants of the rule, as RankPolicy's defaults (gemmzoo.tuning.choose).
WARM_SPEEDUP_MAX = choosing.WARM_SPEEDUP_MAX
DEFAULT_ORDER = choosing.DEFAULT_ORDER


RANK_BY = ("caller", "device")
#: :attr:`Choice.source` of a problem that ``gemmzoo.matmul`` answers with the caller's array
#: library's own product (see :func:`_prior_choice`).
LIBRARY = "library"
_POLICY = choosing.RankPolicy()


@dataclass(frozen=True)
class Choice:
    """An answer and why: ``source`` is ``"database"``, ``"measured now"``, ``"nearest shape"``,
    ``"prior"`` (:mod:`gemmzoo.tuning.prior`), ``"library"`` (the prior's route to a backend whose
    product is the caller's library's own: the call is that library's own product, see
    :attr:`gemmzoo.Backend.library_product`) or ``"default"``;
    ``basis`` the shape whose measurements decided; ``ranking`` fastest first;
    ``tied`` the backends within noise of the fastest (the chosen one among them)."""

    backend: Any
    shape: tuple[int, int, int]
    dtype: str
    device: str
    source: str
    basis: tuple[int, int, int] | None = None
    ranking: tuple[Timed, ...] = ()
    tied: tuple[str, ...] = ()
    note: str = ""
    excluded: dict[str, str] = field(default_factory=dict)
    unchecked: tuple[Timed, ...] = ()
    """Timings taken now of candidates whose conformance suite has not run here (a first answer
    runs the suites of those that could be the answer only), fastest first: shown, never ranked."""
    library_product: str | None = field(init=False, default=None, repr=False, compare=False)
    """The chosen backend's :attr:`gemmzoo.Backend.library_product`: the array library whose own
    product its product is (``None``: none, or a backend that cannot say), read once here."""

    def __post_init__(self) -> None:
        try:
            product = declared(self.backend, "library_product")
        except Exception:  # a plugin's broken property: its product is its own
            product = None
        object.__setattr__(self, "library_product", product)

    @property
    def timing(self) -> Timed | None:
        """The chosen backend's timing, when measured."""
        return next((t for t in self.ranking if t.backend == self.backend.name), None)

    @property
    def runner_up(self) -> Timed | None:
        """The fastest measured backend other than the chosen one."""
        return next((t for t in self.ranking if t.backend != self.backend.name), None)

    @property
    def tie(self) -> bool:
        """Whether another backend is within measured noise of the fastest."""
        return len(self.tied) > 1


def measuring_enabled(measure: bool | None) -> bool:
    """``measure`` when given, else the current session's ``tune`` (false when ``GEMMZOO_TUNE``
    is 0/false/no/off)."""
    if measure is not None:
        return bool(measure)
    return current().config.tune


def rank(timings: list[Timed], order: Callable[[str], Any] | None = None
         ) -> tuple[str, tuple[Timed, ...], tuple[str, ...]]:
    """The winner under the tie rule (:func:`gemmzoo.measure.ties.rank`), the timings fastest
    first, and the names tied with the fastest; ``order`` (default :func:`preference`) orders
    the tied ones."""
    return choosing.rank(timings, order or _POLICY.preference)


def preference(name: str) -> tuple[int, str]:
    """The tie-break and default order: position in :data:`DEFAULT_ORDER`, then the name."""
    return _POLICY.preference(name)


def log_distance(a: tuple[int, int, int], b: tuple[int, int, int]) -> float:
    """Euclidean distance between shapes in log space: ``|ln a - ln b|`` over M, N, K."""
    return math.sqrt(sum((math.log(max(x, 1)) - math.log(max(y, 1))) ** 2 for x, y in zip(a, b, strict=True)))


def _shape(shape: Any) -> tuple[int, int, int]:
    try:
        m, n, k = (int(x) for x in shape)
    except (TypeError, ValueError):
        raise ValueError(f"shape must be (M, N, K), three non-negative integers; got {shape!r}") from None
    if min(m, n, k) < 0:
        raise ValueError(f"shape must be (M, N, K), three non-negative integers; got {(m, n, k)}")
    if max(m, n, k) > MAX_DIMENSION:  # past what a database row, or any array library, holds
        raise ValueError(f"shape {m}x{n}x{k}: each of M, N and K must be at most {MAX_DIMENSION}")
    return m, n, k


#: The largest M, N or K a shape may have (a 32-bit signed size, as result files allow).
MAX_DIMENSION = 2**31 - 1


def default_device(selected: list[Any]) -> str:
    """``"cuda"`` when any of ``selected`` is an available CUDA backend, else ``"cpu"``."""
    cuda = any(b.device == "cuda" and unavailable_reason(b) is None for b in selected)
    return "cuda" if cuda else "cpu"


def _compiles(backend: Any) -> bool:
    """Whether ``backend`` compiles each new problem (:attr:`gemmzoo.Backend.compiles_per_problem`);
    a plugin whose attribute cannot be read counts as one that does not."""
    try:
        return declared(backend, "compiles_per_problem") is True
    except Exception:
        return False


def _candidates(dtype: str, device: str | None, accuracy: str = COMPONENTWISE,
                defer: Callable[[Any], bool] | None = None
                ) -> tuple[list[Any], str, dict[str, str], list[Any]]:
    """The available candidates for ``dtype`` on ``device``, the device, what is excluded and why,
    and the backends ``defer(backend)`` held back before their availability was asked
    (which can import their framework): the caller asks it only where it needs to."""
    session = current()
    named = set(session.config.backends)
    selected = session.registry.select(session.config.backends or None)
    device = device or default_device(selected)
    if device not in ("cpu", "cuda"):
        raise ValueError(f"device must be 'cpu', 'cuda' or None; got {device!r}")
    excluded: dict[str, str] = {}
    candidates: list[Any] = []
    deferred: list[Any] = []
    for backend in selected:
        if backend.device != device or dtype not in backend.dtypes:
            continue
        if not declared(backend, "selectable") and backend.name not in named:
            excluded[backend.name] = "a baseline for comparison: a candidate only when named"
            continue
        if not accepts(accuracy, accuracy_of(backend)):
            excluded[backend.name] = f"{accuracy_of(backend)} accuracy, not accepted (accuracy={accuracy!r})"
            continue
        if defer is not None and not _lacks_a_requirement(backend) and defer(backend):
            deferred.append(backend)
            continue
        reason = unavailable_reason(backend)
        if reason is None:
            candidates.append(backend)
        else:
            excluded[backend.name] = f"unavailable: {reason}"
    if not candidates and not deferred:
        why = "; ".join(f"{name}: {text}" for name, text in excluded.items()) or "none declares it"
        raise BackendUnavailableError(f"no available backend computes {dtype} on {device} ({why})")
    return candidates, device, excluded, deferred


def _lacks_a_requirement(backend: Any) -> bool:
    """Whether a module ``backend`` declares it requires is not installed (told without importing
    anything; its availability then says so, with the install hint, at no cost)."""
    try:
        return any(importlib.util.find_spec(name) is None for name in declared(backend, "requires") or ())
    except Exception:  # a malformed declaration or module name: asking the backend says what is wrong
        return True


def _without_pass(store: TuningStore, dtype: str, measuring: bool, backend: Any) -> bool:
    """Whether ``backend`` has no passing verdict for ``dtype`` here (asked of the store only) and,
    when ``measuring``, compiles each new problem."""
    if measuring and not _compiles(backend):
        return False
    return conformance_verdict(store, backend, dtype, run=False) is not True


def _latest(records: list[Record], versions: dict[str, str]) -> dict[str, Record]:
    """The newest row of each candidate whose versions match (records come oldest first)."""
    latest: dict[str, Record] = {}
    for record in records:
        if versions.get(record.backend) == record.versions:
            latest[record.backend] = record
    return latest


def _timed(record: Record, by: str, loops: bool = False) -> Timed:
    if loops and record.loop_s is not None:
        return Timed(record.backend, float(record.loop_s), float(record.loop_spread_s or 0.0), "loop")
    host = record.host_s
    if by == "caller" and host is not None and host > float(record.median_s):  # type: ignore[arg-type]
        return Timed(record.backend, float(host), float(record.host_spread_s or 0.0), "host")
    return Timed(record.backend, float(record.median_s), float(record.spread_s or 0.0))  # type: ignore[arg-type]


def _loops_comparable(rows: list[Record], loops: Any) -> bool:
    """Whether the loop times among ``rows`` (one per backend) rank against each other: every
    contender among them (:func:`gemmzoo.tuning.tune.contenders`) has one, they come from one
    round of loops (one ``created``: see :func:`gemmzoo.tuning.tune.measure_records`), and no
    row is newer than that round (a backend measured again since has no loop time beside
    theirs)."""
    near = [rows[index] for index in choosing.contenders(rows, loops)]
    looped = {r.created for r in rows if r.loop_s is not None}
    return (bool(near) and all(r.loop_s is not None for r in near) and len(looped) == 1
            and max(r.created for r in rows) <= looped.pop())


def _timings(latest: dict[str, Record], by: str, loops: Any) -> list[Timed]:
    """The timings of the ``ok`` rows, by loop time where the contenders' loops (``loops``: a
    :class:`gemmzoo.tuning.tune.LoopPolicy`) rank against each other."""
    rows = [r for r in latest.values() if r.status == "ok" and r.median_s is not None]
    looped = by == "caller" and _loops_comparable(rows, loops)
    return [_timed(r, by, looped) for r in rows]


def _box(shape: tuple[int, int, int], radius: float | None) -> Any:
    """Inclusive integer ranges of M, N and K holding every size within ``radius`` of ``shape``'s
    in ln-size (sizes below 1 count as 1)."""
    if radius is None:
        return None
    spread = math.exp(radius)
    return tuple((max(1, math.floor(max(x, 1) / spread)), math.ceil(max(x, 1) * spread)) for x in shape)


#: Flops per byte at which a GEMM's compute and memory traffic take equal time (the roofline's
#: ridge point), by device, for :func:`work_ratio`: of the order of a current data-centre GPU's
#: datasheet fp16 peak over its memory bandwidth on CUDA, a server CPU's on the host. Only the ratio of two
#: problems' costs is used, so a rough ridge moves the answer only near the crossover.
RIDGE_FLOPS_PER_BYTE = {"cuda": 300.0, "cpu": 30.0}


def work_ratio(new: tuple[int, int, int], basis: tuple[int, int, int], dtype: str, device: str) -> float:
    """How much longer a GEMM of shape ``new`` takes on the device than one of shape ``basis``,
    by the roofline: each costs ``max(flops / ridge, bytes moved)``."""
    from gemmzoo.measure.roofline import bytes_moved

    ridge = RIDGE_FLOPS_PER_BYTE.get(device, RIDGE_FLOPS_PER_BYTE["cpu"])

    def cost(shape: tuple[int, int, int]) -> float:
        m, n, k = shape
        return max(2.0 * m * n * k / ridge, float(bytes_moved(GridPoint(m, n, k, dtype))), 1.0)

    return cost(new) / cost(basis)


def _carried(record: Record, scale: float, by: str) -> Timed:
    """``record``'s timing carried to a shape ``scale`` times its work: the device time scales,
    the host time per call does not, and ranking by caller time takes the larger of the two."""
    device_s = float(record.median_s) * scale  # type: ignore[arg-type]
    host = record.host_s
    if by == "caller" and host is not None and host > device_s:
        return Timed(record.backend, float(host), float(record.host_spread_s or 0.0), "host")
    return Timed(record.backend, device_s, float(record.spread_s or 0.0) * scale)


def _nearest(store: Any, fingerprint: str, dtype: str, layout: str, versions: dict[str, str],
             shape: tuple[int, int, int], by: str = "caller",
             device: str = "cpu") -> tuple[tuple[int, int, int], list[Timed]] | None:
    """The measured shape nearest to ``shape`` (log distance) at which a candidate's newest row
    is a timing, searched in the growing boxes of :data:`NEAR_RADII`, and its timings carried to
    ``shape`` (see :func:`_carried`): a backend whose host time exceeds its device time at
    ``shape`` is ranked by its host time, whatever it won by at the measured shape."""
    tried: set[tuple[int, int, int]] = set()
    for radius in NEAR_RADII:
        box = _box(shape, radius)
        found: set[tuple[int, int, int]] = set()
        for name, version in versions.items():
            found.update(store.shapes_near(fingerprint, dtype, layout, name, version, box))
        for near in sorted(found - tried, key=lambda s: (log_distance(s, shape), s)):
            if radius is not None and log_distance(near, shape) > radius:
                break  # a shape outside the next box may be nearer
            tried.add(near)
            ok = [r for r in _latest(store.records(fingerprint, dtype, layout, near), versions).values()
                  if r.status == "ok" and r.median_s is not None]
            if ok:
                scale = work_ratio(shape, near, dtype, device)
                return near, [_carried(r, scale, by) for r in ok]
    return None


def explain(shape: Any, dtype: str = "float32", device: str | None = None, *,
            measure: bool | None = None, layout: str = "NN",
            native: Callable[[Any], bool] | None = None, accuracy: str = COMPONENTWISE,
            by: str = "caller", store: TuningStore | None = None,
            reachable: Callable[[Any], bool] | None = None, library: str | None = None) -> Choice:
    """Answer ``best_backend``'s question the slow way, and say why (no in-memory cache).

    ``native(backend)`` says whether a backend computes on the caller's own arrays; when nothing
    is measured, such backends come first in the default order (no conversions for nothing).
    ``by`` is what candidates are ranked by: ``"caller"`` or ``"device"`` time. ``store`` is the
    database to answer from (default: this process's, :func:`gemmzoo.tuning.state.store`).
    ``reachable(backend)`` says whether the caller's arrays reach a backend without host copies:
    one that they do not is never the answer (asked of the winner only, then of the next).
    ``library`` names the caller's array library, for the shipped prior (:mod:`gemmzoo.tuning.prior`),
    which answers a problem with nothing measured on this device before any other backend is probed.
    """
    m, n, k = shape = _shape(shape)
    dtype = dtype_name(dtype)
    if by not in RANK_BY:
        raise ValueError(f"by must be one of {', '.join(RANK_BY)}; got {by!r}")
    if dtype not in DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}; known: {', '.join(DTYPES)}")
    measuring = measuring_enabled(measure) and min(shape) > 0  # an empty product has nothing to time
    session = current()
    store = session.store() if store is None else store
    # One answer reads the store many times: from memory, the database asked once whether another
    # process wrote since (TuningStore.held). When measuring, the caller's own work comes next: no
    # idle worker thread is kept past the answer (see watchdog; a suite run alone ends its own).
    with session.lock, store.held(), watchdog.idle_workers_ended() if measuring else contextlib.nullcontext():
        routed = None if measuring or device is None else _prior_choice(
            choosing.Problem(shape, dtype, device, layout, library, accuracy), store, native, reachable)
        if routed is not None:
            return routed
        # A backend that ranks nothing here is not asked its availability, which can import its
        # framework, unless the unmeasured default reaches it: not measuring, one with no passing
        # verdict here; measuring, one that compiles each new problem and has none (neither its
        # suite nor its timings run for a first answer).
        defer = functools.partial(_without_pass, store, dtype, measuring)
        candidates, device, excluded, deferred = _candidates(dtype, device, check_accuracy(accuracy), defer)
        # Measuring, a candidate with no verdict here is timed first (each timed result judged
        # at this shape) and its suite runs only when it would be the answer (_checked_winners).
        conforming, unchecked, provisional = [], [], []
        for backend in deferred + candidates:
            verdict = conformance_verdict(store, backend, dtype, run=False)
            if verdict is False:
                excluded[backend.name] = _failed(backend.name, dtype)
            elif verdict is None and measuring and not _compiles(backend):
                provisional.append(backend)
            elif verdict is None:
                unchecked.append(backend)
            else:
                conforming.append(backend)
        if not conforming and not unchecked and not provisional:
            raise _none_conforms(dtype, device, excluded)
        for backend in unchecked:
            if measuring and _compiles(backend):
                excluded[backend.name] = (f"compiles each new problem: its suite and timings are not run "
                                          f"for a first answer (gemmzoo tune --shape {m}x{n}x{k} runs them)")
            else:
                excluded[backend.name] = (f"conformance for {dtype} not yet run on this machine: its stored "
                                          f"rows rank nothing until it passes (gemmzoo check {backend.name})")
        by_name = {b.name: b for b in conforming}
        registry = session.registry
        versions = {name: library_versions(name, registry) for name in by_name}
        fingerprint = device_fingerprint(device)
        loops = loop_policy()
        menu_key = _menu_key(dtype, device, library, accuracy, by)
        kept = session.facts.get(menu_key)
        if not measuring and store is session.store() and (kept is None or not kept.current()):
            # what later problems of this kind share (plan_decision derives their stored answers)
            known = store.snapshot(fingerprint)
            compiling = frozenset(b.name for b in conforming if _compiles(b))
            session.facts[menu_key] = Menu(by_name, versions, dict(excluded), compiling, _searches(by_name),
                                           loops, native, reachable, session.prior, known,
                                           known.verdicts_added, (dtype, device, library, accuracy, by))
        versions.update((b.name, library_versions(b.name, registry)) for b in provisional)
        latest = _latest(store.records(fingerprint, dtype, layout, shape), versions)
        source = "database"
        missing = [b for b in conforming + provisional if b.name not in latest]
        for backend in [b for b in missing if _compiles(b)]:  # seconds a problem: `gemmzoo tune` measures it
            missing.remove(backend)
            excluded[backend.name] = _compiles_note(shape)
        if measuring and missing:  # measuring: no size is zero
            point = GridPoint(m, n, k, dtype, layout)
            _drop_non_contenders(missing, bool(latest), point, device, library, excluded)
        if measuring and missing:
            no_verdict = ", ".join(b.name for b in provisional)
            announce(f"measuring {m}x{n}x{k} {dtype} on {device}: "
                     f"{', '.join(b.name for b in missing)} (stored for next time)"
                     + (f"; then the conformance suite of whichever of {no_verdict} would be "
                        "the answer (once on this machine)" if no_verdict else ""))
            if provisional:  # the workers of a suite that may run next import their frameworks meanwhile
                from gemmzoo.conformance.shards import warm_start

                warm_start(provisional)
            budget = MISS_BUDGET_S / len(missing)
            fresh = measure_records(missing, point, budget, verify=m * n * k <= VERIFY_LIMIT)
            # running out of memory says what this process had free, not what the shape is: such a
            # row would break the shape for every later process
            store.add([r for r in fresh if not _out_of_memory(r)])
            latest.update((r.backend, r) for r in fresh)
            source = "measured now"
        unsuited: tuple[Timed, ...] = ()
        if provisional:
            problem = choosing.Problem(shape, dtype, device, layout, library, accuracy)

            def decide(backends: dict[str, Any], rows: dict[str, Record]) -> Decided:
                timings = _timings(rows, by, loops)
                if not timings:
                    return None, ()
                choice = _measured_choice(problem, backends, timings, rows, _searches(backends), native,
                                          session.prior, by, source, shape, "", {})
                return choice.backend.name, choice.tied

            timed = _timings(latest, by, loops)
            try:
                passed, waiting = _checked_winners(store, provisional, latest, dtype, decide, dict(by_name),
                                                   excluded, _each_measure(latest, timed, by),
                                                   choosing.RankPolicy(by=by).check_gain_min)
            finally:
                from gemmzoo.conformance.shards import release_standby

                release_standby()
            unsuited = tuple(sorted((t for t in timed if t.backend in waiting), key=lambda t: t.median_s))
            conforming += passed
            by_name.update((b.name, b) for b in passed)
            if not conforming and not unchecked:
                raise _none_conforms(dtype, device, excluded)
            latest = {name: row for name, row in latest.items() if name in by_name}
        _exclude_failures(latest, excluded)
        timings = _timings(latest, by, loops)
        basis: tuple[int, int, int] | None = shape
        note = ""
        if not timings and measuring:
            raise GemmError(f"no backend gave a correct result for {shape} {dtype} on {device}: "
                            + "; ".join(f"{name}: {why}" for name, why in excluded.items()))
        if not timings:
            found = _nearest(store, fingerprint, dtype, layout, versions, shape, by, device)
            if found is not None:
                basis, timings = found
                source = "nearest shape"
                note = (f"nothing measured at {m}x{n}x{k}; nearest measured shape "
                        f"{'x'.join(map(str, basis))} (device times scaled, host times as measured)")
        # A backend stored WRONG at this very shape is never the answer here, whatever else says so.
        wrong = {r.backend for r in latest.values() if r.status == "wrong"}
        timings = [t for t in timings if t.backend not in wrong]
        if timings and reachable is not None:
            timings = _reachable_only(timings, by_name, reachable, excluded)
        problem = choosing.Problem(shape, dtype, device, layout, library, accuracy)
        policy = choosing.RankPolicy(by=by)
        if not timings:
            broke = {r.backend for r in latest.values() if r.status != "ok"}
            everyone = {b.name: b for b in conforming + unchecked if b.name not in wrong}
            mine = None if native is None else frozenset(n for n, b in everyone.items() if native(b))
            unmeasured = choosing.Measurements(native=mine, broke=broke)
            decision = choosing.choose(problem, list(everyone), unmeasured, session.prior, policy)
            pick = _default(store, [everyone[n] for n in decision.order], dtype, excluded, broke, reachable)
            if pick is None:
                raise _none_conforms(dtype, device, excluded)
            note = "nothing measured on this device; unmeasured default (passed conformance here)"
            return Choice(pick, shape, dtype, device, "default", None, (), (pick.name,), note, excluded)
        rows = latest if basis == shape else {}
        choice = _measured_choice(problem, by_name, timings, rows, _searches(by_name), native, session.prior,
                                  by, source, basis, note, excluded)
        return dataclasses.replace(choice, unchecked=unsuited) if unsuited else choice


Decided = tuple["str | None", tuple[str, ...]]
"""A ranking's winner (``None``: nothing timed) and the names tied with the fastest."""


def _drop_non_contenders(missing: list[Any], stored: bool, point: GridPoint, device: str,
                         library: str | None, excluded: dict[str, str]) -> None:
    """Leave out of a first answer's timings the backends that say they cannot be the fastest at
    ``point`` (:attr:`gemmzoo.Backend.contends`: ``triton-decode`` above its rows runs
    ``triton-splitk``'s plan), as ``gemmzoo tune --recorded`` does; each would compile and time
    what another candidate times. Never the last ones: where nothing else is stored or timed, all
    stay."""
    from gemmzoo.tuning.contenders import contends, known_arch

    arch = known_arch(device)
    reasons = {b.name: contends(b, point, device, arch, library) for b in missing}
    left = [b for b in missing if reasons[b.name] is None]
    if not left and not stored:
        return
    for backend in [b for b in missing if reasons[b.name] is not None]:
        missing.remove(backend)
        excluded[backend.name] = f"not timed for a first answer: {reasons[backend.name]}"


def _checked_winners(store: TuningStore, provisional: list[Any], latest: dict[str, Record], dtype: str,
                     decide: Callable[[dict[str, Any], dict[str, Record]], Decided],
                     conforming: dict[str, Any], excluded: dict[str, str],
                     times: dict[str, tuple[float, ...]], gain_min: float) -> tuple[list[Any], set[str]]:
    """Of ``provisional`` (candidates timed before their suite ran), the one that passed its suite,
    if any, and the names of those whose timings stand unchecked. A suite runs only on the backend
    that the rule every answer follows (``decide(backends, rows)``: the winner and the names tied
    with the fastest) picks among the ``conforming`` ones and the provisional ones not yet passed
    over, and only where no conforming backend ties with it (that one answers as well, with no
    suite to run): among tied provisional ones, the rule's own tie order says which is checked.
    A winner whose suite compiles kernels is not checked where another of the pool, conforming or
    with a suite that compiles nothing, ranks within ``gain_min`` of it by any of ``times`` (each
    name's time per call by each measure, :func:`_each_measure`): the rule is asked again without
    it (:func:`_cheap_rival`).
    One whose suite passes is the answer (said on stderr); one that fails is passed over and the
    rule asked again. Those not checked are excluded with a note saying so; their timings rank
    nothing until they pass."""
    wrong = {r.backend for r in latest.values() if r.status == "wrong"}
    timed = {t.backend for t in _timings(latest, "device", None)}
    waiting = {b.name: b for b in provisional if b.name in timed and b.name not in wrong}
    passed: list[Any] = []
    deferred: dict[str, tuple[Any, str]] = {}
    for defer in (True, False):  # without deferring when every other candidate failed its suite
        while waiting:
            pool = {**conforming, **waiting}
            winner, tied = decide(pool, {name: row for name, row in latest.items() if name in pool})
            if winner not in waiting or any(name in conforming for name in tied):
                break
            backend = waiting.pop(winner)
            rival = _cheap_rival(backend, pool, conforming, times, gain_min) if defer else None
            if rival is not None:
                gain = _gain(times[winner], times[rival])
                timed_as = (f"timed {gain:.1%} faster than {rival}" if gain >= 0 else
                            f"timed {-gain:.1%} slower than {rival} by one measure of time per call")
                deferred[winner] = backend, (
                    f"{timed_as}, under the {gain_min:.0%} worth waiting for a "
                    f"suite that compiles kernels; not yet checked for {dtype} on this machine "
                    f"(gemmzoo check {winner} earns it its place)")
                continue
            if _checked_before_use(store, backend, dtype):
                passed.append(backend)
                break
            excluded[backend.name] = _failed(backend.name, dtype)
        if passed or conforming or not deferred:
            break
        waiting = {name: backend for name, (backend, _) in deferred.items()}
        deferred.clear()
    unchecked = set(deferred)
    excluded.update((name, note) for name, (_, note) in deferred.items())
    for backend in provisional:
        name = backend.name
        if backend in passed or name in excluded:
            continue
        row = latest.get(name)
        if row is not None and row.status != "ok":
            excluded[name] = f"{row.status} at this shape: {row.detail}"
            continue
        unchecked.add(name)
        excluded[name] = (f"timed, not yet checked for {dtype} on this machine: its suite runs when it "
                          "would be the answer, and its timings rank nothing until it passes "
                          f"(gemmzoo check {name})")
    return passed, unchecked


def _each_measure(latest: dict[str, Record], timed: list[Timed], by: str) -> dict[str, tuple[float, ...]]:
    """Each timed backend's time per call by every measure taken of it: the time the ranking uses
    (loop time, where the contenders' loops rank), then the time measured call by call (device
    time, or host time where that bounds a call and ``by`` is ``"caller"``)."""
    return {t.backend: (t.median_s, _timed(latest[t.backend], by).median_s) for t in timed}


def _gain(faster: tuple[float, ...], slower: tuple[float, ...]) -> float:
    """How much faster ``faster`` is than ``slower`` by the measure that says least: the smallest
    gain over the measures both have."""
    return min(s / f - 1 if f > 0 else math.inf for f, s in zip(faster, slower, strict=False))


def _cheap_rival(winner: Any, pool: dict[str, Any], conforming: dict[str, Any],
                 times: dict[str, tuple[float, ...]], gain_min: float) -> str | None:
    """The fastest of ``pool`` whose answer needs no compiling suite (it is in ``conforming``, or
    its suite compiles nothing) and that ``winner`` does not beat by more than ``gain_min`` by
    every measure of time per call (:func:`_each_measure`: a loop time of a long GEMM moves with
    the clock the GPU's power draw settles at, which a call-by-call time does not see), where
    ``winner``'s suite compiles kernels (:attr:`gemmzoo.Backend.suite_compiles`); else ``None``."""
    if declared(winner, "suite_compiles") is not True or winner.name not in times:
        return None
    won = times[winner.name]
    near = [name for name, backend in pool.items()
            if name != winner.name and name in times and _gain(won, times[name]) <= gain_min
            and (name in conforming or declared(backend, "suite_compiles") is not True)]
    return min(near, key=lambda name: times[name][0], default=None)


def _none_conforms(dtype: str, device: str, excluded: dict[str, str]) -> BackendUnavailableError:
    """The error of an answer with no backend left that passed conformance here, saying why each
    was left out."""
    why = "; ".join(f"{name}: {reason}" for name, reason in excluded.items())
    return BackendUnavailableError(f"no backend computing {dtype} on {device} passed conformance on this "
                                   f"machine ({why})")


def _compiles_note(shape: tuple[int, int, int]) -> str:
    return (f"compiles each new problem: not measured for a first answer "
            f"(gemmzoo tune --shape {'x'.join(map(str, shape))} measures it)")


def _exclude_failures(latest: dict[str, Record], excluded: dict[str, str]) -> None:
    for record in latest.values():
        if record.status != "ok":
            excluded[record.backend] = f"{record.status} at this shape: {record.detail}"


def _searches(backends: dict[str, Any]) -> dict[str, Any]:
    """Each backend's :attr:`gemmzoo.Backend.searches_over`, by name (what a ranking reads of
    them; a menu keeps it for the problems it answers)."""
    return {name: declared(backend, "searches_over") for name, backend in backends.items()}


def _measured_choice(problem: choosing.Problem, by_name: dict[str, Any], timings: list[Timed],
                     rows: dict[str, Record], searches: dict[str, Any], native: Callable[[Any], bool] | None,
                     prior: Any, by: str, source: str, basis: tuple[int, int, int] | None, note: str,
                     excluded: dict[str, str]) -> Choice:
    """The answer from ``timings`` (at least one): :func:`gemmzoo.tuning.choose.choose` on them,
    the tied backends that compute on the caller's own arrays first."""
    policy = choosing.RankPolicy(by=by)
    measured = choosing.Measurements(tuple(timings), rows, searches)
    decision = choosing.choose(problem, list(by_name), measured, prior, policy)
    if native is not None and len(decision.tied) > 1:  # native orders the tied: asked of them only (it
        # may load their library), where more than one ties
        tied = decision.tied
        measured = dataclasses.replace(measured, native=frozenset(n for n in tied if native(by_name[n])))
        decision = choosing.choose(problem, list(by_name), measured, prior, policy)
    assert decision.winner is not None
    return Choice(by_name[decision.winner], problem.shape, problem.dtype, problem.device, source, basis,
                  decision.ranking, decision.tied, note, excluded)


@dataclass
class Menu:
    """What a session's answers for problems of one dtype, device, caller's library, accuracy and
    ranking share, gathered the slow way once by :func:`explain` (registry, availability,
    verdicts, versions): the conforming candidates by name, their versions, what is excluded and
    why, those that compile each problem, each one's declared ``searches_over``, the loop policy,
    the caller's-arrays tests, the prior, and the store's rows of the device in memory
    (:class:`gemmzoo.tuning.known.Known`). Kept in the session's ``facts``, forgotten with its
    answers (a new verdict, new measurements).

    ``answers``: each stored problem's answer by (layout, shape), derived from those rows once,
    right after the kind's first answer (:func:`_keep_up`), by the rule every answer follows
    (:func:`_stored_choice`), so that a problem whose own shape is stored is then a dictionary
    lookup: no database, no probe, no suite, no ranking."""

    by_name: dict[str, Any]
    versions: dict[str, str]
    excluded: dict[str, str]
    compiling: frozenset[str]
    searches: dict[str, Any]
    loops: Any
    native: Callable[[Any], bool] | None
    reachable: Callable[[Any], bool] | None
    prior: Any
    known: Any
    verdicts_seen: int
    """``known.verdicts_added`` when it was made: a verdict stored since makes it stale."""
    kind: tuple[str, str, str | None, str, str]
    """The dtype, device, caller's library, accuracy and ranking of its problems."""
    answers: dict[tuple[str, tuple[int, int, int]], Choice] = field(default_factory=dict)
    unprobed: set[tuple[str, tuple[int, int, int]]] = field(default_factory=set)
    """Stored problems whose answer asks a backend a question not asked yet in this process
    (which library's arrays it computes on: the probe may load its library); each is answered
    when met, as a problem is that this process meets first."""
    rows_seen: int | None = None
    """How many of ``known.added`` (rows this process stored since they were read) ``answers``
    takes in; ``None`` before they are derived."""

    def current(self) -> bool:
        """Whether it still holds: no verdict came since, the store still adds its own writes to
        its rows, and no other connection (another process) committed since they were read (one
        ``PRAGMA data_version``, no row read)."""
        known = self.known
        if known.verdicts_added != self.verdicts_seen or known.dropped:
            return False
        if known.version_query is None:
            return True
        try:
            return bool(known.version_query().fetchone()[0] == known.version)
        except Exception:  # a closed or moved connection: read again the slow way
            return False


def _menu_key(dtype: str, device: str, library: str | None, accuracy: str, by: str) -> tuple[Any, ...]:
    return ("menu", dtype, device, library, accuracy, by)


def _derive(menu: Menu, problems: Iterable[tuple[str, tuple[int, int, int]]]) -> None:
    """Answer each of ``problems`` ((layout, shape)) from ``menu``'s rows into ``menu.answers``:
    one with no conforming timing of its own is left to the slow way, and one whose answer asks a
    backend what it computes on, not asked yet in this process, to the call that meets it."""
    dtype, device, library, accuracy, by = menu.kind
    native, reachable = _asked_before(menu.native, dtype), _asked_before(menu.reachable, dtype)
    for layout, shape in problems:
        problem = choosing.Problem(shape, dtype, device, layout, library, accuracy)
        menu.answers.pop((layout, shape), None)
        menu.unprobed.discard((layout, shape))
        try:
            choice = _stored_choice(menu, problem, by, native, reachable)
        except _NotAskedError:
            menu.unprobed.add((layout, shape))
            continue
        if choice is not None:
            menu.answers[layout, shape] = choice


def _keep_up(menu: Menu) -> None:
    """Derive ``menu``'s answers (:func:`_derive`) where they are not yet, else answer again the
    problems whose rows this process stored since; under the session's lock."""
    added = menu.known.added
    seen, menu.rows_seen = menu.rows_seen, len(added)
    if seen is None:
        _derive(menu, menu.known.problems(menu.kind[0]))
    elif seen < len(added):
        dtype = menu.kind[0]
        _derive(menu, dict.fromkeys((layout, shape) for kind, layout, shape in added[seen:] if kind == dtype))


class _NotAskedError(Exception):
    """A backend's array library, not learned yet, is needed (see :func:`_asked_before`)."""


def _asked_before(test: Callable[[Any], bool] | None, dtype: str) -> Callable[[Any], bool] | None:
    """``test`` (one of the caller's-arrays tests, which ask :func:`~gemmzoo.arrays.libraries.native_kind`),
    raising :class:`_NotAskedError` instead of probing a backend whose array library is not learned yet."""
    if test is None:
        return None

    def asked(backend: Any) -> bool:
        if not native_kind_known(backend, dtype):
            raise _NotAskedError(backend.name)
        return test(backend)

    return asked


def _stored_choice(menu: Menu, problem: choosing.Problem, by: str, native: Callable[[Any], bool] | None,
                   reachable: Callable[[Any], bool] | None) -> Choice | None:
    """The answer for a problem whose own shape has a timing of a conforming candidate, from
    ``menu`` alone (as :func:`explain` gives it), asking ``native`` and ``reachable`` (the menu's
    caller's-arrays tests, or guarded: :func:`_asked_before`); ``None`` otherwise (the slow way
    answers)."""
    latest = _latest(menu.known.records(problem.dtype, problem.layout, problem.shape), menu.versions)
    if not latest:
        return None
    excluded = dict(menu.excluded)
    for name in menu.compiling:
        if name not in latest:
            excluded[name] = _compiles_note(problem.shape)
    _exclude_failures(latest, excluded)
    wrong = {r.backend for r in latest.values() if r.status == "wrong"}
    timings = [t for t in _timings(latest, by, menu.loops) if t.backend not in wrong]
    if timings and reachable is not None:
        timings = _reachable_only(timings, menu.by_name, reachable, excluded)
    if not timings:
        return None
    return _measured_choice(problem, menu.by_name, timings, latest, menu.searches, native, menu.prior,
                            by, "database", problem.shape, "", excluded)


def _prior_choice(problem: choosing.Problem, store: TuningStore | None,
                  native: Callable[[Any], bool] | None,
                  reachable: Callable[[Any], bool] | None) -> Choice | None:
    """The session's prior's answer (:attr:`gemmzoo.Session.prior`, the shipped prior by default)
    when nothing is measured at or near this problem on this device, checked for availability and
    conformance (its suite runs first if it has no verdict here); else ``None``. Only the backend
    it names is probed: a caller pays for no other framework.

    Where the routed backend's product is the caller's library's own
    (:attr:`gemmzoo.Backend.library_product`) and that library has a product for the dtype
    (:func:`gemmzoo.arrays.libraries.has_own_product`), the answer's source is :data:`LIBRARY`: the call
    is the library's own product under the caller's switches, which is the call being replaced,
    so there is no verdict to earn and nothing is probed or checked."""
    from gemmzoo.tuning import prior

    session = current()
    name = choosing.advice(session.prior, problem)
    if name is None:
        return None
    offered = prior.offered(problem)
    if name not in offered:
        return None
    shape, dtype, device, layout = problem.shape, problem.dtype, problem.device, problem.layout
    registry = session.registry
    store = session.store() if store is None else store
    fingerprint = device_fingerprint(device)
    if store.any_rows(fingerprint, dtype, layout):  # else nothing is measured here: no versions to read
        versions = {name: library_versions(name, registry) for name in offered}
        if _latest(store.records(fingerprint, dtype, layout, shape), versions) or _nearest(
                store, fingerprint, dtype, layout, versions, shape, "caller", device) is not None:
            return None  # a measured answer replaces the prior
    backend = offered[name]
    if declared(backend, "library_product") == problem.library and has_own_product(problem.library, dtype):
        return Choice(backend, shape, dtype, device, LIBRARY, None, (), (name,),
                      f"nothing measured on this device; the shipped prior's route to {name}, whose product "
                      f"is {OWN_PRODUCT_NAMES[problem.library]}: the caller's own "
                      f"{OWN_PRODUCT_NAMES[problem.library]} "
                      "under the caller's precision switches (nothing of gemmzoo's computes)")
    if unavailable_reason(backend) is not None:
        return None
    if (native is not None and not native(backend)) or (reachable is not None and not reachable(backend)):
        return None
    if not _checked_before_use(store, backend, dtype):
        return None
    return Choice(backend, shape, dtype, device, "prior", None, (), (name,),
                  "nothing measured on this device; the prior's route (passed conformance here)")


def announce(what: str) -> None:
    """One line on stderr as gemmzoo starts to measure or check something a caller waits for."""
    print(f"gemmzoo: {what}", file=sys.stderr, flush=True)


def _checked_before_use(store: TuningStore, backend: Any, dtype: str) -> bool:
    """Whether ``backend`` passed conformance for ``dtype`` here, running its suite first (said on
    stderr) when it has no verdict yet."""
    verdict = conformance_verdict(store, backend, dtype, run=False)
    if verdict is not None:
        return verdict
    announce(f"running the conformance suite of {backend.name} for {dtype} before its first use "
             "(once on this machine)")
    with watchdog.idle_workers_ended():  # the caller's own work comes next
        return bool(conformance_verdict(store, backend, dtype, run=True))


UNREACHABLE = ("computes on arrays gemmzoo.matmul cannot hand it without copying both ways through "
               "the host: used only when named (backend=...)")


def _reachable_only(timings: list[Timed], by_name: dict[str, Any], reachable: Callable[[Any], bool],
                    excluded: dict[str, str]) -> list[Timed]:
    """``timings`` without the backends ``reachable`` refuses, asking it of the fastest first and
    stopping at the first it accepts (so a slower backend's library is not loaded for nothing)."""
    kept = list(timings)
    while kept:
        winner = by_name[rank(kept)[0]]
        if reachable(winner):
            return kept
        excluded[winner.name] = UNREACHABLE
        kept = [t for t in kept if t.backend != winner.name]
    return kept


#: Words of an error that says memory ran out (NumPy's MemoryError, torch's and CuPy's
#: OutOfMemoryError, allocator messages).
_MEMORY_WORDS = ("memoryerror", "outofmemory", "out of memory", "unable to allocate",
                 "cannot allocate memory")


def _out_of_memory(record: Record) -> bool:
    """Whether a failed measurement failed because memory ran out."""
    detail = (record.detail or "").lower()
    return record.status != "ok" and any(word in detail for word in _MEMORY_WORDS)


def _failed(name: str, dtype: str) -> str:
    return f"failed conformance for {dtype} on this machine (gemmzoo check {name} runs the suite again)"


def _default(store: Any, order: list[Any], dtype: str, excluded: dict[str, str], broke: set[str],
             reachable: Callable[[Any], bool] | None = None) -> Any:
    """The first of ``order`` (:attr:`gemmzoo.tuning.choose.Decision.order`) that the caller's
    arrays reach and that passed conformance here, running the suite on those not checked yet;
    ``None`` if none."""
    for backend in order:
        reason = unavailable_reason(backend)  # asked here first for a backend held back (_candidates)
        if reason is not None:
            excluded[backend.name] = f"unavailable: {reason}"
            continue
        if reachable is not None and not reachable(backend):
            excluded[backend.name] = UNREACHABLE
            continue
        if _checked_before_use(store, backend, dtype):
            if backend.name not in broke:
                excluded.pop(backend.name, None)
            return backend
        excluded[backend.name] = _failed(backend.name, dtype)
    return None


def best_backend(shape: Any, dtype: str = "float32", device: str | None = None, *,
                 measure: bool | None = None, layout: str = "NN", accuracy: str = COMPONENTWISE,
                 by: str = "caller") -> Any:
    """The fastest available backend that passed conformance for ``dtype``, for ``shape = (M, N, K)``.

    ``device=None`` picks ``"cuda"`` when a CUDA backend is available, else ``"cpu"``. On an exact
    miss the candidates are measured now (about 0.3 s of timing, plus making the inputs, any JIT
    compilation, and the first time on a device the conformance suite of each candidate) unless
    ``measure=False`` or ``GEMMZOO_TUNE=0``; then the nearest measured shape answers. ``layout``
    is BLAS-style, N or T for A then B. See :mod:`gemmzoo.tuning.select` for the whole rule.
    Repeated calls are answered from memory. A backend of the normwise accuracy class is a
    candidate only with ``accuracy="normwise"``. Backends are ranked by caller time (the larger
    of device and host time per call), or by device time alone with ``by="device"``.
    """
    dtype = dtype_name(dtype)
    answers = current().answers
    key = (shape, dtype, device, measure, layout, accuracy, by)
    try:
        return answers[key].backend
    except KeyError:
        pass
    except TypeError:  # an unhashable shape such as a list
        return best_backend(tuple(shape), dtype, device, measure=measure, layout=layout, accuracy=accuracy,
                            by=by)
    choice = explain(shape, dtype, device, measure=measure, layout=layout, accuracy=accuracy, by=by)
    answers[key] = choice
    return choice.backend


def recording_enabled() -> bool:
    """The current session's ``record`` (false when ``GEMMZOO_RECORD`` is 0/false/no/off)."""
    return current().config.record


def _computes_on(library: str, dtype: str, backend: Any) -> bool:
    """Whether ``backend`` computes ``dtype`` on arrays of ``library``."""
    return native_kind(backend, dtype) == library


def _reaches(dtype: str, backend: Any) -> bool:
    """Whether a caller's arrays reach ``backend`` without host copies (it computes ``dtype`` on
    arrays of a library gemmzoo exchanges with)."""
    return native_kind(backend, dtype) is not None


def plan_choice(shape: tuple[int, int, int], dtype: str, device: str, layout: str = "NN",
                library: str | None = None, accuracy: str = COMPONENTWISE, by: str = "caller") -> Any:
    """The backend of :func:`plan_decision`'s answer."""
    return plan_decision(shape, dtype, device, layout, library, accuracy, by).backend


def plan_decision(shape: tuple[int, int, int], dtype: str, device: str, layout: str = "NN",
                  library: str | None = None, accuracy: str = COMPONENTWISE, by: str = "caller") -> Choice:
    """What ``gemmzoo.matmul`` uses for a problem: ``best_backend``'s answer, never measured, and why.

    A dispatch layer must not stall a program the first time it meets a shape, so this answers
    from what is stored: this exact problem's measurements, else the nearest measured shape, else
    the default order (see the module docstring). A problem answered without measurements of its
    own is recorded in the tuning database (unless ``GEMMZOO_RECORD=0``), and
    ``gemmzoo tune --recorded`` measures the recorded problems ahead of the next run — the
    record-then-tune-offline model of PyTorch's TunableOp. ``library`` names the caller's array
    library (``"numpy"``, ``"torch"``, ``"cupy"``): backends computing on it come first where
    nothing else decides, and one its arrays reach only through host copies is never the answer
    (:func:`gemmzoo.arrays.libraries.native_kind`; see :func:`explain`); ``by`` is what candidates are ranked
    by, as in :func:`best_backend`. An answer whose ``source`` is :data:`LIBRARY` is served by the
    caller's library's own product, not by its backend (see :func:`_prior_choice`).
    """
    # the current session, read without a call where one is (a `with` block's, else the default)
    session = _current.get(None) or (_default_session[0] if _default_session else current())
    menu_key = _menu_key(dtype, device, library, accuracy, by)
    menu = session.facts.get(menu_key)
    if menu is not None and menu.current():  # a problem of a kind answered before: its rows are in memory
        if menu.rows_seen != len(menu.known.added):  # not derived yet, or this process stored rows since
            with session.lock:
                _keep_up(menu)
        choice = menu.answers.get((layout, shape))
        if choice is not None:  # a stored problem
            return choice
        if (layout, shape) in menu.unprobed:  # a stored problem whose answer asks a backend's library
            problem = choosing.Problem(shape, dtype, device, layout, library, accuracy)
            with session.lock:
                choice = _stored_choice(menu, problem, by, menu.native, menu.reachable)
                menu.unprobed.discard((layout, shape))
                if choice is not None:
                    menu.answers[layout, shape] = choice
                    return choice
    key = ("plan", shape, dtype, device, layout, library, accuracy, by)
    try:
        return session.answers[key]
    except KeyError:
        pass
    native = reachable = None
    if library is not None:
        native = functools.partial(_computes_on, library, dtype)
        reachable = functools.partial(_reaches, dtype)
    with session.lock:
        try:
            with patience(LOCK_PATIENCE_S):
                choice = explain(shape, dtype, device, measure=False, layout=layout, native=native,
                                 accuracy=accuracy, by=by, reachable=reachable, library=library)
        except TuningStoreBusyError as error:
            session.warn_busy(str(error))
            choice = explain(shape, dtype, device, measure=False, layout=layout, native=native,
                             accuracy=accuracy, store=session.scratch(), by=by, reachable=reachable,
                             library=library)
        else:
            if choice.source != "database" and min(shape) > 0 and recording_enabled():
                # a hint for `gemmzoo tune --recorded`: dropped rather than waited for
                with contextlib.suppress(TuningStoreBusyError), patience(RECORD_PATIENCE_S):
                    session.store().record_problem(device_fingerprint(choice.device),
                                                 GridPoint(*shape, dtype, layout))
        menu = session.facts.get(menu_key)
        if menu is not None and menu.rows_seen is None and menu.current():
            _keep_up(menu)  # after this answer: the probes it made serve the derived answers too
    session.answers[key] = choice
    return choice
