"""The tuning database: one SQLite file of measurements and conformance results.

Where it lives: ``$GEMMZOO_CACHE_DIR/tuning.sqlite3`` when that variable is set, else in
``platformdirs.user_cache_dir("gemmzoo")``; without platformdirs, the same places it would pick:
``$XDG_CACHE_HOME/gemmzoo`` (default ``~/.cache/gemmzoo``) on Linux, ``~/Library/Caches/gemmzoo``
on macOS, ``%LOCALAPPDATA%\\gemmzoo\\Cache`` on Windows.

Faults it survives:

- many processes writing at once: writes are ``BEGIN IMMEDIATE`` transactions, connections wait
  on a lock (busy timeout) and retry, and the journal is WAL where the filesystem allows it;
- a lock held too long: a caller that must not wait (``gemmzoo.matmul``) sets a short deadline
  with :func:`patience`, and past it an operation raises :class:`TuningStoreBusyError` instead of
  waiting; opening a database whose schema is complete writes nothing, so it never waits on
  a writer;
- a truncated, garbage or foreign file, or one of this schema version with a table or column
  missing: moved aside to ``tuning.sqlite3.corrupt-<time>-<pid>`` with one
  :class:`TuningCacheWarning`, and a fresh database is built;
- a file of a newer schema version: left alone, with one warning, and an in-memory store;
- a cache directory that cannot be created or written, a read-only database file, or a write
  that fails for any reason but a lock (disk full, I/O error): one warning, then an in-memory
  store (answers still work, nothing persists);
- a row that breaks :mod:`gemmzoo.tuning.schema` (written by an older gemmzoo, or by hand):
  skipped when read, with one warning.

Rows hold only numbers and strings (no pickle). The schema version is ``PRAGMA user_version``.

Reads of measurements and verdicts are answered from memory: the first read of a device's rows
loads them all in one transaction (:meth:`TuningStore.snapshot`), the store's own writes are added
to them as they are made, and what another connection commits is read again once the database's
``data_version`` has moved (asked before each read, or once for a block of reads:
:meth:`TuningStore.held`).
"""

from __future__ import annotations

import contextlib
import functools
import os
import sqlite3
import threading
import time
import warnings
import weakref
from collections.abc import Callable, Iterable, Iterator
from dataclasses import astuple, fields
from pathlib import Path
from typing import TypeVar

from gemmzoo.config import active, current_config
from gemmzoo.problems.grids import GridPoint
from gemmzoo.tuning.known import Box, ConformanceRecord, Known, Record
from gemmzoo.tuning.schema import MAX_DETAIL, stored_measurement_problem

SCHEMA_VERSION = 1
DB_NAME = "tuning.sqlite3"
BUSY_TIMEOUT_S = 30.0
QUICK_CHECK_BYTES = 64 * 2**20
RETRY_DEADLINE_S = 120.0

_SCHEMA = """
CREATE TABLE measurements (
    id INTEGER PRIMARY KEY,
    device TEXT NOT NULL,
    versions TEXT NOT NULL,
    backend TEXT NOT NULL,
    m INTEGER NOT NULL,
    n INTEGER NOT NULL,
    k INTEGER NOT NULL,
    dtype TEXT NOT NULL,
    layout TEXT NOT NULL,
    status TEXT NOT NULL,
    median_s REAL,
    spread_s REAL,
    error_ratio REAL,
    samples INTEGER,
    detail TEXT NOT NULL,
    created REAL NOT NULL,
    host_s REAL,
    host_spread_s REAL,
    loop_s REAL,
    loop_spread_s REAL
);
CREATE INDEX measurements_lookup ON measurements (device, dtype, layout, m, n, k);
CREATE TABLE conformance (
    id INTEGER PRIMARY KEY,
    device TEXT NOT NULL,
    versions TEXT NOT NULL,
    backend TEXT NOT NULL,
    dtype TEXT NOT NULL,
    passed INTEGER NOT NULL,
    checks INTEGER NOT NULL,
    failures INTEGER NOT NULL,
    detail TEXT NOT NULL,
    created REAL NOT NULL
);
CREATE INDEX conformance_lookup ON conformance (device, backend, dtype);
"""
_TABLE_COLUMNS = {
    "measurements": ("id", "device", "versions", "backend", "m", "n", "k", "dtype", "layout", "status",
                     "median_s", "spread_s", "error_ratio", "samples", "detail", "created"),
    "conformance": ("id", "device", "versions", "backend", "dtype", "passed", "checks", "failures", "detail",
                    "created"),
    "recorded": ("device", "m", "n", "k", "dtype", "layout", "seen", "first", "last"),
    "bandwidth": ("device", "bytes_per_s", "created"),
    "class_measurements": ("device", "versions", "backend", "problem_class", "problem", "dtype", "status",
                           "median_s", "created"),
}

