"""Runs side by side: the same backend on the same problem in several result files.

The first run is the baseline. For each (point, backend), every other run's median is judged
against the baseline's from both runs' noise, after NVIDIA nvbench's compare. A run's *noise* on a
row is its interquartile range (IQR) over its median (0.04: the middle half of the samples spans
4% of the median); ``gap`` is the difference of the two medians:

- **SAME** when ``gap`` is within ``threshold`` of the faster median (the drift the comparison
  forgives: across machines, days or library versions clocks and power states move timings by a
  few percent), or within both runs' IQR (nvbench's rule: within the smaller noise);
- **FASTER** / **SLOWER** when the difference is beyond the threshold even at the bands' nearest
  edges: the slower run's q1 exceeds the faster run's q3 by more than ``threshold`` of the faster
  median (a confident difference beyond the threshold, however the noise fell);
- **AMBIGUOUS** otherwise: the medians differ by more than the threshold but the runs' noise
  cannot tell whether the difference does (the IQR bands overlap or sit closer than that), a
  run's noise is unknown (fewer than two samples), or a run's row is flagged: measured on a
  throttled GPU, on CPU cores it shared with other work (``contended``) or with recorded noise
  beyond ``threshold`` (``noisy``). A flagged row is never FASTER or SLOWER: its time did not
  cover what varied while it was taken. A row that missed its noise target within its budget
  (``not converged``) with its noise within the threshold is judged on a wider margin: FASTER
  or SLOWER only where the bands sit apart by :data:`UNSETTLED_MARGIN` times the threshold.

Every rule is symmetric: swapping the two runs swaps FASTER and SLOWER and keeps the others.

**Relative to the machine.** A CPU row of ``gemmzoo bench`` records the machine's *calibration*:
a fixed GEMM timed between the row's samples, and the row *in calibrations* (each sample over the
calibration's median around it; :mod:`gemmzoo.measure.calibration`). A machine can run one process
2x slower than the one before it while each run's rows stay within a few percent of themselves;
no row's noise shows that. Where both runs' rows carry calibrations of the same workload (the same
GEMM, NumPy, thread count and processor), the row is judged in calibrations: the rules above on the
rows in calibrations (their medians, IQR bands, and whether they met their noise target), so a
backend that slowed down is told from a machine that did, also when the machine moved during a
run. The cell records how far the machine moved (``machine``: this run's calibration over the
baseline's) and says so in its flags when that is beyond the threshold (``machine 1.93x
slower``); beyond :data:`MAX_MACHINE_MOVE` either way the runs are too far apart for a ratio to
carry over (``machine moved too far``: judged as measured, never FASTER or SLOWER). Files without
calibrations (older ones, GPU rows) are judged as measured, as before.

A SLOWER row is a confident regression beyond the threshold. So is **BROKEN**: the baseline's
result was right and this run's is wrong, failed or timed out. **FIXED** is the reverse;
**MISSING**: a row that another run has and this one lacks (a backend lost, a grid changed).

Runs are labelled by their fingerprints: device name, driver and the library versions that
differ between the runs, then the date; the file name is added where labels would coincide.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from gemmzoo.problems.grids import GridPoint
from gemmzoo.results.runs import Run
from gemmzoo.scale.bench import OK, UNSUPPORTED, BenchResult

DEFAULT_THRESHOLD = 0.05
SAME, FASTER, SLOWER, AMBIGUOUS = "same", "faster", "slower", "ambiguous"
BROKEN, MISSING, FIXED = "broken", "missing", "fixed"
VERDICTS = (SAME, FASTER, SLOWER, AMBIGUOUS, BROKEN, FIXED, MISSING)
#: The verdicts that fail a comparison (exit status 1).
REGRESSIONS = (SLOWER, BROKEN)
TIE = SAME  # the name earlier versions used
#: How far apart (a ratio, either way) two runs' calibrations may be for a row to be judged
#: relative to the machine; beyond it the machine is not the one the baseline ran on, in effect.
MAX_MACHINE_MOVE = 3.0
MOVED_TOO_FAR = "machine moved too far"
#: Flags under which a row is never FASTER or SLOWER, only SAME or AMBIGUOUS: its time did not
#: cover what varied while it was taken.
UNTRUSTED = ("throttled", "noisy", "contended", "beyond roofline", MOVED_TOO_FAR)
#: The flag of a row that missed its noise target within its budget while its recorded noise
#: stayed within the threshold: its band is known, its median less settled, so it is FASTER or
#: SLOWER only when the bands sit apart by :data:`UNSETTLED_MARGIN` times the threshold.
UNSETTLED = "not converged"
UNSETTLED_MARGIN = 3.0


class DuplicateRowError(ValueError):
    """A result file holds one (point, backend) twice: which one counts would be a guess."""


@dataclass(frozen=True)
class Cell:
    """One run's result for one (point, backend), against the baseline's. ``noise`` is the run's
    relative IQR (``None`` when unknown), ``diff`` this median over the baseline's minus 1
    (0.25: takes 25% longer),
    ``flags`` what the run recorded about the measurement (``throttled``, ``not converged``)."""

    result: BenchResult | None
    ratio: float | None
    verdict: str | None  # None for the baseline itself, and where neither run has a time
    noise: float | None = None
    diff: float | None = None
    flags: tuple[str, ...] = field(default=())
    #: This run's calibration over the baseline's (1.9: the machine ran 1.9x slower), where both
    #: rows carry comparable calibrations.
    machine: float | None = None
    #: ``diff`` relative to the machine: this row's time in units of its calibration against the
    #: baseline's, minus 1; set where the row was judged relative to the machine.
    relative_diff: float | None = None


@dataclass(frozen=True)
class Calibration:
    """A row's calibration as its file recorded it (:mod:`gemmzoo.measure.calibration`): the
    workload, its median time, and the row in calibrations (median, quartiles, the median's noise
    and whether it met the row's noise target)."""

    workload: str
    median_s: float
    relative: float
    relative_q1: float
    relative_q3: float
    relative_noise: float | None = None
    relative_converged: bool | None = None


def calibration_of(extra: dict[str, Any] | None) -> Calibration | None:
    """The calibration a result's extra fields record, or ``None`` when they record none whole."""
    extra = extra or {}
    workload, values = extra.get("calibration"), [extra.get(k) for k in _CALIBRATION_NUMBERS]
    if not isinstance(workload, str) or not all(_positive(v) for v in values):
        return None
    median, relative, q1, q3 = (float(v) for v in values)
    if not q1 <= relative <= q3:
        return None
    noise, converged = extra.get("in_calibrations_noise"), extra.get("in_calibrations_converged")
    return Calibration(workload, median, relative, q1, q3,
                       float(noise) if _positive(noise, zero=True) else None,
                       converged if isinstance(converged, bool) else None)


_CALIBRATION_NUMBERS = ("calibration_s", "in_calibrations", "in_calibrations_q1", "in_calibrations_q3")


def _positive(value: Any, zero: bool = False) -> bool:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return False
    return value >= 0 if zero else value > 0


@dataclass(frozen=True)
class Row:
    """A (point, backend) across all runs; ``cells[0]`` is the baseline."""

    point: GridPoint
    backend: str
    cells: tuple[Cell, ...]

    @property
    def regressed(self) -> bool:
        """Whether a run is SLOWER or BROKEN here."""
        return any(c.verdict in REGRESSIONS for c in self.cells)

    @property
    def missing(self) -> bool:
        """Whether a run lacks this row."""
        return any(c.result is None for c in self.cells)


def _median(result: BenchResult | None) -> float | None:
    if result is None or result.status != OK or result.measurement is None:
        return None
    median = result.measurement.timing.median_s
    return median if median > 0 else None


def noise(result: BenchResult | None) -> float | None:
    """The relative IQR of a timed result; ``None`` when the file does not say (one sample, or
    no quartiles and no sample count)."""
    median = _median(result)
    if median is None:
        return None
    assert result is not None and result.measurement is not None
    timing = result.measurement.timing
    if not (math.isfinite(timing.q1_s) and math.isfinite(timing.q3_s)):
        return None
    spread = max(0.0, timing.q3_s - timing.q1_s)
    if spread == 0 and timing.samples < 2:
        return None
    return spread / median


def flags_of(extra: dict[str, Any] | None, threshold: float = DEFAULT_THRESHOLD) -> tuple[str, ...]:
    """What a result's extra fields say against trusting its time: a throttled GPU, a median
    that missed its noise target, a median whose recorded noise exceeds ``threshold``, a CPU
    timing that shared its cores."""
    extra = extra or {}
    found = []
    if extra.get("throttled") is True:
        found.append("throttled")
    if extra.get("converged") is False:
        found.append("not converged")
    recorded = extra.get("noise")
    if isinstance(recorded, (int, float)) and not isinstance(recorded, bool) and recorded > threshold:
        found.append("noisy")
    if extra.get("contended") is True:
        found.append("contended")
    if extra.get("beyond_roofline") is True:
        found.append("beyond roofline")
    return tuple(found)


def _flags_in_calibrations(flags: tuple[str, ...], calibration: Calibration,
                           threshold: float) -> tuple[str, ...]:
    """A row's flags when it is judged in calibrations: whether its noise target was met, and its
    noise, are the row in calibrations' (a machine that moved during the run spread the row's
    seconds, not its calibrations); the other flags stay."""
    kept = [flag for flag in flags if flag not in ("not converged", "noisy")]
    if calibration.relative_converged is False:
        kept.append("not converged")
    if calibration.relative_noise is not None and calibration.relative_noise > threshold:
        kept.append("noisy")
    return tuple(kept)


@dataclass(frozen=True)
class _Band:
    """A row's time as judged: the median, the band ``[q1, q3]`` and the relative noise (IQR over
    median; ``None`` when unknown), in seconds or in units of a calibration."""

    median: float
    q1: float
    q3: float
    noise: float | None


def _band(result: BenchResult) -> _Band:
    timing = result.measurement.timing  # type: ignore[union-attr]
    return _Band(timing.median_s, timing.q1_s, timing.q3_s, noise(result))


def _in_calibrations(calibration: Calibration) -> _Band:
    """The row in calibrations, as a band."""
    spread = max(0.0, calibration.relative_q3 - calibration.relative_q1)
    return _Band(calibration.relative, calibration.relative_q1, calibration.relative_q3,
                 spread / calibration.relative)


def machine_move(base: Calibration | None, other: Calibration | None) -> float | None:
    """``other``'s calibration over ``base``'s, where both are of the same workload."""
    if base is None or other is None or base.workload != other.workload:
        return None
    return other.median_s / base.median_s


def _machine_flags(machine: float, threshold: float) -> tuple[str, ...]:
    """What a cell says about the machine's move (see the module docstring)."""
    found = []
    if machine > 1 + threshold:
        found.append(f"machine {machine:.2f}x slower")
    elif machine < 1 / (1 + threshold):
        found.append(f"machine {1 / machine:.2f}x faster")
    if not 1 / MAX_MACHINE_MOVE <= machine <= MAX_MACHINE_MOVE:
        found.append(MOVED_TOO_FAR)
    return tuple(found)


def judge(base: BenchResult | None, other: BenchResult | None, threshold: float,
          base_flags: tuple[str, ...] = (), other_flags: tuple[str, ...] = (),
          base_calibration: Calibration | None = None, other_calibration: Calibration | None = None) -> Cell:
    """``other`` against ``base`` (see the module docstring), relative to the machine where both
    rows carry comparable calibrations."""
    if other is None:
        return Cell(None, None, MISSING)
    mine, theirs = _median(base), _median(other)
    their_noise = noise(other)
    if mine is None:
        verdict = FIXED if theirs is not None and base is not None else None
        return Cell(other, None, verdict, their_noise, None, other_flags)
    if theirs is None:
        return Cell(other, None, None if other.status == UNSUPPORTED else BROKEN, None, None, other_flags)
    assert base is not None and base.measurement is not None and other.measurement is not None
    diff = theirs / mine - 1
    mine_band, their_band = _band(base), _band(other)
    machine = machine_move(base_calibration, other_calibration)
    relative_diff = None
    if machine is not None:
        assert base_calibration is not None and other_calibration is not None
        moved = _machine_flags(machine, threshold)
        if MOVED_TOO_FAR in moved:
            other_flags = other_flags + moved
        else:
            mine_band, their_band = _in_calibrations(base_calibration), _in_calibrations(other_calibration)
            relative_diff = their_band.median / mine_band.median - 1
            base_flags = _flags_in_calibrations(base_flags, base_calibration, threshold)
            other_flags = _flags_in_calibrations(other_flags, other_calibration, threshold) + moved
    flags = base_flags + other_flags
    untrusted = any(f in UNTRUSTED for f in flags)
    verdict = _decide(mine_band, their_band, threshold, untrusted, UNSETTLED in flags)
    return Cell(other, mine / theirs, verdict, their_noise, diff, other_flags, machine, relative_diff)


def _decide(mine: _Band, theirs: _Band, threshold: float, untrusted: bool, unsettled: bool = False) -> str:
    """The verdict of ``theirs`` against ``mine`` (the rules of the module docstring)."""
    gap = abs(theirs.median - mine.median)
    if gap <= threshold * min(mine.median, theirs.median):
        return SAME
    if mine.noise is not None and theirs.noise is not None \
            and gap <= min(mine.noise * mine.median, theirs.noise * theirs.median):
        return SAME
    margin = threshold * (UNSETTLED_MARGIN if unsettled else 1.0)
    if mine.noise is None or theirs.noise is None or untrusted \
            or _separation(mine, theirs) <= margin * min(mine.median, theirs.median):
        return AMBIGUOUS
    return SLOWER if theirs.median > mine.median else FASTER


def _separation(a: _Band, b: _Band) -> float:
    """How far the slower run's band ``[q1, q3]`` starts above the faster run's band ends
    (negative when the bands overlap)."""
    slow, fast = (a, b) if a.median >= b.median else (b, a)
    return slow.q1 - fast.q3


def compare_runs(runs: Sequence[Run], threshold: float = DEFAULT_THRESHOLD) -> list[Row]:
    """One :class:`Row` per (point, backend) of the baseline (``runs[0]``), then those only the
    other runs have (their baseline cell empty)."""
    tables = []
    for run in runs:
        extras = run.extras if len(run.extras) == len(run.results) else [{}] * len(run.results)
        table: dict[tuple[GridPoint, str], tuple[BenchResult, tuple[str, ...], Calibration | None]] = {}
        for result, extra in zip(run.results, extras, strict=True):
            key = (result.point, result.backend)
            if key in table:
                raise DuplicateRowError(f"{run.path}: {result.backend} at {result.point.id} appears more "
                                        "than once; a result file holds each backend and point once "
                                        "(merge shards with gemmzoo bench --merge)")
            table[key] = (result, flags_of(extra, threshold), calibration_of(extra))
        tables.append(table)
    keys = list(dict.fromkeys(key for table in tables for key in table))
    rows = []
    for key in keys:
        point, backend = key
        base, base_flags, base_calibration = tables[0].get(key, (None, (), None))
        cells = [Cell(base, 1.0 if _median(base) else None, None, noise(base), None, base_flags)]
        for table in tables[1:]:
            other, other_flags, other_calibration = table.get(key, (None, (), None))
            cells.append(judge(base, other, threshold, base_flags, other_flags, base_calibration,
                               other_calibration))
        rows.append(Row(point, backend, tuple(cells)))
    return rows


def machine_moves(rows: Sequence[Row], runs: int) -> list[float | None]:
    """Per run, how far the machine moved against the baseline: the median over the rows of the
    cells' ``machine`` (1.0 for the baseline; ``None`` where no row carries comparable
    calibrations)."""
    moves: list[float | None] = [1.0]
    for number in range(1, runs):
        found = sorted(row.cells[number].machine for row in rows
                       if number < len(row.cells) and row.cells[number].machine is not None)
        moves.append(statistics.median(found) if found else None)
    return moves


def _device(run: Run) -> dict[str, Any]:
    environment = run.environment
    return environment.get("cuda") or environment.get("cpu") or next(iter(environment.values()), {}) or {}


def labels(runs: Sequence[Run]) -> list[str]:
    """A short label per run from its fingerprint (see the module docstring)."""
    devices = [_device(run) for run in runs]
    libraries = [d.get("libraries") or {} for d in devices]
    names = sorted({key for lib in libraries for key in lib})
    differing = [k for k in names if len({lib.get(k) for lib in libraries}) > 1]
    texts = []
    for run, device, lib in zip(runs, devices, libraries, strict=True):
        parts = [str(device.get("device_name") or "unknown device")]
        drivers = {d.get("driver") for d in devices}
        if device.get("driver") and len(drivers) > 1:
            parts.append(f"driver {device['driver']}")
        parts += [f"{k} {lib[k]}" for k in differing if k in lib]
        if run.created:
            parts.append(run.created[:10])
        texts.append(", ".join(parts))
    for number, text in enumerate(texts):
        if texts.count(text) > 1:
            texts[number] = f"{text} ({runs[number].path})"
    return texts


def summary(rows: Sequence[Row]) -> dict[str, int]:
    """How many cells of each verdict, over every run but the baseline."""
    counts: dict[str, int] = {}
    for row in rows:
        for cell in row.cells[1:]:
            if cell.verdict is not None:
                counts[cell.verdict] = counts.get(cell.verdict, 0) + 1
    return counts


def records(rows: Sequence[Row], run_labels: Sequence[str]) -> list[dict[str, Any]]:
    """One flat record per (row, run other than the baseline): the ``--format json|csv`` rows."""
    out = []
    for row in rows:
        base = row.cells[0]
        for number, cell in enumerate(row.cells[1:], start=1):
            out.append({
                "m": row.point.m, "n": row.point.n, "k": row.point.k, "dtype": row.point.dtype,
                "layout": row.point.layout, "backend": row.backend, "run": run_labels[number],
                "baseline_status": base.result.status if base.result else None,
                "baseline_median_s": _median(base.result), "baseline_noise": base.noise,
                "status": cell.result.status if cell.result else None,
                "median_s": _median(cell.result), "noise": cell.noise, "ratio": cell.ratio, "diff": cell.diff,
                "verdict": cell.verdict, "flags": ",".join(base.flags + cell.flags),
                "machine": cell.machine, "relative_diff": cell.relative_diff,
            })
    return out


def _literal(text: str) -> str:
    """``text`` shown as written by matplotlib (no mathtext from names in files)."""
    return text.replace("$", r"\$")


def write_plot(rows: Sequence[Row], run_labels: Sequence[str], path: str) -> None:
    """Speed relative to the baseline, per (point, backend), one marker series per other run;
    regressions in red. Needs matplotlib."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = [row for row in rows if any(c.ratio is not None for c in row.cells[1:])]
    figure, axes = plt.subplots(figsize=(max(8.0, 0.3 * len(shown)), 5.0), dpi=120)
    xs = range(len(shown))
    for number, run_label in enumerate(run_labels[1:], start=1):
        ys = [row.cells[number].ratio if row.cells[number].ratio is not None else math.nan for row in shown]
        axes.plot(xs, ys, marker="o", linestyle="none", label=_literal(run_label))
        bad = [(x, y) for x, y, row in zip(xs, ys, shown, strict=True) if row.cells[number].verdict == SLOWER]
        if bad:
            axes.plot(*zip(*bad, strict=True), marker="x", color="red", linestyle="none", markersize=9)
    axes.axhline(1.0, color="grey", linewidth=1)
    ticks = [_literal(f"{r.point.m}x{r.point.n}x{r.point.k} {r.point.dtype} {r.backend}") for r in shown]
    axes.set_xticks(list(xs), ticks, rotation=70, ha="right", fontsize="x-small")
    axes.set_ylabel(_literal(f"speed relative to {run_labels[0]}"))
    axes.set_title("gemmzoo compare (red x: regression beyond noise)")
    axes.grid(True, alpha=0.3)
    axes.legend(fontsize="small")
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)
