"""Loops of calls timed for the near-fastest backends, and caller-time ranking by them: which
backends contend, that their loops are stored with one timestamp, when the loop times rank, and
the schema that carries them."""

from __future__ import annotations

import dataclasses
import sqlite3
import time

import numpy as np
import pytest
from sessions import restart
from test_best_backend import (  # noqa: F401  (fresh: autouse fixture)
    FAST,
    SLOW,
    forbid_measuring,
    fresh,
    passed_here,
    row,
    store_rows,
)
from tuning_fakes import DelayedBackend, registry_with

from gemmzoo.problems.grids import GridPoint
from gemmzoo.tuning import explain, state
from gemmzoo.tuning.db import open_store
from gemmzoo.tuning.schema import RowError, check_measurement
from gemmzoo.tuning.tune import (
    CONTENDER_RATIO,
    LOOP_LIMIT_S,
    MAX_CONTENDERS,
    LoopPolicy,
    contenders,
    measure_records,
)

SHAPE = (64, 64, 64)


def _looped(record, loop_s, created):
    return dataclasses.replace(record, loop_s=loop_s, loop_spread_s=loop_s / 50, created=created)


def test_contenders_are_the_near_fastest_by_device_time():
    best = 10e-6
    rows = [
        dataclasses.replace(row("a-fake", SHAPE, best)),  # the fastest caller time
        dataclasses.replace(row("b-fake", SHAPE, best * (CONTENDER_RATIO - 0.02))),
        dataclasses.replace(row("c-fake", SHAPE, best * (CONTENDER_RATIO + 0.05))),  # too slow
        # launch-bound: slow caller time, but a device time that could win
        dataclasses.replace(row("d-fake", SHAPE, best / 2), host_s=best * 3),
        row("e-fake", SHAPE, best / 4, status="failed"),
        row("f-fake", SHAPE, None, status="failed"),
    ]
    assert contenders(rows) == [0, 1, 3]
    many = [row(f"g{i}-fake", SHAPE, best * (1 + i / 100)) for i in range(MAX_CONTENDERS + 3)]
    assert contenders(many) == list(range(MAX_CONTENDERS))


def test_no_loops_for_a_lone_contender_or_long_calls():
    assert contenders([row("a-fake", SHAPE, 10e-6), row("b-fake", SHAPE, 20e-6)]) == []
    assert contenders([row("a-fake", SHAPE, 10e-6)]) == []
    assert contenders([]) == []
    long = LOOP_LIMIT_S * 1.5
    assert contenders([row("a-fake", SHAPE, long), row("b-fake", SHAPE, long * 1.01)]) == []


def test_the_loop_policy_is_an_argument():
    rows = [row("a-fake", SHAPE, 0.003), row("b-fake", SHAPE, 0.003 * 1.5), row("c-fake", SHAPE, 0.003 * 1.6)]
    assert contenders(rows) == []  # above the default limit, and b and c beyond the default ratio
    assert contenders(rows, LoopPolicy(limit_s=0.01)) == []  # under the limit: still a lone contender
    assert contenders(rows, LoopPolicy(ratio=2.0, limit_s=0.01)) == [0, 1, 2]
    assert contenders(rows, LoopPolicy(ratio=2.0, max_contenders=2, limit_s=0.01)) == [0, 1]
    assert LoopPolicy() == LoopPolicy(CONTENDER_RATIO, MAX_CONTENDERS, LOOP_LIMIT_S)
    for bad in ({"ratio": 0.5}, {"max_contenders": 1}, {"limit_s": -1.0}, {"limit_s": float("nan")}):
        with pytest.raises(ValueError, match="LoopPolicy"):
            LoopPolicy(**bad)


def test_loop_times_decide_where_one_round_measured_them(monkeypatch):
    forbid_measuring(monkeypatch)
    created = time.time() - 5
    # caches flushed, FAST is ahead; in loops on the same operands SLOW is
    store_rows(_looped(row(FAST, SHAPE, 10e-6), 12e-6, created),
               _looped(row(SLOW, SHAPE, 10.5e-6), 8e-6, created))
    choice = explain(SHAPE, measure=False)
    assert choice.backend.name == SLOW and not choice.tie
    assert {t.backend: (t.bound, t.median_s) for t in choice.ranking} == {SLOW: ("loop", 8e-6),
                                                                           FAST: ("loop", 12e-6)}
    by_device = explain(SHAPE, measure=False, by="device")
    assert by_device.backend.name == FAST and all(t.bound == "device" for t in by_device.ranking)


def test_loop_times_from_two_rounds_or_older_than_a_row_do_not_rank(monkeypatch):
    forbid_measuring(monkeypatch)
    created = time.time() - 5
    store_rows(_looped(row(FAST, SHAPE, 10e-6), 12e-6, created),
           _looped(row(SLOW, SHAPE, 10.5e-6), 8e-6, created - 1))
    two_rounds = explain(SHAPE, measure=False)
    assert two_rounds.backend.name == FAST and all(t.bound == "device" for t in two_rounds.ranking)
    state.store().add([_looped(row(SLOW, SHAPE, 10.5e-6), 8e-6, created)])
    assert explain(SHAPE, measure=False).backend.name == SLOW  # one round again: the loops rank
    state.store().add([dataclasses.replace(row(FAST, SHAPE, 10e-6), created=created + 1)])  # measured again
    newer = explain(SHAPE, measure=False)
    assert newer.backend.name == FAST and all(t.bound == "device" for t in newer.ranking)


