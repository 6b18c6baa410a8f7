"""The tuning database's faults seen from gemmzoo.matmul, tune and best: a read-only file, a
damaged schema, another process holding the lock; and the nearest-shape query reads an index."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import subprocess
import sys
import textwrap
import time
import warnings
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from sessions import reconfigure, restart

import gemmzoo
from gemmzoo.cli import main
from gemmzoo.tuning import TuningCacheWarning, state
from gemmzoo.tuning.db import DB_NAME, near_sql, open_store

pytestmark = pytest.mark.usefixtures("empty_cache")


def _warnings_of(action) -> list[str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        action()
    return [str(w.message) for w in caught if issubclass(w.category, TuningCacheWarning)]


def _product_works(shape: tuple[int, int, int] = (23, 19, 17), seed: int = 0) -> None:
    m, n, k = shape
    rng = np.random.default_rng(seed)
    a, b = rng.standard_normal((m, k)), rng.standard_normal((k, n))
    c = gemmzoo.matmul(a, b)
    assert c.shape == (m, n) and np.allclose(c, a @ b)


def _made(cache: Path) -> Path:
    """A healthy database in ``cache`` holding one verdict, closed again."""
    state.store()
    _product_works((5, 6, 7), seed=9)
    restart()
    return cache / DB_NAME


@contextlib.contextmanager
def _read_only(path: Path) -> Iterator[None]:
    """``path`` read-only for this process: chmod for a normal user; the immutable attribute for
    root (whom permission bits do not stop); skips where neither is possible."""
    if os.geteuid() != 0:
        path.chmod(0o444)
        try:
            yield
        finally:
            path.chmod(0o644)
        return
    if subprocess.run(["chattr", "+i", str(path)], capture_output=True).returncode != 0:
        pytest.skip("cannot make a file read-only for root here (chattr +i failed)")
    try:
        yield
    finally:
        subprocess.run(["chattr", "-i", str(path)], check=True)


def test_a_read_only_database_file_falls_back_to_memory_with_one_warning(empty_cache, capsys, monkeypatch):
    monkeypatch.setenv("GEMMZOO_BACKENDS", "numpy")
    reconfigure()
    path = _made(empty_cache)
    before = path.read_bytes()
    with _read_only(path):
        found = _warnings_of(lambda: (_product_works(), _product_works((31, 7, 3), seed=1)))
        assert len(found) == 1 and "read-only" in found[0] and "in memory" in found[0]
        assert not state.store().persistent
        restart()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", TuningCacheWarning)
            assert main(["tune", "--shape", "8x8x8", "--backend", "numpy", "--budget", "0.005"]) == 0
            assert main(["best", "8", "8", "8", "--device", "cpu"]) == 0
        out = capsys.readouterr().out
        assert "memory only" in out and "Traceback" not in out
    assert path.read_bytes() == before


def test_a_failing_write_moves_the_store_to_memory_with_one_warning(empty_cache, monkeypatch):
    store = state.store()
    assert store.persistent

    class Readonly:
        """The connection of a file that became read-only (or full) after it was opened."""

        def __init__(self, real: sqlite3.Connection) -> None:
            self.real = real

        def execute(self, sql: str, *args):
            if sql.startswith("BEGIN"):
                raise sqlite3.OperationalError("attempt to write a readonly database")
            return self.real.execute(sql, *args)

        def __getattr__(self, name: str):
            return getattr(self.real, name)

    monkeypatch.setattr(store, "_db", Readonly(store._db))
    found = _warnings_of(lambda: (_product_works(), _product_works((31, 7, 3), seed=1)))
    assert len(found) == 1 and "readonly" in found[0]
    assert not store.persistent and store.count() == 0


@pytest.mark.parametrize("damage", [
    "DROP TABLE conformance",
    "ALTER TABLE measurements DROP COLUMN detail",
    "ALTER TABLE recorded DROP COLUMN seen",
    "DROP TABLE measurements",
])
def test_a_damaged_schema_is_moved_aside_with_one_warning(empty_cache, damage):
    path = _made(empty_cache)
    with sqlite3.connect(path) as raw:
        raw.execute("DROP INDEX IF EXISTS measurements_near")
        raw.execute(damage)
        assert raw.execute("PRAGMA user_version").fetchone()[0] == 1
    found = _warnings_of(lambda: (_product_works(), _product_works((31, 7, 3), seed=1)))
    assert len(found) == 1 and "damaged schema" in found[0] and "moved it to" in found[0]
    assert state.store().persistent  # rebuilt
    aside = [f for f in empty_cache.glob(f"{DB_NAME}.corrupt-*") if not f.name.endswith(("-wal", "-shm"))]
    assert len(aside) == 1


@pytest.mark.parametrize("version", [2, 99, -1])
def test_a_foreign_schema_version_leaves_the_file_alone_or_moves_it(empty_cache, version):
    path = _made(empty_cache)
    with sqlite3.connect(path) as raw:
        raw.execute(f"PRAGMA user_version = {version}")
    found = _warnings_of(lambda: (_product_works(), _product_works((31, 7, 3), seed=1)))
    assert len(found) == 1
    if version > 1:  # a newer gemmzoo's: untouched, answers in memory
        assert "schema version" in found[0] and not state.store().persistent and path.exists()
    else:
        assert "moved it to" in found[0] and state.store().persistent


_HOLDER = textwrap.dedent("""
    import sqlite3, sys, time
    raw = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=0)
    if sys.argv[2] == "rollback":
        raw.execute("PRAGMA journal_mode=DELETE")
        raw.execute("BEGIN EXCLUSIVE")  # readers wait too
    else:
        raw.execute("BEGIN IMMEDIATE")  # another writer
        raw.execute("INSERT INTO bandwidth VALUES ('x', 1.0, 0.0)")
    print("locked", flush=True)
    time.sleep(float(sys.argv[3]))
