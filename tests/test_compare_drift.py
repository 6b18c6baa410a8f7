"""A machine that moves between two runs: ``gemmzoo compare`` judges each row relative to the
machine's calibration (gemmzoo.measure.calibration), so a backend slowed by 25% is SLOWER when the
whole machine ran 2x slower or faster meanwhile, and the machine's move alone is never SLOWER.

The timings here come from a fake machine (a clock that advances by the work each GEMM does,
times the machine's slowness), not from the real clock: nothing asserts on how fast this machine
is or how busy it is."""

from __future__ import annotations

import json
import math
import random
import re
import types
from pathlib import Path

import numpy as np
import pytest
import slowed_plugin

from gemmzoo.cli import main
from gemmzoo.measure import calibration, timers
from gemmzoo.measure.calibration import SHARE, CalibrationWork
from gemmzoo.problems.grids import GridPoint
from gemmzoo.results.compare import (
    AMBIGUOUS,
    FASTER,
    MAX_MACHINE_MOVE,
    MOVED_TOO_FAR,
    SAME,
    SLOWER,
    compare_runs,
    judge,
)
from gemmzoo.results.runs import load_run, result_from_dict
from gemmzoo.scale.bench import OK, _ok, bench_one
from gemmzoo_numpy import NumpyBackend

POINT = GridPoint(160, 160, 160, "float32")  # twice the work of a calibration call
FLOPS_PER_SECOND = 1e9  # the fake machine's speed at slowness 1


class FakeMachine:
    """A clock that advances only by the GEMMs run: each costs its multiply-adds over
    :data:`FLOPS_PER_SECOND`, times ``slowness``, give or take a fixed 1% wobble."""

    def __init__(self) -> None:
        self.now = 0.0
        self.slowness = 1.0
        self._wobble = 0

    def perf_counter(self) -> float:
        return self.now

    def charge(self, a: np.ndarray, b: np.ndarray) -> None:
        self._wobble += 1
        wobble = 1 + 0.01 * math.sin(self._wobble)
        self.now += 2 * a.shape[0] * a.shape[1] * b.shape[1] / FLOPS_PER_SECOND * self.slowness * wobble


class _Unshared:
    """The contention watch of a machine nobody else uses (the fake clock's wall time is not the
    process's CPU time)."""

    def __init__(self, threads: int = 1) -> None:
        self.threads = threads

    def start(self) -> None:
        pass

    def stop(self) -> None:
        return None