def test_loop_times_do_not_rank_while_a_contender_has_none(monkeypatch):
    forbid_measuring(monkeypatch)
    created = time.time() - 5
    # FAST measured earlier without loops; SLOW alone since, with a loop: near FAST when flushed
    store_rows(row(FAST, SHAPE, 10e-6), _looped(row(SLOW, SHAPE, 10.5e-6), 8e-6, created + 1))
    assert [t.bound for t in explain(SHAPE, measure=False).ranking] == ["device", "device"]
    assert explain(SHAPE, measure=False).backend.name == FAST


class WarmBackend(DelayedBackend):
    """As slow as a steady twin on new operands, three times faster on the operands of its last
    call: a backend whose time on ever new operands hides what a loop of calls gets."""

    def __init__(self, name: str, cold_s: float, warm_s: float) -> None:
        super().__init__(name, cold_s)
        self.cold_s, self.warm_s = cold_s, warm_s
        self._last: tuple[int, int] | None = None

    def matmul(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        seen = (id(a), id(b))
        self.delay_s = self.warm_s if seen == self._last else self.cold_s
        self._last = seen
        return super().matmul(a, b)


def test_a_miss_times_the_contenders_loops_and_ranks_by_them(monkeypatch):
    # a loaded machine stretches sleeps unevenly: the margins here are not what is tested
    loops = LoopPolicy(ratio=2.0, limit_s=0.05)
    warm = WarmBackend("warm-fake", 0.003, 0.001)
    steady = DelayedBackend("steady-fake", 0.003)
    restart(registry=registry_with(warm, steady), loops=loops)  # measured and ranked under it
    point = GridPoint(*SHAPE)
    records = measure_records([warm, steady], point, 0.05, verify=True)
    assert [r.status for r in records] == ["ok", "ok"]
    assert len({r.created for r in records}) == 1
    by_name = {r.backend: r for r in records}
    assert all(r.loop_s is not None and r.loop_spread_s is not None for r in records)
    assert by_name["warm-fake"].loop_s < 0.6 * by_name["steady-fake"].loop_s
    assert by_name["steady-fake"].loop_s >= 0.003
    state.store().add(records)
    passed_here("warm-fake", "steady-fake")
    forbid_measuring(monkeypatch)
    choice = explain(SHAPE, measure=False)
    assert choice.backend.name == "warm-fake" and choice.timing.bound == "loop"


def test_loop_times_are_stored_exported_and_checked(tmp_path):
    store = open_store(tmp_path)
    record = _looped(row(FAST, SHAPE, 10e-6), 12e-6, time.time())
    store.add([record])
    [back] = store.records(record.device, "float32", "NN", SHAPE)
    assert (back.loop_s, back.loop_spread_s) == (record.loop_s, record.loop_spread_s)
    assert back.caller_s == 12e-6 and dataclasses.replace(back, loop_s=None).caller_s == 10e-6
    store.close()
    fields = {"device": {"kind": "cpu"}, "versions": {}, "backend": FAST, "m": 1, "n": 2, "k": 3,
              "dtype": "float32", "layout": "NN", "status": "ok", "median_s": 1e-5, "spread_s": 0.0,
              "error_ratio": 0.5, "samples": 3, "detail": "", "created": time.time(), "loop_s": 2e-5,
              "loop_spread_s": 0.0}
    check_measurement(fields)
    for bad in (-1.0, float("nan"), "fast"):
        with pytest.raises(RowError, match="loop_s"):
            check_measurement({**fields, "loop_s": bad})


def test_a_database_with_host_time_but_no_loops_gains_their_columns(tmp_path):
    path = tmp_path / "tuning.sqlite3"
    store = open_store(tmp_path)
    store.add([row(FAST, SHAPE, 10e-6)])
    store.close()
    db = sqlite3.connect(path)
    db.execute("ALTER TABLE measurements DROP COLUMN loop_s")
    db.execute("ALTER TABLE measurements DROP COLUMN loop_spread_s")
    db.commit()
    db.close()
    store = open_store(tmp_path)
    [old] = store.records(device_of(FAST), "float32", "NN", SHAPE)
    assert old.median_s == 10e-6 and old.loop_s is None
    store.add([_looped(old, 7e-6, time.time())])
    assert [r.caller_s for r in store.records(device_of(FAST), "float32", "NN", SHAPE)] == [10e-6, 7e-6]
    store.close()


def device_of(name: str) -> str:
    return row(name, SHAPE, 1.0).device



def test_a_miss_makes_the_operands_once_for_the_measurements_and_the_loops(monkeypatch):
    # two backends converting arrays with the same code share one problem's operands: made once
    # for both measurements and for both loops of calls
    from gemmzoo import measure
    from gemmzoo.measure import measurement

    made = []
    real = measure.make_problem

    def counted(backend, point, *rest):
        made.append(backend.name)
        return real(backend, point, *rest)

    monkeypatch.setattr(measure, "make_problem", counted)
    monkeypatch.setattr(measurement, "make_problem", counted)
    loops = LoopPolicy(ratio=2.0, limit_s=0.05)
    first, second = DelayedBackend("first-fake", 0.002), DelayedBackend("second-fake", 0.002)
    restart(registry=registry_with(first, second), loops=loops)
    records = measure_records([first, second], GridPoint(48, 40, 24), 0.03, verify=True)
    assert [r.status for r in records] == ["ok", "ok"]
    assert all(r.loop_s is not None for r in records)  # the loops ran, on those operands
    assert made == ["first-fake"]
