"""The tuning store's rows (:class:`Record`, :class:`ConformanceRecord`) and what a store holds
of one machine in memory (:class:`Known`): its measurements and verdicts.

A :class:`Known` is read from the database in one transaction (:meth:`TuningStore.snapshot
<gemmzoo.tuning.db.TuningStore.snapshot>`) and answers the store's questions about that device
fingerprint (``records``, ``any_rows``, ``shapes_near``, ``conformance``) from dictionaries: no
SQL, no I/O. The store adds what it writes to it, so the two never disagree in one process; what
another process writes is seen when the store finds the database's ``data_version`` moved (see
:meth:`TuningStore.held <gemmzoo.tuning.db.TuningStore.held>`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

Shape = tuple[int, int, int]
Box = tuple[tuple[int, int], tuple[int, int], tuple[int, int]]


@dataclass(frozen=True)
class Record:
    """One measurement of one backend on one problem.

    ``status`` is ``"ok"`` (timed; ``error_ratio`` is the largest ``|error|/bound`` when the result
    was checked, else ``None``), ``"wrong"`` (the result was outside the conformance bound) or
    ``"failed"`` (the backend raised); ``detail`` says what happened in the last two cases.
    ``host_s``/``host_spread_s``: host time per call and its IQR (``None`` in rows stored before
    host time was measured). ``loop_s``/``loop_spread_s``: the time per call of loops of calls
    on the same operands, and its IQR over rounds that took this backend in turn with the others
    near the fastest at this problem, all stored with one ``created`` (``None`` where no such
    rounds were run: see :func:`gemmzoo.tuning.tune.measure_records`).
    """

    device: str
    versions: str
    backend: str
    m: int
    n: int
    k: int
    dtype: str
    layout: str
    status: str
    median_s: float | None
    spread_s: float | None
    error_ratio: float | None
    samples: int | None
    detail: str
    created: float
    host_s: float | None = None
    host_spread_s: float | None = None
    loop_s: float | None = None
    loop_spread_s: float | None = None

    @property
    def measured_caller_s(self) -> float | None:
        """The larger of device and host time: the caller time measured call by call, before any
        loop was timed."""
        return None if self.median_s is None else max(self.median_s, self.host_s or 0.0)

    @property
    def caller_s(self) -> float | None:
        """What a loop of calls achieves per call: the loops' time where they were measured, else
        :attr:`measured_caller_s`."""
        measured = self.measured_caller_s
        return measured if measured is None or self.loop_s is None else self.loop_s


@dataclass(frozen=True)
class ConformanceRecord:
    """The conformance suite's verdict on one backend for one dtype."""

    device: str
    versions: str
    backend: str
    dtype: str
    passed: bool
    checks: int
    failures: int
    detail: str
    created: float


