"""The tuning database: one SQLite file of measurements and conformance results.

Where it lives: ``$GEMMZOO_CACHE_DIR/tuning.sqlite3`` when that variable is set, else in
``platformdirs.user_cache_dir("gemmzoo")``; without platformdirs, the same places it would pick:
``$XDG_CACHE_HOME/gemmzoo`` (default ``~/.cache/gemmzoo``) on Linux, ``~/Library/Caches/gemmzoo``
on macOS, ``%LOCALAPPDATA%\\gemmzoo\\Cache`` on Windows.

Faults it survives:

- many processes writing at once: writes are ``BEGIN IMMEDIATE`` transactions, connections wait
  on a lock (busy timeout) and retry, and the journal is WAL where the filesystem allows it;
- a truncated, garbage or foreign file: moved aside to ``tuning.sqlite3.corrupt-<time>-<pid>``
  with one :class:`TuningCacheWarning`, and a fresh database is built;
- a cache directory that cannot be created or written: one warning, then an in-memory store
  (answers still work, nothing persists).

Rows hold only numbers and strings (no pickle). The schema version is ``PRAGMA user_version``.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterable, Iterator
from dataclasses import astuple, dataclass, fields
from pathlib import Path
from typing import TypeVar

from gemmzoo.grids import GridPoint

SCHEMA_VERSION = 1
DB_NAME = "tuning.sqlite3"
BUSY_TIMEOUT_S = 30.0
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
    host_spread_s REAL
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

# Added beside schema version 1 without a version change: older gemmzoo releases name the columns
# they read and write, so they ignore these.
_BANDWIDTH_TABLE = """
CREATE TABLE IF NOT EXISTS bandwidth (device TEXT NOT NULL, bytes_per_s REAL NOT NULL, created REAL NOT NULL)
"""
_HOST_COLUMNS = ("host_s", "host_spread_s")

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


@dataclass(frozen=True)
class Record:
    """One measurement of one backend on one problem.

    ``status`` is ``"ok"`` (timed; ``error_ratio`` is the largest ``|error|/bound`` when the result
    was checked, else ``None``), ``"wrong"`` (the result was outside the conformance bound) or
    ``"failed"`` (the backend raised); ``detail`` says what happened in the last two cases.
    ``host_s``/``host_spread_s``: host time per call and its IQR (``None`` in rows stored before
    host time was measured).
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

    @property
    def caller_s(self) -> float | None:
        """What a loop of calls achieves per call: the larger of device and host time."""
        return None if self.median_s is None else max(self.median_s, self.host_s or 0.0)


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


_RECORD_COLUMNS = ", ".join(f.name for f in fields(Record))
_CONFORMANCE_COLUMNS = ", ".join(f.name for f in fields(ConformanceRecord))
_warned: set[tuple[str, str]] = set()
T = TypeVar("T")


def _warn_once(kind: str, where: str, message: str) -> None:
    if (kind, where) in _warned:
        return
    _warned.add((kind, where))
    warnings.warn(message, TuningCacheWarning, stacklevel=4)


def default_cache_dir() -> Path:
    """``GEMMZOO_CACHE_DIR`` if set, else the user cache directory (see the module docstring)."""
    chosen = os.environ.get("GEMMZOO_CACHE_DIR", "").strip()
    if chosen:
        return Path(chosen).expanduser()
    try:
        import platformdirs
    except ImportError:
        pass
    else:
        return Path(platformdirs.user_cache_dir("gemmzoo", appauthor=False))
    home = Path.home()
    if sys.platform == "win32":
        return Path(os.environ.get("LOCALAPPDATA", home / "AppData" / "Local")) / "gemmzoo" / "Cache"
    if sys.platform == "darwin":
        return home / "Library" / "Caches" / "gemmzoo"
    return Path(os.environ.get("XDG_CACHE_HOME") or home / ".cache") / "gemmzoo"


def _is_busy(error: sqlite3.Error) -> bool:
    text = str(error).lower()
    return isinstance(error, sqlite3.OperationalError) and ("locked" in text or "busy" in text)


def _retrying(action: Callable[[], T]) -> T:
    """Run ``action``, retrying while another process holds the lock beyond the busy timeout."""
    deadline = time.monotonic() + RETRY_DEADLINE_S
    pause = 0.01
    while True:
        try:
            return action()
        except sqlite3.Error as error:
            if not _is_busy(error) or time.monotonic() > deadline:
                raise
        time.sleep(pause)
        pause = min(pause * 2, 0.5)