@pytest.fixture
def machine(monkeypatch: pytest.MonkeyPatch) -> FakeMachine:
    """Timing reads the fake machine's clock; NumPy's backend and the calibration GEMM charge it."""
    fake = FakeMachine()
    clock = types.SimpleNamespace(perf_counter=fake.perf_counter)
    monkeypatch.setattr(timers, "time", clock)
    monkeypatch.setattr(calibration, "time", clock)
    monkeypatch.setattr(timers, "ContentionWatch", _Unshared)
    product = NumpyBackend.matmul

    def metered_backend(self: NumpyBackend, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        fake.charge(a, b)
        return product(self, a, b)

    real_matmul = np.matmul

    def metered_matmul(a: np.ndarray, b: np.ndarray, *args: object, **kwargs: object) -> np.ndarray:
        fake.charge(a, b)
        return real_matmul(a, b, *args, **kwargs)

    monkeypatch.setattr(NumpyBackend, "matmul", metered_backend)
    monkeypatch.setattr(np, "matmul", metered_matmul)  # the calibration's GEMM
    return fake


def _bench_row(monkeypatch: pytest.MonkeyPatch, machine: FakeMachine, slowness: float | list[float],
               extra: float) -> dict:
    """One row of ``gemmzoo bench`` for slowed-numpy on the fake machine, as its file holds it;
    a list of slownesses: one round at each, merged as ``gemmzoo bench --rounds`` merges them."""
    monkeypatch.setenv(slowed_plugin.VARIABLE, str(extra))
    backend, measured = slowed_plugin.SlowedNumpy(), None
    for each in slowness if isinstance(slowness, list) else [slowness]:
        machine.slowness = each
        result = bench_one(backend, POINT, budget_s=0.5, threads=1, timeout=None, verify=measured is None)
        assert result.status == OK and result.measurement is not None, result.detail
        measured = result.measurement if measured is None else measured.merged(result.measurement)
    return _ok(backend, POINT, measured).as_dict()


def _write(path: Path, results: list[dict]) -> str:
    path.write_text(json.dumps({"format": "gemmzoo-results", "version": 1, "created": "2026-11-27T10:00:00",
                                "environment": {"cpu": {"device_name": "fake cpu"}}, "results": results}))
    return str(path)


def _cell(tmp_path: Path, base: dict, other: dict):
    runs = [load_run(_write(tmp_path / "base.json", [base])),
            load_run(_write(tmp_path / "other.json", [other]))]
    [row] = compare_runs(runs)
    return row.cells[1]


def _uncalibrated(record: dict) -> dict:
    """The row as a file written before calibrations existed would hold it."""
    return {key: value for key, value in record.items()
            if not key.startswith(("calibration", "in_calibrations"))}


@pytest.mark.parametrize("slowness", [2.0, 0.5])
def test_a_slowed_backend_is_slower_when_the_whole_machine_moved(monkeypatch, machine, tmp_path, slowness):
    base = _bench_row(monkeypatch, machine, 1.0, 0)
    slow = _bench_row(monkeypatch, machine, slowness, 0.25)
    assert base["calibration"] == slow["calibration"] == calibration.workload(1)
    assert f"numpy {np.__version__} float32 128x128x128, 1 thread, " in base["calibration"]
    assert base["calibration_samples"] >= calibration.MIN_SAMPLES
    cell = _cell(tmp_path, base, slow)
    assert cell.verdict == SLOWER
    assert cell.machine == pytest.approx(slowness, rel=0.03)
    assert cell.relative_diff == pytest.approx(0.25, abs=0.03)
    assert cell.diff == pytest.approx(1.25 * slowness - 1, abs=0.05)
    assert any(flag.startswith("machine ") for flag in cell.flags)
    # the same two files without their calibrations read the machine's move as the backend's
    as_measured = _cell(tmp_path, _uncalibrated(base), _uncalibrated(slow))
    assert as_measured.verdict == (SLOWER if slowness > 1 else FASTER)
    assert as_measured.machine is None and as_measured.relative_diff is None


@pytest.mark.parametrize("slowness", [2.0, 0.5])
def test_the_machine_moving_alone_is_not_slower(monkeypatch, machine, tmp_path, slowness):
    base = _bench_row(monkeypatch, machine, 1.0, 0)
    again = _bench_row(monkeypatch, machine, slowness, 0)
    cell = _cell(tmp_path, base, again)
    assert cell.verdict == SAME
    assert cell.machine == pytest.approx(slowness, rel=0.03)
    assert abs(cell.relative_diff) < 0.03
    assert _cell(tmp_path, _uncalibrated(base), _uncalibrated(again)).verdict in (SLOWER, FASTER)


@pytest.mark.parametrize(("extra", "expected"), [(0.25, SLOWER), (0, SAME)])
def test_a_machine_that_moves_during_a_run_is_judged_in_calibrations(monkeypatch, machine, tmp_path, extra,
                                                                     expected):
    """The machine runs 2x slower in the middle round of the second run's three: its row's seconds
    spread over both speeds, its row in calibrations does not."""
    base = _bench_row(monkeypatch, machine, [1.0, 1.0, 1.0], 0)
    moving = _bench_row(monkeypatch, machine, [1.0, 2.0, 1.0], extra)
    assert moving["q3_s"] / moving["q1_s"] > 1.2  # the seconds spread over both speeds
    assert moving["in_calibrations_q3"] / moving["in_calibrations_q1"] < 1.1
    assert moving["in_calibrations_converged"] is True
    cell = _cell(tmp_path, base, moving)
    assert cell.verdict == expected
    assert cell.relative_diff == pytest.approx(extra, abs=0.03)
    # in seconds the slowdown hides in the spread (and a missed noise target)
    as_measured = _cell(tmp_path, _uncalibrated(base), _uncalibrated(moving))
    assert as_measured.verdict == (AMBIGUOUS if extra else SAME)


def test_compare_says_the_machine_moved_and_judges_relative_to_it(monkeypatch, machine, tmp_path, capsys):
    base = _write(tmp_path / "base.json", [_bench_row(monkeypatch, machine, 1.0, 0)])
    drift = _write(tmp_path / "drift.json", [_bench_row(monkeypatch, machine, 2.0, 0)])
    slow = _write(tmp_path / "slow.json", [_bench_row(monkeypatch, machine, 2.0, 0.25)])
    assert main(["compare", base, drift, "--all", "--format", "plain"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"machine: (1\.9\d|2\.0\d)x slower than the baseline's", out) and "SAME" in out
    assert "relative to the machine" in out
    assert main(["compare", base, slow, "--format", "json"]) == 1
    data = json.loads(capsys.readouterr().out)
    [row] = data["rows"]
    assert row["verdict"] == SLOWER and row["machine"] == pytest.approx(2.0, rel=0.03)
    assert row["relative_diff"] == pytest.approx(0.25, abs=0.03)
    assert re.search(r"machine (1\.9\d|2\.0\d)x slower", row["flags"])
    assert data["runs"][1]["machine"] == pytest.approx(2.0, rel=0.03)


def test_calibration_keeps_its_share_of_the_samples(monkeypatch):
    """Between the backend's samples the calibration takes about SHARE of their time."""
    fake = FakeMachine()
    monkeypatch.setattr(calibration, "time", types.SimpleNamespace(perf_counter=fake.perf_counter))
    fake.slowness = 0.01  # a calibration call shorter than most of the backend's samples
    work = CalibrationWork(1)
    cost = 2 * 128**3 / FLOPS_PER_SECOND * fake.slowness
    work._matmul = lambda a, b, out: fake.charge(a, b)
    backend_total = 0.0
    for seconds in (3e-4, 1e-5, 2e-3, 5e-4) * 25:
        work.after(seconds)
        backend_total += seconds
    report = work.report()
    spent = sum(work.samples)
    # each call counts as the calibration's median at most: a call above it (the 1% wobble) adds
    assert SHARE * backend_total <= spent <= 1.01 * SHARE * backend_total + 1.02 * cost
    assert report.timing.samples == len(work.samples)
    assert report.workload == calibration.workload(1)
    assert report.timing.median_s == pytest.approx(cost, rel=0.02)


def test_one_preempted_calibration_call_does_not_stop_the_calibration(monkeypatch):
    fake = FakeMachine()
    fake.slowness = 0.01
    monkeypatch.setattr(calibration, "time", types.SimpleNamespace(perf_counter=fake.perf_counter))
    work = CalibrationWork(1)
    calls = []

    def charged(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
        calls.append(1)
        fake.charge(a, b)
        if len(calls) == 3:
            fake.now += 0.05  # preempted: a thousand times its usual length

    work._matmul = charged
    for _ in range(40):
        work.after(4e-4)
    after_the_stall = len(work.samples) - 3
    expected = 40 * SHARE * 4e-4 / (2 * 128**3 / FLOPS_PER_SECOND * 0.01)
    assert after_the_stall >= 0.9 * expected  # without the cap: none for 125 of the backend's samples
    assert len(work.relative) == 40 and max(work.relative) / min(work.relative) < 1.05


# -- the rules on result records ---------------------------------------------------------------


def _record(median: float = 1e-3, iqr: float = 0.02, calibration_s: float | None = 4e-5,
            workload: str = "numpy 2.4.6 float32 128x128x128, 1 thread, fake cpu",
            relative_iqr: float | None = None, **extra) -> dict:
    """A row whose row in calibrations is its median over the calibration's, with the row's IQR
    (or ``relative_iqr``)."""
    record = {"backend": "numpy", "device": "cpu", "m": 64, "n": 64, "k": 64, "dtype": "float32",
              "layout": "NN", "status": "ok", "median_s": median, "q1_s": median * (1 - iqr / 2),
              "q3_s": median * (1 + iqr / 2), "samples": 60, "method": "wall clock", "detail": ""}
    if calibration_s is not None:
        relative, spread = median / calibration_s, iqr if relative_iqr is None else relative_iqr
        record.update({"calibration": workload, "calibration_s": calibration_s,
                       "calibration_q1_s": calibration_s * 0.995, "calibration_q3_s": calibration_s * 1.005,
                       "calibration_samples": 200, "calibration_noise": 0.002,
                       "in_calibrations": relative, "in_calibrations_q1": relative * (1 - spread / 2),
                       "in_calibrations_q3": relative * (1 + spread / 2), "in_calibrations_noise": spread / 4,
                       "in_calibrations_converged": spread / 4 <= 0.02})
    record.update(extra)
    return record


@pytest.mark.parametrize(("move", "factor", "expected"), [
    (2.0, 1.25, SLOWER), (2.0, 1.0, SAME), (0.5, 1.25, SLOWER), (0.5, 1.0, SAME), (1.0, 1.25, SLOWER),
    (2.0, 0.8, FASTER), (1.5, 1.1, AMBIGUOUS),
])
def test_rows_are_judged_relative_to_the_machine(tmp_path, move, factor, expected):
    iqr = 0.12 if factor == 1.1 else 0.02  # 1.1: the bands overlap
    other = _record(median=1e-3 * move * factor, iqr=iqr, calibration_s=4e-5 * move)
    cell = _cell(tmp_path, _record(), other)
    assert cell.verdict == expected
    assert cell.machine == pytest.approx(move) and cell.relative_diff == pytest.approx(factor - 1)


def test_a_machine_moved_beyond_the_bound_is_never_faster_or_slower(tmp_path):
    move = MAX_MACHINE_MOVE * 1.2
    cell = _cell(tmp_path, _record(), _record(median=1e-3 * move * 1.25, calibration_s=4e-5 * move))
    assert cell.verdict == AMBIGUOUS and MOVED_TOO_FAR in cell.flags and cell.relative_diff is None
    cell = _cell(tmp_path, _record(), _record(median=1.02e-3, calibration_s=4e-5 * move))
    assert cell.verdict == SAME and MOVED_TOO_FAR in cell.flags  # as measured, within the threshold


def test_the_noise_target_in_calibrations_decides(tmp_path):
    # the seconds missed their target (the machine moved during the run), the calibrations did not
    spread = _record(median=2.5e-3, iqr=0.4, calibration_s=8e-5, relative_iqr=0.02, converged=False,
                     noise=0.1)
    cell = _cell(tmp_path, _record(), spread)
    assert cell.verdict == SLOWER and "not converged" not in cell.flags and "noisy" not in cell.flags
    # in calibrations the target was missed too: decides nothing
    noisy = _record(median=2.5e-3, calibration_s=8e-5, relative_iqr=0.4)
    cell = _cell(tmp_path, _record(), noisy)
    assert cell.verdict == AMBIGUOUS and "not converged" in cell.flags and "noisy" in cell.flags


def test_a_shared_core_decides_nothing(tmp_path):
    # a busy neighbour that slowed the calibration and not the row: contended, so never FASTER
    busy = _record(median=1e-3, calibration_s=8e-5, contended=True)
    cell = _cell(tmp_path, _record(contended=True), busy)
    assert cell.verdict == AMBIGUOUS and cell.relative_diff == pytest.approx(-0.5)


def test_old_files_and_other_workloads_are_judged_as_measured(tmp_path):
    # a file without calibrations, against one with: as before calibrations existed
    cell = _cell(tmp_path, _record(calibration_s=None), _record(median=2e-3, calibration_s=8e-5))
    assert cell.verdict == SLOWER and cell.machine is None and cell.relative_diff is None
    cell = _cell(tmp_path, _record(calibration_s=None), _record(median=1.01e-3, calibration_s=None))
    assert cell.verdict == SAME and cell.flags == ()
    # calibrations of different workloads (another thread count, NumPy or processor) do not compare
    for workload in ("numpy 2.4.6 float32 128x128x128, 4 threads, fake cpu",
                     "numpy 2.5.0 float32 128x128x128, 1 thread, fake cpu",
                     "numpy 2.4.6 float32 128x128x128, 1 thread, other cpu"):
        other = _record(median=2e-3, calibration_s=8e-5, workload=workload)
        cell = _cell(tmp_path, _record(), other)
        assert cell.machine is None and cell.verdict == SLOWER


def test_relative_verdicts_are_symmetric_on_random_pairs():
    rng = random.Random(11)
    swap = {SLOWER: FASTER, FASTER: SLOWER, SAME: SAME, AMBIGUOUS: AMBIGUOUS}
    from gemmzoo.results.compare import calibration_of

    seen = set()
    for _ in range(400):
        records = [_record(median=rng.uniform(0.5, 2) * 1e-3, iqr=rng.uniform(0, 0.3),
                           calibration_s=rng.uniform(0.3, 4) * 4e-5, relative_iqr=rng.uniform(0, 0.3))
                   for _ in range(2)]
        a, b = (result_from_dict(r) for r in records)
        ca, cb = (calibration_of(r) for r in records)
        forward = judge(a, b, 0.05, (), (), ca, cb).verdict
        backward = judge(b, a, 0.05, (), (), cb, ca).verdict
        assert backward == swap[forward]
        seen.add(forward)
    assert seen == {SLOWER, FASTER, SAME, AMBIGUOUS}


def test_a_file_with_disordered_calibration_quartiles_is_refused(tmp_path, capsys):
    bad = _record()
    bad["calibration_q1_s"], bad["calibration_q3_s"] = bad["calibration_q3_s"], bad["calibration_q1_s"]
    paths = [_write(tmp_path / "a.json", [_record()]), _write(tmp_path / "b.json", [bad])]
    assert main(["compare", *paths]) == 2
    err = capsys.readouterr().err
    assert "calibration_q1_s" in err and "out of order" in err


def test_more_threads_than_usable_cores_is_said_in_the_policy(monkeypatch):
    """The oversubscription the default policy avoids (one thread per usable core, counted from
    the CPU affinity) is recorded when asked for by hand."""
    from gemmzoo.measure import threads

    monkeypatch.setattr(threads, "usable_cores", lambda: 2)
    assert threads.resolve_threads(2) == (2, "--threads 2")
    count, policy = threads.resolve_threads(8)
    assert count == 8 and "oversubscribed: more than the 2 usable cores" in policy
    assert threads.default_threads(2) == 1