class Known:
    """The measurements and conformance verdicts of one device fingerprint (``device``).

    ``records`` are valid :class:`~gemmzoo.tuning.db.Record` rows of that device, oldest first;
    ``verdicts`` the raw conformance rows (the table's columns, ``passed`` as stored), oldest
    first: the newest of each (versions, backend, dtype) is the one that counts. ``bad``: the
    rows that break the schema, as stored, each with what is wrong; a read that the database
    would have answered with one of them calls ``on_bad(problem)`` (the store's one warning).
    """

    def __init__(self, device: str, records: Iterable[Record] = (),
                 verdicts: Iterable[tuple[object, ...]] = (),
                 bad: Iterable[tuple[tuple[object, ...], str]] = (),
                 on_bad: Callable[[str], None] | None = None) -> None:
        self.device = device
        self.version: object = None
        """The database's ``data_version`` when these rows were read."""
        self.version_query: Callable[[], Any] | None = None
        """Asks the database's ``data_version`` again (a cursor's ``fetchone`` gives it): where it
        moved, another connection (another process) wrote since these rows were read."""
        self.dropped = False
        """Set by the store when it stops adding its writes here (it read the rows again), and in
        a child made by fork(), which must not ask its parent's connection."""
        self.added: list[tuple[str, str, Shape]] = []
        """The (dtype, layout, shape) of each row taken in after the rows were read, in order (what
        an answer derived from the rows before must look at again)."""
        self.verdicts_added = 0
        """How many verdicts were taken in after the rows were read (a new verdict can change
        which candidates a choice has)."""
        self._on_bad = on_bad
        # (dtype, layout) -> shape -> what is wrong with a row stored there (columns as stored)
        self._bad: dict[tuple[object, object], dict[tuple[object, ...], str]] = {}
        # (dtype, layout) -> shape -> rows oldest first; and the same rows in one list, oldest first
        self._by_shape: dict[tuple[str, str], dict[Shape, list[Record]]] = {}
        self._in_order: dict[tuple[str, str], list[Record]] = {}
        # (dtype, layout, backend, versions) -> the shapes with an "ok" row
        self._ok_shapes: dict[tuple[str, str, str, str], dict[Shape, None]] = {}
        self._verdicts: dict[tuple[str, str, str], tuple[object, ...]] = {}
        self._take_bad(bad)
        self.add(records)
        for row in verdicts:
            self.add_verdict(row)
        self.added.clear()
        self.verdicts_added = 0

    def _take_bad(self, bad: Iterable[tuple[tuple[object, ...], str]]) -> None:
        for row, problem in bad:
            shape = tuple(row[3:6])
            self._bad.setdefault((row[6], row[7]), {})[shape] = problem
            if row[8] == "ok" and all(type(x) is int for x in shape):  # the database lists its shape
                self._ok_shapes.setdefault((row[6], row[7], row[2], row[1]), {})[shape] = None  # type: ignore[index]

    def _read_bad(self, dtype: str, layout: str, shape: Shape | None) -> None:
        bad = self._bad.get((dtype, layout))
        if not bad or self._on_bad is None:
            return
        problem = next(iter(bad.values())) if shape is None else bad.get(tuple(shape))
        if problem is not None:
            self._on_bad(problem)

    def add(self, records: Iterable[Record]) -> None:
        """Take in rows stored after those held (rows of another device are ignored)."""
        for r in records:
            if r.device != self.device:
                continue
            shape = (r.m, r.n, r.k)
            self._by_shape.setdefault((r.dtype, r.layout), {}).setdefault(shape, []).append(r)
            self._in_order.setdefault((r.dtype, r.layout), []).append(r)
            self.added.append((r.dtype, r.layout, shape))
            if r.status == "ok":
                self._ok_shapes.setdefault((r.dtype, r.layout, r.backend, r.versions), {})[shape] = None

    def add_verdict(self, row: tuple[object, ...]) -> None:
        """Take in a conformance row (the table's columns, in order) stored after those held."""
        if row[0] == self.device:
            self._verdicts[str(row[2]), str(row[1]), str(row[3])] = row
            self.verdicts_added += 1

    def records(self, dtype: str, layout: str, shape: Shape | None = None,
                status: str | None = None) -> list[Record]:
        """The rows for ``dtype``/``layout`` (one shape, or all), oldest first; of one ``status``
        when given."""
        self._read_bad(dtype, layout, shape)
        if shape is None:
            rows = self._in_order.get((dtype, layout), [])
        else:
            rows = self._by_shape.get((dtype, layout), {}).get(tuple(shape), [])  # type: ignore[arg-type]
        return [r for r in rows if status is None or r.status == status]

    def problems(self, dtype: str) -> list[tuple[str, Shape]]:
        """The (layout, shape) of every problem of ``dtype`` with a row stored, but those where a
        stored row breaks the schema (reading those warns: they are read when asked)."""
        found: list[tuple[str, Shape]] = []
        for (kind, layout), by_shape in self._by_shape.items():
            if kind == dtype:
                bad = self._bad.get((kind, layout), {})
                found.extend((layout, shape) for shape in by_shape if shape not in bad)
        return found

    def any_rows(self, dtype: str, layout: str) -> bool:
        """Whether any row is stored for ``dtype``/``layout`` (one that breaks the schema too)."""
        return bool(self._in_order.get((dtype, layout)) or self._bad.get((dtype, layout)))

    def shapes_near(self, dtype: str, layout: str, backend: str, versions: str,
                    box: Box | None) -> list[Shape]:
        """The shapes with an ``ok`` row of ``backend`` with ``versions``, inside ``box``
        (inclusive (low, high) of M, N and K) or anywhere."""
        shapes = self._ok_shapes.get((dtype, layout, backend, versions), {})
        if box is None:
            return list(shapes)
        (m_low, m_high), (n_low, n_high), (k_low, k_high) = box
        return [s for s in shapes if m_low <= s[0] <= m_high and n_low <= s[1] <= n_high
                and k_low <= s[2] <= k_high]

    def verdict(self, versions: str, backend: str, dtype: str) -> tuple[object, ...] | None:
        """The newest conformance row of ``backend`` for ``dtype`` with ``versions``, as stored."""
        return self._verdicts.get((backend, versions, dtype))
