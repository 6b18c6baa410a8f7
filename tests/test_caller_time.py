"""Caller time in the tuning store and in best_backend's ranking, and the schema migration that
added host time; stored rows with chosen numbers make the expected answers certain."""

from __future__ import annotations

import dataclasses
import sqlite3
import time

import pytest
from test_best_backend import (  # noqa: F401  (fresh: autouse fixture)
    FAST,
    SLOW,
    forbid_measuring,
    fresh,
    passed_here,
    row,
    store_rows,
)

from gemmzoo.cli import main
from gemmzoo.tuning import explain, state
from gemmzoo.tuning.db import SCHEMA_VERSION, open_store

SHAPE = (64, 64, 64)


def test_a_launch_bound_backend_loses_on_caller_time_and_wins_on_device_time(monkeypatch):
    forbid_measuring(monkeypatch)
    # FAST: 6 us of GEMM but 70 us of host time per call; SLOW: 10 us of GEMM, 15 us of host time
    store_rows(dataclasses.replace(row(FAST, SHAPE, 6e-6), host_s=70e-6, host_spread_s=1e-6),
           dataclasses.replace(row(SLOW, SHAPE, 10e-6), host_s=15e-6, host_spread_s=1e-6))
    by_caller = explain(SHAPE, measure=False)
    assert by_caller.backend.name == SLOW and not by_caller.tie
    assert {t.backend: t.bound for t in by_caller.ranking} == {SLOW: "host", FAST: "host"}
    assert by_caller.ranking[0].median_s == pytest.approx(15e-6)
    by_device = explain(SHAPE, measure=False, by="device")
    assert by_device.backend.name == FAST
    assert all(t.bound == "device" for t in by_device.ranking)
    with pytest.raises(ValueError, match="caller"):
        explain(SHAPE, measure=False, by="wall")


def test_rows_without_host_time_rank_by_device_time(monkeypatch):
    forbid_measuring(monkeypatch)
    store_rows(row(FAST, SHAPE, 6e-6), row(SLOW, SHAPE, 10e-6))
    assert explain(SHAPE, measure=False).backend.name == FAST


def test_best_command_says_which_bound_decided(monkeypatch, capsys):
    forbid_measuring(monkeypatch)
    store_rows(dataclasses.replace(row(FAST, SHAPE, 6e-6), host_s=70e-6, host_spread_s=1e-6),
           dataclasses.replace(row(SLOW, SHAPE, 10e-6), host_s=15e-6, host_spread_s=1e-6))
    assert main(["best", "64", "64", "64", "--device", "cpu", "--no-measure"]) == 0
    out = capsys.readouterr().out
    assert SLOW in out.splitlines()[0] and "caller time" in out and "launch-bound" in out
    assert main(["best", "64", "64", "64", "--device", "cpu", "--no-measure", "--by", "device"]) == 0
    out = capsys.readouterr().out
    assert FAST in out.splitlines()[0] and "ranked by: device time" in out


def test_tuning_stores_host_time():
    from gemmzoo.problems.grids import GridPoint
    from gemmzoo.tuning import tune

    records = tune([GridPoint(32, 24, 16)], budget_s=0.01)
    assert records and all(r.host_s is not None and r.host_s > 0 for r in records)
    assert all(r.caller_s == (r.loop_s if r.loop_s is not None else max(r.median_s, r.host_s))
               for r in records)
    stored = state.store().records(records[0].device, "float32", "NN", (32, 24, 16))
    assert {r.host_s for r in stored} == {r.host_s for r in records}


def test_a_database_without_host_time_gains_its_columns_and_keeps_its_rows(tmp_path):
    path = tmp_path / "tuning.sqlite3"
    db = sqlite3.connect(path)
    db.executescript("""
        CREATE TABLE measurements (id INTEGER PRIMARY KEY, device TEXT NOT NULL, versions TEXT NOT NULL,
            backend TEXT NOT NULL, m INTEGER NOT NULL, n INTEGER NOT NULL, k INTEGER NOT NULL,
            dtype TEXT NOT NULL, layout TEXT NOT NULL, status TEXT NOT NULL, median_s REAL, spread_s REAL,
            error_ratio REAL, samples INTEGER, detail TEXT NOT NULL, created REAL NOT NULL);
        CREATE TABLE conformance (id INTEGER PRIMARY KEY, device TEXT NOT NULL, versions TEXT NOT NULL,
            backend TEXT NOT NULL, dtype TEXT NOT NULL, passed INTEGER NOT NULL, checks INTEGER NOT NULL,
            failures INTEGER NOT NULL, detail TEXT NOT NULL, created REAL NOT NULL);
        PRAGMA user_version = 1;
    """)
    db.execute("INSERT INTO measurements (device, versions, backend, m, n, k, dtype, layout, status, "
               "median_s, spread_s, error_ratio, samples, detail, created) VALUES "
               "('dev', 'v', 'old', 2, 3, 4, 'float32', 'NN', 'ok', 0.25, 0.01, 0.5, 9, '', ?)",
               (time.time(),))
    db.commit()
    db.close()
    store = open_store(tmp_path)
    [old] = store.records("dev", "float32", "NN")
    assert old.backend == "old" and old.median_s == 0.25 and old.host_s is None and old.caller_s == 0.25
    store.add([dataclasses.replace(old, host_s=0.5, host_spread_s=0.01)])
    assert [r.caller_s for r in store.records("dev", "float32", "NN")] == [0.25, 0.5]
    store.add_bandwidth("dev", 3.0e12)
    assert store.bandwidth("dev") == 3.0e12 and store.bandwidth("other") is None
    store.close()
    (version,) = sqlite3.connect(path).execute("PRAGMA user_version").fetchone()
    assert version == SCHEMA_VERSION