# Added beside schema version 1 without a version change (older releases ignore it): the nearest
# measured shape is found by ranges of M, N and K within one backend's rows of one device,
# dtype, layout and versions, read from this index alone.
_NEAR_INDEX = """
CREATE INDEX IF NOT EXISTS measurements_near ON measurements
    (device, dtype, layout, backend, versions, status, m, n, k)
"""

# Added beside schema version 1 without a version change: older gemmzoo releases name the columns
# they read and write, so they ignore these.
_BANDWIDTH_TABLE = """
CREATE TABLE IF NOT EXISTS bandwidth (device TEXT NOT NULL, bytes_per_s REAL NOT NULL, created REAL NOT NULL)
"""
# Added beside schema version 1 without a version change (older releases ignore it): measurements of
# the problem classes beyond gemm (:mod:`gemmzoo.problems.classes`), one row per backend and problem, the
# problem named by its class and its text form; gemm rows stay in ``measurements``.
_CLASS_TABLE = """
CREATE TABLE IF NOT EXISTS class_measurements (
    device TEXT NOT NULL,
    versions TEXT NOT NULL,
    backend TEXT NOT NULL,
    problem_class TEXT NOT NULL DEFAULT 'gemm',
    problem TEXT NOT NULL,
    dtype TEXT NOT NULL,
    status TEXT NOT NULL,
    median_s REAL,
    created REAL NOT NULL
)
"""
_CLASS_COLUMNS = "device, versions, backend, problem_class, problem, dtype, status, median_s, created"

#: Columns added to ``measurements`` beside schema version 1 without a version change (older
#: releases name the columns they read and write): host time, then the time of loops of calls.
_ADDED_COLUMNS = ("host_s", "host_spread_s", "loop_s", "loop_spread_s")

# Added beside schema version 1 without a version change: older gemmzoo releases ignore it.
_RECORDED_TABLE = """
CREATE TABLE IF NOT EXISTS recorded (
    device TEXT NOT NULL,
    m INTEGER NOT NULL,
    n INTEGER NOT NULL,
    k INTEGER NOT NULL,
    dtype TEXT NOT NULL,
    layout TEXT NOT NULL,
    seen INTEGER NOT NULL,
    first REAL NOT NULL,
    last REAL NOT NULL,
    PRIMARY KEY (device, m, n, k, dtype, layout)
)
"""


class TuningCacheWarning(UserWarning):
    """The tuning database had to be rebuilt, or cannot be used and answers are not persisted."""


class _CorruptError(Exception):
    """The file is not a usable gemmzoo tuning database."""


class _NewerSchemaError(Exception):
    """The file was written by a newer gemmzoo; it is left untouched."""


class _ReadOnlyError(Exception):
    """The file cannot be written (a read-only file or filesystem)."""


class TuningStoreBusyError(Exception):
    """Another process held the database's lock past the deadline of :func:`patience`."""


_local = threading.local()


@contextlib.contextmanager
def patience(seconds: float) -> Iterator[None]:
    """Within this block (in this thread), no database operation waits on another process's lock
    past ``seconds`` from now, in all: past it they raise :class:`TuningStoreBusyError`."""
    outer = getattr(_local, "deadline", None)
    mine = time.monotonic() + seconds
    _local.deadline = mine if outer is None else min(outer, mine)
    try:
        yield
    finally:
        _local.deadline = outer


def _deadline() -> float | None:
    return getattr(_local, "deadline", None)


_RECORD_COLUMNS = ", ".join(f.name for f in fields(Record))
_CONFORMANCE_COLUMNS = ", ".join(f.name for f in fields(ConformanceRecord))
T = TypeVar("T")


def _warn_once(kind: str, where: str, message: str) -> None:
    session = active()  # the session's warnings are given once each; with none yet, each time
    warned: set[tuple[str, str]] = set() if session is None else session.warned
    if (kind, where) in warned:
        return
    warned.add((kind, where))
    warnings.warn(message, TuningCacheWarning, stacklevel=4)


def default_cache_dir() -> Path:
    """The current session's cache directory: ``GEMMZOO_CACHE_DIR`` if set, else the user cache
    directory (see the module docstring and :class:`gemmzoo.config.Config`; before any session
    exists, the environment's: :func:`gemmzoo.config.current_config`)."""
    return current_config().cache_dir


def _is_busy(error: sqlite3.Error) -> bool:
    text = str(error).lower()
    return isinstance(error, sqlite3.OperationalError) and ("locked" in text or "busy" in text)


def _retrying(action: Callable[[], T]) -> T:
    """Run ``action``, retrying while another process holds the lock beyond the busy timeout;
    within :func:`patience`, :class:`TuningStoreBusyError` once its deadline has passed."""
    short = _deadline()
    deadline = time.monotonic() + RETRY_DEADLINE_S if short is None else short
    pause = 0.01
    while True:
        try:
            return action()
        except sqlite3.Error as error:
            if not _is_busy(error):
                raise
            if time.monotonic() > deadline:
                if short is not None:
                    raise TuningStoreBusyError(
                        f"the tuning database is locked by another process ({error})") from None
                raise
        time.sleep(min(pause, max(0.0, deadline - time.monotonic())))
        pause = min(pause * 2, 0.5)