""")


@contextlib.contextmanager
def _locked(path: Path, mode: str) -> Iterator[None]:
    holder = subprocess.Popen([sys.executable, "-c", _HOLDER, str(path), mode, "60"],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        yield
    finally:
        holder.kill()
        holder.wait()


@pytest.mark.parametrize("mode", ["writer", "rollback"])
@pytest.mark.parametrize("verdict", ["stored", "none"])
def test_a_locked_database_never_holds_matmul_back_long(empty_cache, mode, verdict):
    path = _made(empty_cache) if verdict == "stored" else None
    if path is None:  # an empty database: the default pick's suite runs under the lock
        open_store(empty_cache).close()
        path = empty_cache / DB_NAME
    with _locked(path, mode):
        start = time.perf_counter()
        found = _warnings_of(_product_works)
        took = time.perf_counter() - start
        assert took < 2.5, f"gemmzoo.matmul waited {took:.1f} s on the lock"
        start = time.perf_counter()
        _product_works((12, 34, 56), seed=2)  # another new problem: no second long wait
        assert time.perf_counter() - start < 2.5
    assert len(found) <= 1 and all("locked" in w for w in found)
    if mode == "rollback":
        assert len(found) == 1  # readers were shut out: answered without the database, said once


def test_the_nearest_shape_query_reads_an_index_only(empty_cache):
    store = open_store(empty_cache)
    store.close()
    with sqlite3.connect(empty_cache / DB_NAME) as raw:
        for boxed in (True, False):
            args = ("device", "float32", "NN", "numpy", "versions") + ((1, 2, 3, 4, 5, 6) if boxed else ())
            plan = " ".join(row[-1] for row in raw.execute("EXPLAIN QUERY PLAN " + near_sql(boxed), args))
            assert "COVERING INDEX measurements_near" in plan, plan
            assert "SCAN" not in plan, plan
            if boxed:
                assert "m>? AND m<?" in plan, plan  # the range of M is searched, not filtered


def test_a_verdict_row_that_cannot_be_read_counts_as_none(empty_cache):
    from gemmzoo.tuning.fingerprint import device_fingerprint
    from gemmzoo.tuning.tune import verdict_versions

    path = _made(empty_cache)
    numpy_backend = gemmzoo.get_backend("numpy")
    key = (device_fingerprint("cpu"), verdict_versions(numpy_backend), "numpy", "float64")
    with sqlite3.connect(path) as raw:
        raw.execute("INSERT INTO conformance (device, versions, backend, dtype, passed, checks, failures, "
                    "detail, created) VALUES (?, ?, ?, ?, 'no', 1, 0, '', 0)", key)
    store = open_store(empty_cache)
    found = _warnings_of(lambda: store.conformance(*key))
    assert store.conformance(*key) is None
    assert len(found) == 1 and "cannot read" in found[0]
    store.close()