class TuningStore:
    """A connection to the tuning database (``path``), or an in-memory one (``path`` None).

    Safe to share between threads (calls are serialised) and between processes (SQLite locks).
    Build one with :func:`open_store`, which handles broken files and unusable directories.
    """

    def __init__(self, path: Path | None = None) -> None:
        self.path = path
        self._lock = threading.Lock()
        target = ":memory:" if path is None else str(path)
        self._db = sqlite3.connect(target, timeout=BUSY_TIMEOUT_S, isolation_level=None,
                                   check_same_thread=False)
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
                with contextlib.suppress(sqlite3.OperationalError):  # WAL needs shared memory
                    _retrying(lambda: self._db.execute("PRAGMA journal_mode=WAL").fetchone())
                (verdict,) = _retrying(lambda: self._db.execute("PRAGMA quick_check").fetchone())
                if verdict != "ok":
                    raise _CorruptError(f"integrity check failed: {verdict}")
            _retrying(self._create_schema)
        except sqlite3.DatabaseError as error:
            if isinstance(error, sqlite3.OperationalError):
                raise
            raise _CorruptError(str(error)) from error

    def _create_schema(self) -> None:
        with self._transaction():
            (version,) = self._db.execute("PRAGMA user_version").fetchone()
            if version == SCHEMA_VERSION:
                self._db.execute(_RECORDED_TABLE)
                self._add_host_time()
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
            self._add_host_time()
            self._db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    def _add_host_time(self) -> None:
        """The host-time columns and the bandwidth table, added to a database that lacks them."""
        self._db.execute(_BANDWIDTH_TABLE)
        present = {row[1] for row in self._db.execute("PRAGMA table_info(measurements)")}
        for column in _HOST_COLUMNS:
            if column not in present:
                self._db.execute(f"ALTER TABLE measurements ADD COLUMN {column} REAL")

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[None]:
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    def _write(self, sql: str, rows: list[tuple[object, ...]]) -> None:
        def write() -> None:
            with self._transaction():
                self._db.executemany(sql, rows)

        with self._lock:
            _retrying(write)

    def _read(self, sql: str, args: tuple[object, ...]) -> list[tuple[object, ...]]:
        with self._lock:
            return _retrying(lambda: self._db.execute(sql, args).fetchall())

    # Measurements ---------------------------------------------------------------------------

    def add(self, records: Iterable[Record]) -> None:
        """Store measurements, all in one transaction."""
        rows = [astuple(r) for r in records]
        if rows:
            marks = ", ".join("?" * len(fields(Record)))
            self._write(f"INSERT INTO measurements ({_RECORD_COLUMNS}) VALUES ({marks})", rows)

    def records(self, device: str, dtype: str, layout: str, shape: tuple[int, int, int] | None = None,
                status: str | None = None) -> list[Record]:
        """Measurements on ``device`` for ``dtype``/``layout`` (one shape, or all), oldest first."""
        sql = f"SELECT {_RECORD_COLUMNS} FROM measurements WHERE device = ? AND dtype = ? AND layout = ?"
        args: tuple[object, ...] = (device, dtype, layout)
        if shape is not None:
            sql += " AND m = ? AND n = ? AND k = ?"
            args += tuple(shape)
        if status is not None:
            sql += " AND status = ?"
            args += (status,)
        return [Record(*row) for row in self._read(sql + " ORDER BY id", args)]

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
        """Every measurement, of every device and versions, oldest first (for export)."""
        rows = self._read(f"SELECT {_RECORD_COLUMNS} FROM measurements ORDER BY id", ())
        return [Record(*row) for row in rows]

    # Conformance ----------------------------------------------------------------------------

    def add_conformance(self, record: ConformanceRecord) -> None:
        """Store one conformance verdict."""
        marks = ", ".join("?" * len(fields(ConformanceRecord)))
        row = astuple(record)
        self._write(f"INSERT INTO conformance ({_CONFORMANCE_COLUMNS}) VALUES ({marks})",
                    [(*row[:4], int(record.passed), *row[5:])])

    def conformance(self, device: str, versions: str, backend: str, dtype: str) -> ConformanceRecord | None:
        """The latest verdict for this backend and dtype on this device with these versions."""
        rows = self._read(
            f"SELECT {_CONFORMANCE_COLUMNS} FROM conformance WHERE device = ? AND versions = ? "
            "AND backend = ? AND dtype = ? ORDER BY id DESC LIMIT 1",
            (device, versions, backend, dtype),
        )
        if not rows:
            return None
        row = rows[0]
        return ConformanceRecord(*row[:4], bool(row[4]), *row[5:])  # type: ignore[arg-type]

    def all_conformance(self) -> list[ConformanceRecord]:
        """Every conformance verdict, oldest first (for export)."""
        rows = self._read(f"SELECT {_CONFORMANCE_COLUMNS} FROM conformance ORDER BY id", ())
        return [ConformanceRecord(*row[:4], bool(row[4]), *row[5:]) for row in rows]  # type: ignore[arg-type]

    def close(self) -> None:
        """Close the connection."""
        with self._lock:
            self._db.close()


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
    replaced by an in-memory store as the module docstring describes."""
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
        except _NewerSchemaError as error:
            return _in_memory(str(db), str(error))
        except (sqlite3.Error, OSError) as error:
            return _in_memory(str(db), str(error))
    return _in_memory(str(db), "it kept failing its integrity check")