#: A box whose M range holds at most this many integers names them (``m IN (...)``): the index is
#: then searched for each M in the range of N, instead of read through the whole range of M.
NEAR_LIST_LIMIT = 400


def near_sql(boxed: bool, listed: int = 0) -> str:
    """The query of :meth:`TuningStore.shapes_near` (``boxed``: with ranges of M, N and K;
    ``listed``: with M given as that many values instead of a range)."""
    sql = ("SELECT DISTINCT m, n, k FROM measurements WHERE device = ? AND dtype = ? AND layout = ? "
           "AND backend = ? AND versions = ? AND status = 'ok'")
    if not boxed:
        return sql
    sizes = f"m IN ({', '.join('?' * listed)})" if listed else "m BETWEEN ? AND ?"
    return sql + f" AND {sizes} AND n BETWEEN ? AND ? AND k BETWEEN ? AND ?"


def _dropped_in_child(store: Callable[[], TuningStore | None]) -> None:
    """In a child made by fork(): forget what the parent's ``store`` (a weak reference) held."""
    found = store()
    if found is not None:
        found._drop()


class TuningStore:
    """A connection to the tuning database (``path``), or an in-memory one (``path`` None).

    Safe to share between threads (calls are serialised) and between processes (SQLite locks).
    Build one with :func:`open_store`, which handles broken files and unusable directories.
    """

    def __init__(self, path: Path | None = None) -> None:
        self.path = path
        self._lock = threading.RLock()
        self._bad_rows = 0
        self._known: dict[str, Known] = {}
        self._version: object = None
        self._held = 0
        target = ":memory:" if path is None else str(path)
        self._db = sqlite3.connect(target, timeout=BUSY_TIMEOUT_S, isolation_level=None,
                                   check_same_thread=False)
        self._busy_ms = int(BUSY_TIMEOUT_S * 1000)
        # A child made by fork() must not ask its parent's connection anything: what the parent's
        # store held is dropped in the child as it starts (Known.dropped), never checked per read.
        os.register_at_fork(after_in_child=functools.partial(_dropped_in_child, weakref.ref(self)))
        # The file is data: no function of the schema (a trigger's, a view's) runs with the
        # privileges of gemmzoo's own statements.
        with contextlib.suppress(sqlite3.DatabaseError):
            self._db.execute("PRAGMA trusted_schema = OFF")
        try:
            self._setup()
        except BaseException:
            self._db.close()
            raise

    @property
    def persistent(self) -> bool:
        """False for the in-memory fallback."""
        return self.path is not None

    def _setup(self) -> None:
        try:
            if self.path is not None:
                self._wal()
                self._check_integrity()
            if self.path is not None and self.path.exists() and not os.access(self.path, os.W_OK):
                raise _ReadOnlyError("the file is read-only")
            if self._missing() or self.path is None:
                self._run(self._create_schema)
            elif not self._writable():
                raise _ReadOnlyError("the file is read-only")
        except sqlite3.DatabaseError as error:
            if isinstance(error, sqlite3.OperationalError):
                if "readonly" in str(error).lower() or "read-only" in str(error).lower():
                    raise _ReadOnlyError(str(error)) from error
                raise
            raise _CorruptError(str(error)) from error

    def _check_integrity(self) -> None:
        """``PRAGMA quick_check`` for a file of up to :data:`QUICK_CHECK_BYTES` (it reads every page:
        about a second for 500 MiB); a larger one is only checked for truncation here, and damage
        found later by a query sends the store to memory (:meth:`_guarded`)."""
        assert self.path is not None
        if self.path.stat().st_size <= QUICK_CHECK_BYTES:
            (verdict,) = self._run(lambda: self._db.execute("PRAGMA quick_check").fetchone())
            if verdict != "ok":
                raise _CorruptError(f"integrity check failed: {verdict}")
            return
        (pages,) = self._run(lambda: self._db.execute("PRAGMA page_count").fetchone())
        (size,) = self._run(lambda: self._db.execute("PRAGMA page_size").fetchone())
        wal = self.path.with_name(self.path.name + "-wal")
        held = self.path.stat().st_size + (wal.stat().st_size if wal.exists() else 0)
        if pages * size > held:
            raise _CorruptError(f"truncated: {pages} pages of {size} bytes, {held} bytes on disk")

    def _wal(self) -> None:
        """The WAL journal where the filesystem allows it (readers then never wait on a writer),
        synchronised at checkpoints rather than at every commit (a cache may lose its last rows at
        a power cut, never its consistency)."""
        (mode,) = self._run(lambda: self._db.execute("PRAGMA journal_mode").fetchone())
        if str(mode).lower() != "wal":
            # WAL needs shared memory, which some filesystems lack
            with contextlib.suppress(sqlite3.OperationalError, TuningStoreBusyError):
                (mode,) = self._run(lambda: self._db.execute("PRAGMA journal_mode=WAL").fetchone())
        if str(mode).lower() == "wal":
            self._db.execute("PRAGMA synchronous=NORMAL")

    def _missing(self) -> list[str]:
        """What the current schema lacks, read without a lock: ``[]`` when the database is complete;
        raises for a newer, foreign or damaged one."""
        (version,) = self._run(lambda: self._db.execute("PRAGMA user_version").fetchone())
        if version > SCHEMA_VERSION:
            raise _NewerSchemaError(f"schema version {version}, this gemmzoo knows {SCHEMA_VERSION}")
        objects = dict(self._run(lambda: self._db.execute("SELECT name, type FROM sqlite_master").fetchall()))
        if version == 0:
            if objects:
                raise _CorruptError(
                    f"not a gemmzoo tuning database (schema version 0, {len(objects)} objects)")
            return ["everything"]
        if version != SCHEMA_VERSION:
            raise _CorruptError(f"not a gemmzoo tuning database (schema version {version})")
        foreign = sorted((kind, name) for name, kind in objects.items() if not _ours(name, kind))
        if foreign:
            kind, name = foreign[0]
            raise _CorruptError(f"holds {len(foreign)} schema object(s) gemmzoo did not create (first: "
                                f"{kind} {name[:60]!r}); a tuning database is data, never code such as "
                                "triggers or views")
        missing = []
        for table, columns in _TABLE_COLUMNS.items():
            if objects.get(table) != "table":
                if table in ("measurements", "conformance"):
                    raise _CorruptError(f"damaged schema: table {table} is missing")
                missing.append(table)
                continue
            present = {row[1] for row in self._run(lambda t=table: self._db.execute(f"PRAGMA table_info({t})")
                                                   .fetchall())}
            lacking = [c for c in columns if c not in present]
            if lacking:
                raise _CorruptError(f"damaged schema: table {table} lacks column {lacking[0]}")
            if table == "measurements":
                missing += [c for c in _ADDED_COLUMNS if c not in present]
        if objects.get("measurements_near") != "index":
            missing.append("measurements_near")
        return missing

    def _writable(self) -> bool:
        """Whether a write lock can be taken (a lock held by another process counts as yes)."""
        def probe() -> bool:
            self._db.execute("PRAGMA busy_timeout = 0")
            try:
                self._db.execute("BEGIN IMMEDIATE")
                self._db.execute("ROLLBACK")
            except sqlite3.OperationalError as error:
                if _is_busy(error):
                    return True
                if "readonly" in str(error).lower() or "read-only" in str(error).lower():
                    return False
                raise
            finally:
                self._db.execute(f"PRAGMA busy_timeout = {self._busy_ms}")
            return True

        return probe()

    def _create_schema(self) -> None:
        with self._transaction():
            (version,) = self._db.execute("PRAGMA user_version").fetchone()
            if version == SCHEMA_VERSION:
                self._db.execute(_RECORDED_TABLE)
                self._db.execute(_CLASS_TABLE)
                self._add_host_time()
                self._db.execute(_NEAR_INDEX)
                return
            if version > SCHEMA_VERSION:
                raise _NewerSchemaError(f"schema version {version}, this gemmzoo knows {SCHEMA_VERSION}")
            tables = self._db.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
            if version != 0 or tables:
                raise _CorruptError(
                    f"not a gemmzoo tuning database (schema version {version}, {tables} objects)")
            # one statement at a time: executescript() would COMMIT the open transaction
            for statement in filter(str.strip, _SCHEMA.split(";")):
                self._db.execute(statement)
            self._db.execute(_RECORDED_TABLE)
            self._db.execute(_CLASS_TABLE)
            self._add_host_time()
            self._db.execute(_NEAR_INDEX)
            self._db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    def _add_host_time(self) -> None:
        """The added columns (:data:`_ADDED_COLUMNS`) and the bandwidth table, added to a database
        that lacks them."""
        self._db.execute(_BANDWIDTH_TABLE)
        present = {row[1] for row in self._db.execute("PRAGMA table_info(measurements)")}
        for column in _ADDED_COLUMNS:
            if column not in present:
                self._db.execute(f"ALTER TABLE measurements ADD COLUMN {column} REAL")

    def _run(self, action: Callable[[], T]) -> T:
        """``action`` under :func:`_retrying`, the connection's busy timeout cut to what is left of
        the :func:`patience` deadline."""
        deadline = _deadline()
        wanted = int(BUSY_TIMEOUT_S * 1000)
        if deadline is not None:
            wanted = max(0, min(wanted, int((deadline - time.monotonic()) * 1000)))
        if wanted != self._busy_ms:
            self._db.execute(f"PRAGMA busy_timeout = {wanted}")
            self._busy_ms = wanted
        return _retrying(action)

    def _to_memory(self, error: sqlite3.Error) -> None:
        """Go on in memory after the file failed a write or read for a reason other than a lock."""
        where = str(self.path)
        _warn_once("memory", where, f"gemmzoo cannot use the tuning database at {where} ({error}); "
                   "measurements are kept in memory for this process only")
        with contextlib.suppress(sqlite3.Error):
            self._db.close()
        self.path = None
        self._drop()
        self._db = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
        self._busy_ms = int(BUSY_TIMEOUT_S * 1000)
        self._create_schema()

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[None]:
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    def _guarded(self, action: Callable[[], T]) -> T:
        """``action`` (under the lock, with retries); a failure other than a lock moves the store
        to memory (one warning) and runs ``action`` there."""
        with self._lock:
            try:
                return self._run(action)
            except sqlite3.DatabaseError as error:
                damaged = type(error) is sqlite3.DatabaseError  # "database disk image is malformed"
                if not (damaged or isinstance(error, sqlite3.OperationalError)):
                    raise
                if _is_busy(error) or self.path is None:
                    raise
                self._to_memory(error)
                return self._run(action)

    def _write(self, sql: str, rows: list[tuple[object, ...]]) -> None:
        def write() -> None:
            with self._transaction():
                self._db.executemany(sql, rows)

        self._guarded(write)

    def _read(self, sql: str, args: tuple[object, ...]) -> list[tuple[object, ...]]:
        return self._guarded(lambda: self._db.execute(sql, args).fetchall())

    # Measurements ---------------------------------------------------------------------------

    def add(self, records: Iterable[Record]) -> None:
        """Store measurements, all in one transaction (and in what this store holds in memory)."""
        rows = [astuple(r) for r in records]
        if rows:
            marks = ", ".join("?" * len(fields(Record)))
            with self._lock:
                self._write(f"INSERT INTO measurements ({_RECORD_COLUMNS}) VALUES ({marks})", rows)
                held = [row for row in rows if row[0] in self._known]
                if held:  # a row that breaks the schema is left out here too (as a read would)
                    added = self._valid(held, warn=False)
                    for known in self._known.values():
                        known.add(added)

    def add_newer(self, records: Iterable[Record]) -> int:
        """Store each measurement unless the database holds one as new or newer (by ``created``) of
        the same device, versions, backend and problem; all in one transaction, in the order
        given. Returns how many were stored."""
        rows = [(*astuple(r), r.device, r.versions, r.backend, r.m, r.n, r.k, r.dtype, r.layout, r.created)
                for r in records]
        if not rows:
            return 0
        marks = ", ".join("?" * len(fields(Record)))
        sql = (f"INSERT INTO measurements ({_RECORD_COLUMNS}) SELECT {marks} WHERE NOT EXISTS ("
               "SELECT 1 FROM measurements WHERE device = ? AND versions = ? AND backend = ? AND m = ? "
               "AND n = ? AND k = ? AND dtype = ? AND layout = ? AND created >= ?)")
        with self._lock:
            self._drop()  # read again in full: which rows went in is the database's to say
            return self._insert_counted(sql, rows)

    def _insert_counted(self, sql: str, rows: list[tuple[object, ...]]) -> int:
        """Run ``sql`` for each row in one transaction; how many rows it inserted."""
        added = [0]

        def write() -> None:
            with self._transaction():
                before = self._db.total_changes
                self._db.executemany(sql, rows)
                added[0] = self._db.total_changes - before

        self._guarded(write)
        return added[0]

    def _valid(self, rows: list[tuple[object, ...]], warn: bool = True) -> list[Record]:
        """Rows as records, leaving out (with one warning, unless ``warn`` is false) those that
        break the schema."""
        kept, bad = self._split(rows)
        if bad and warn:
            self._warn_bad(bad[0][1])
        return kept

    def _split(self, rows: list[tuple[object, ...]]
               ) -> tuple[list[Record], list[tuple[tuple[object, ...], str]]]:
        """Rows as records, and the rows that break the schema with what is wrong with each."""
        names = [f.name for f in fields(Record)]
        kept, bad = [], []
        for row in rows:
            problem = stored_measurement_problem(dict(zip(names, row, strict=True)))
            if problem is None:
                record = Record(*row)  # type: ignore[arg-type]
                if len(record.detail) > MAX_DETAIL:
                    record = Record(*row[:13], record.detail[:MAX_DETAIL] + "...(cut)", *row[14:])  # type: ignore[arg-type]
                kept.append(record)
            else:
                bad.append((row, problem))
        return kept, bad

    def _warn_bad(self, problem: str) -> None:
        self._bad_rows += 1
        _warn_once("rows", str(self.path), f"gemmzoo's tuning database {self.path or '(memory)'} holds "
                   f"rows it cannot use (e.g. {problem}); they are skipped. `gemmzoo cache --clear` "
                   "removes them")

    def records(self, device: str, dtype: str, layout: str, shape: tuple[int, int, int] | None = None,
                status: str | None = None) -> list[Record]:
        """Measurements on ``device`` for ``dtype``/``layout`` (one shape, or all), oldest first;
        rows that break :mod:`gemmzoo.tuning.schema` are left out. Read from :meth:`snapshot`."""
        return self.snapshot(device).records(dtype, layout, shape, status)

    def any_rows(self, device: str, dtype: str, layout: str) -> bool:
        """Whether any measurement (any backend, versions, shape or status) is stored on ``device``
        for ``dtype``/``layout``. Read from :meth:`snapshot`."""
        return self.snapshot(device).any_rows(dtype, layout)

    def shapes_near(self, device: str, dtype: str, layout: str, backend: str, versions: str,
                    box: Box | None) -> list[tuple[int, int, int]]:
        """The distinct shapes with an ``ok`` row of ``backend`` with ``versions`` on ``device`` for
        ``dtype``/``layout``, within ``box`` (inclusive (low, high) of M, N and K) or anywhere.
        Read from :meth:`snapshot`."""
        return self.snapshot(device).shapes_near(dtype, layout, backend, versions, box)

    # What is held in memory -----------------------------------------------------------------

    def snapshot(self, device: str) -> Known:
        """The measurements and verdicts of ``device`` (a fingerprint), held in memory: read in
        one transaction the first time, then kept, with this store's own writes added as they
        are made. Outside :meth:`held`, the database's ``data_version`` is checked first, and
        what another connection committed since is read again."""
        with self._lock:
            if not self._held:
                self._refresh()
            known = self._known.get(device)
            if known is None:
                known = self._known[device] = self._load(device)
            return known

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        """Inside the block, reads are answered from memory without asking the database whether
        another connection wrote meanwhile: that is asked once, on entering. For one answer made
        of many reads (:func:`gemmzoo.tuning.select.explain`)."""
        with self._lock:
            if not self._held:
                self._refresh()
            self._held += 1
        try:
            yield
        finally:
            with self._lock:
                self._held -= 1

    def _drop(self) -> None:
        """Forget what is held (and tell whoever kept a :class:`Known` of it: ``Known.dropped``)."""
        for known in self._known.values():
            known.dropped = True
        self._known.clear()

    def _refresh(self) -> None:
        """Forget what is held when another connection committed since it was read."""
        if self._known and self._data_version() != self._version:
            self._drop()

    def _data_version(self) -> object:
        return self._guarded(lambda: self._db.execute("PRAGMA data_version").fetchone()[0])

    def _load(self, device: str) -> Known:
        """One read transaction: the database's data_version, ``device``'s measurements and its
        conformance verdicts."""
        def read() -> tuple[object, list[tuple[object, ...]], list[tuple[object, ...]]]:
            self._db.execute("BEGIN")
            try:
                version = self._db.execute("PRAGMA data_version").fetchone()[0]
                rows = self._db.execute(f"SELECT {_RECORD_COLUMNS} FROM measurements WHERE device = ? "
                                        "ORDER BY id", (device,)).fetchall()
                verdicts = self._db.execute(f"SELECT {_CONFORMANCE_COLUMNS} FROM conformance WHERE "
                                            "device = ? ORDER BY id", (device,)).fetchall()
            finally:
                self._db.execute("COMMIT")
            return version, rows, verdicts

        version, rows, verdicts = self._guarded(read)
        if not self._known:
            self._version = version
        elif version != self._version:  # another connection wrote between two loads: read all again
            self._drop()
            self._version = version
        kept, bad = self._split(rows)
        known = Known(device, kept, verdicts, bad, self._warn_bad)
        known.version = version
        # whether another connection wrote since, asked with the connection's own (C) methods
        known.version_query = functools.partial(self._db.execute, "PRAGMA data_version")
        return known

    def clear(self) -> None:
        """Delete every row, keeping the file: a process writing to it meanwhile (a running
        ``gemmzoo tune``) keeps every row it stores after the clear, which a removed file would
        lose unseen."""
        def empty() -> None:
            with self._transaction():
                for table in _OWN_OBJECTS["table"]:
                    self._db.execute(f"DELETE FROM {table}")

        with self._lock:
            self._guarded(empty)
            self._drop()

    def count(self) -> int:
        """How many measurements the database holds."""
        return int(self._read("SELECT count(*) FROM measurements", ())[0][0])

    # Problems met by gemmzoo.matmul without measurements of their own ----------------------

    def record_problem(self, device: str, point: GridPoint) -> None:
        """Note that ``point`` was met on ``device`` (a fingerprint) and answered unmeasured."""
        now = time.time()
        self._write(
            "INSERT INTO recorded (device, m, n, k, dtype, layout, seen, first, last) "
            "VALUES (?, ?, ?, ?, ?, ?, 1, ?, ?) ON CONFLICT (device, m, n, k, dtype, layout) "
            "DO UPDATE SET seen = seen + 1, last = excluded.last",
            [(device, point.m, point.n, point.k, point.dtype, point.layout, now, now)])

    def recorded(self, device: str) -> list[tuple[GridPoint, int]]:
        """The problems recorded on ``device``, most often met first, with how often."""
        rows = self._read("SELECT m, n, k, dtype, layout, seen FROM recorded WHERE device = ? "
                          "ORDER BY seen DESC, first", (device,))
        return [(GridPoint(int(m), int(n), int(k), str(d), str(lay)), int(seen))  # type: ignore[call-overload]
                for m, n, k, d, lay, seen in rows]

    def forget_recorded(self, device: str, points: Iterable[GridPoint]) -> None:
        """Drop recorded problems (they have been measured)."""
        rows = [(device, p.m, p.n, p.k, p.dtype, p.layout) for p in points]
        if rows:
            self._write("DELETE FROM recorded WHERE device = ? AND m = ? AND n = ? AND k = ? "
                        "AND dtype = ? AND layout = ?", rows)

    # Memory bandwidth -----------------------------------------------------------------------

    def add_class_measurements(self, rows: Iterable[tuple[object, ...]]) -> None:
        """Store measurements of class problems: ``(device, versions, backend, problem_class,
        problem, dtype, status, median_s, created)`` each, all in one transaction."""
        rows = list(rows)
        if rows:
            marks = ", ".join("?" * 9)
            self._write(f"INSERT INTO class_measurements ({_CLASS_COLUMNS}) VALUES ({marks})", rows)

    def class_measurements(self, device: str, problem: str, dtype: str) -> list[tuple[object, ...]]:
        """The stored rows of one class problem on ``device`` (``(backend, versions, status,
        median_s, created)`` each, oldest first); ``[]`` from a database without the table."""
        try:
            return self._read("SELECT backend, versions, status, median_s, created FROM class_measurements "
                              "WHERE device = ? AND problem = ? AND dtype = ? ORDER BY created",
                              (device, problem, dtype))
        except sqlite3.OperationalError:  # a read-only database of an older release lacks the table
            return []

    def all_class_measurements(self) -> list[dict[str, object]]:
        """Every class measurement, of every device and versions, oldest first (for export), each
        a mapping of the columns of ``class_measurements``; ``[]`` without the table."""
        names = [name.strip() for name in _CLASS_COLUMNS.split(",")]
        try:
            rows = self._read(f"SELECT {_CLASS_COLUMNS} FROM class_measurements ORDER BY created", ())
        except sqlite3.OperationalError:  # a read-only database of an older release lacks the table
            return []
        return [dict(zip(names, row, strict=True)) for row in rows]

    def add_newer_class_measurements(self, rows: Iterable[tuple[object, ...]]) -> int:
        """Store each class measurement (the columns of :meth:`add_class_measurements`) unless the
        database holds one as new or newer of the same device, versions, backend, problem and
        dtype; all in one transaction. Returns how many were stored."""
        rows = [(*row, row[0], row[1], row[2], row[4], row[5], row[8]) for row in rows]
        if not rows:
            return 0
        marks = ", ".join("?" * 9)
        sql = (f"INSERT INTO class_measurements ({_CLASS_COLUMNS}) SELECT {marks} WHERE NOT EXISTS ("
               "SELECT 1 FROM class_measurements WHERE device = ? AND versions = ? AND backend = ? "
               "AND problem = ? AND dtype = ? AND created >= ?)")
        return self._insert_counted(sql, rows)

    def add_bandwidth(self, device: str, bytes_per_s: float) -> None:
        """Store a device's measured copy bandwidth."""
        self._write("INSERT INTO bandwidth (device, bytes_per_s, created) VALUES (?, ?, ?)",
                    [(device, bytes_per_s, time.time())])

    def bandwidth(self, device: str) -> float | None:
        """The latest measured copy bandwidth of ``device`` in bytes per second, if any."""
        rows = self._read("SELECT bytes_per_s FROM bandwidth WHERE device = ? ORDER BY rowid DESC LIMIT 1",
                          (device,))
        return float(rows[0][0]) if rows else None  # type: ignore[arg-type]

    def all_records(self) -> list[Record]:
        """Every measurement, of every device and versions, oldest first (for export); rows that
        break :mod:`gemmzoo.tuning.schema` are left out."""
        return self._valid(self._read(f"SELECT {_RECORD_COLUMNS} FROM measurements ORDER BY id", ()))

    # Conformance ----------------------------------------------------------------------------

    def add_conformance(self, record: ConformanceRecord) -> None:
        """Store one conformance verdict (and in what this store holds in memory)."""
        marks = ", ".join("?" * len(fields(ConformanceRecord)))
        values = astuple(record)
        row = (*values[:4], int(record.passed), *values[5:])
        with self._lock:
            self._write(f"INSERT INTO conformance ({_CONFORMANCE_COLUMNS}) VALUES ({marks})", [row])
            for known in self._known.values():
                known.add_verdict(row)

    def conformance(self, device: str, versions: str, backend: str, dtype: str) -> ConformanceRecord | None:
        """The latest verdict for this backend and dtype on this device with these versions (read
        from :meth:`snapshot`)."""
        row = self.snapshot(device).verdict(versions, backend, dtype)
        if row is None:
            return None
        if row[4] not in (0, 1) or isinstance(row[4], float):
            _warn_once("verdicts", str(self.path), f"gemmzoo's tuning database {self.path or '(memory)'} "
                       f"holds a conformance verdict it cannot read (passed = {str(row[4])[:40]!r}); "
                       "it counts as no verdict")
            return None
        return ConformanceRecord(*row[:4], row[4] == 1, *row[5:])  # type: ignore[arg-type]

    def all_conformance(self) -> list[ConformanceRecord]:
        """Every conformance verdict, oldest first (for export)."""
        rows = self._read(f"SELECT {_CONFORMANCE_COLUMNS} FROM conformance ORDER BY id", ())
        return [ConformanceRecord(*row[:4], bool(row[4]), *row[5:]) for row in rows]  # type: ignore[arg-type]

    def close(self) -> None:
        """Close the connection."""
        with self._lock:
            self._db.close()


