"""The tuning database under faults: broken files, unusable directories, many writers at once."""

from __future__ import annotations

import dataclasses
import os
import sqlite3
import subprocess
import sys
import textwrap
import time
import warnings
from pathlib import Path

import pytest
from sessions import reconfigure, scoped

from gemmzoo.tuning import Record, TuningCacheWarning, open_store, state
from gemmzoo.tuning.db import DB_NAME, SCHEMA_VERSION


@pytest.fixture(autouse=True)
def fresh_state():
    with scoped():
        yield


def record(i: int, backend: str = "numpy") -> Record:
    return Record("device", "versions", backend, i + 1, 2 * i + 1, 3 * i + 1, "float32", "NN", "ok",
                  1e-3 + i * 1e-6, 1e-5, 0.25, 7, "", time.time())


def filled(directory: Path, rows: int = 300) -> Path:
    store = open_store(directory)
    store.add(record(i) for i in range(rows))
    assert store.count() == rows
    store.close()
    return directory / DB_NAME


def open_warned(directory: Path):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        store = open_store(directory)
    return store, [w for w in caught if issubclass(w.category, TuningCacheWarning)]


def test_rows_round_trip_with_a_versioned_schema(tmp_path):
    path = filled(tmp_path, 5)
    store = open_store(tmp_path)
    got = store.records("device", "float32", "NN", (3, 5, 7))
    assert len(got) == 1 and got[0] == dataclasses.replace(record(2), created=got[0].created)
    store.close()
    with sqlite3.connect(path) as raw:
        assert raw.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert raw.execute("SELECT count(*) FROM measurements").fetchone()[0] == 5


@pytest.mark.parametrize("damage", ["half", "header", "one-page", "garbage", "text"])
def test_a_broken_file_is_moved_aside_once_and_rebuilt(tmp_path, damage):
    path = filled(tmp_path)
    size = path.stat().st_size
    if damage == "half":
        os.truncate(path, size // 2)
    elif damage == "header":
        os.truncate(path, 60)
    elif damage == "one-page":
        os.truncate(path, 4096)
    elif damage == "garbage":
        path.write_bytes(os.urandom(16384))
    else:
        path.write_text("not a database\n" * 100)
    store, caught = open_warned(tmp_path)
    assert len(caught) == 1 and "moved it to" in str(caught[0].message)
    aside = list(tmp_path.glob(f"{DB_NAME}.corrupt-*"))
    assert len(aside) == 1 and aside[0].stat().st_size > 0
    assert store.persistent and store.count() == 0
    store.add([record(1)])
    store.close()
    again, caught = open_warned(tmp_path)  # the rebuilt file is healthy: no more warnings
    assert caught == [] and again.count() == 1
    again.close()


def test_a_foreign_sqlite_file_is_moved_aside(tmp_path):
    with sqlite3.connect(tmp_path / DB_NAME) as raw:
        raw.execute("CREATE TABLE other (x)")
    store, caught = open_warned(tmp_path)
    assert len(caught) == 1 and "not a gemmzoo tuning database" in str(caught[0].message)
    assert store.persistent and store.count() == 0
    store.close()


def test_a_newer_schema_is_left_alone(tmp_path):
    path = filled(tmp_path, 3)
    with sqlite3.connect(path) as raw:
        raw.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    before = path.read_bytes()
    store, caught = open_warned(tmp_path)
    assert len(caught) == 1 and "schema version" in str(caught[0].message)
    assert not store.persistent and store.count() == 0
    store.close()
    assert path.read_bytes() == before


def _unusable_dirs(tmp_path: Path) -> list[Path]:
    blocker = tmp_path / "a-file"
    blocker.write_text("a regular file where a directory should be")
    return [blocker / "cache", Path("/proc/gemmzoo-cannot-exist") / str(os.getpid())]


@pytest.mark.parametrize("which", [0, 1], ids=["under-a-regular-file", "under-proc"])
def test_an_unusable_directory_degrades_to_memory_with_one_warning(tmp_path, monkeypatch, which):
    # chmod does not stop root (CI runs as root): these paths fail for every user
    directory = _unusable_dirs(tmp_path)[which]
    monkeypatch.setenv("GEMMZOO_CACHE_DIR", str(directory))
    monkeypatch.setenv("GEMMZOO_BACKENDS", "numpy")
    reconfigure()
    import gemmzoo

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        first = gemmzoo.best_backend((8, 8, 8))
        assert gemmzoo.best_backend((9, 9, 9)) is first  # a second question, same process
    ours = [w for w in caught if issubclass(w.category, TuningCacheWarning)]
    assert len(ours) == 1 and "in memory" in str(ours[0].message)
    assert first.name == "numpy" and not state.store().persistent
    assert state.store().count() == 2  # measurements still kept, in memory
    assert not directory.exists()


_WRITER = textwrap.dedent("""
    import sys, time
    from gemmzoo.problems.grids import GridPoint
    from gemmzoo.tuning import Record, state, tune
    worker, start_at = int(sys.argv[1]), float(sys.argv[2])
    while time.time() < start_at:  # every process opens the database at the same moment
        time.sleep(0.001)
    store = state.store()
    tune([GridPoint(100 + worker, 10 + j, 8) for j in range(4)], ["numpy"], budget_s=0.001, verify=False)
    for i in range(40):
        store.add([Record("device", "versions", "numpy", 1000 + worker, i, 1, "float32", "NN", "ok",
                          1.0, 0.0, 0.0, 1, "", time.time())])
""")


def test_eight_processes_tuning_at_once_lose_nothing(tmp_path):
    env = {**os.environ, "GEMMZOO_CACHE_DIR": str(tmp_path), "OMP_NUM_THREADS": "1"}
    start_at = time.time() + 2.0
    workers = [subprocess.Popen([sys.executable, "-c", _WRITER, str(w), str(start_at)], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
               for w in range(8)]
    outputs = [w.communicate(timeout=120) for w in workers]
    for worker, (_out, err) in zip(workers, outputs, strict=True):
        assert worker.returncode == 0, err
        assert "locked" not in err and "Warning" not in err, err
    with sqlite3.connect(tmp_path / DB_NAME) as raw:
        rows = set(raw.execute("SELECT m, n, k FROM measurements WHERE status = 'ok'").fetchall())
        total = raw.execute("SELECT count(*) FROM measurements").fetchone()[0]
        verdicts = raw.execute("SELECT count(*), min(passed) FROM conformance").fetchone()
    expected = {(100 + w, 10 + j, 8) for w in range(8) for j in range(4)}
    expected |= {(1000 + w, i, 1) for w in range(8) for i in range(40)}
    assert rows == expected and total == len(expected) == 8 * 44
    assert verdicts[0] >= 1 and verdicts[1] == 1


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
def test_a_forked_child_opens_its_own_connection(tmp_path, monkeypatch):
    monkeypatch.setenv("GEMMZOO_CACHE_DIR", str(tmp_path))
    reconfigure()
    parent = state.store()
    parent.add([record(0)])
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: a new connection, and its rows land in the same file
        try:
            child = state.store()
            child.add([record(1)])
            os.write(write, b"ok" if child is not parent else b"shared")
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    assert os.read(read, 16) == b"ok"
    assert parent.count() == 2