#: The schema objects gemmzoo creates: tables and indexes by name (SQLite adds its own, named
#: ``sqlite_...``). Anything else in a database file was put there by someone else.
_OWN_OBJECTS = {
    "table": {"measurements", "conformance", "recorded", "bandwidth", "class_measurements"},
    "index": {"measurements_lookup", "conformance_lookup", "measurements_near"},
}


def _ours(name: str, kind: str) -> bool:
    if kind in ("table", "index") and str(name).startswith("sqlite_"):
        return True
    return name in _OWN_OBJECTS.get(kind, set())


def _identity(path: Path) -> tuple[int, int, int] | None:
    try:
        info = path.stat()
    except OSError:
        return None
    return info.st_ino, info.st_size, info.st_mtime_ns


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    """An exclusive advisory lock on ``path`` (POSIX); a no-op where fcntl does not exist."""
    try:
        import fcntl
    except ImportError:
        yield
        return
    with open(path, "a+b") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _move_aside(db: Path, seen: tuple[int, int, int] | None, reason: str) -> None:
    """Rename a broken database (and its WAL files) unless another process already replaced it."""
    with _file_lock(db.with_name(db.name + ".lock")):
        if _identity(db) != seen:
            return
        stamp = time.strftime("%Y%m%dT%H%M%S") + f"{time.time() % 1:.6f}"[1:]
        aside = db.with_name(f"{db.name}.corrupt-{stamp}-{os.getpid()}")
        os.replace(db, aside)
        for suffix in ("-wal", "-shm"):
            with contextlib.suppress(FileNotFoundError):
                os.replace(db.with_name(db.name + suffix), aside.with_name(aside.name + suffix))
    warnings.warn(f"gemmzoo tuning database {db} was unreadable ({reason}); moved it to {aside.name} "
                  "and started a new one", TuningCacheWarning, stacklevel=3)


def _in_memory(where: str, why: str) -> TuningStore:
    _warn_once("memory", where, f"gemmzoo cannot use the tuning database at {where} ({why}); "
               "measurements are kept in memory for this process only")
    return TuningStore(None)


def open_store(directory: Path | None = None) -> TuningStore:
    """The tuning database in ``directory`` (default: :func:`default_cache_dir`), repaired or
    replaced by an in-memory store as the module docstring describes. Within :func:`patience`, a
    lock held past its deadline raises :class:`TuningStoreBusyError` instead."""
    directory = default_cache_dir() if directory is None else directory
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        return _in_memory(str(directory), f"cannot create the directory: {error.strerror or error}")
    db = directory / DB_NAME
    for _attempt in range(3):
        seen = _identity(db)
        try:
            return TuningStore(db)
        except _CorruptError as error:
            _move_aside(db, seen, str(error))
        except (_NewerSchemaError, _ReadOnlyError) as error:
            return _in_memory(str(db), str(error))
        except TuningStoreBusyError:
            raise
        except (sqlite3.Error, OSError) as error:
            return _in_memory(str(db), str(error))
    return _in_memory(str(db), "it kept failing its integrity check")
