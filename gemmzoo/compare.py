"""Runs side by side: the same backend on the same problem in several result files.

The first run is the baseline. For each (point, backend) measured in it, every other run's median
is compared with the baseline's:

- ``ratio`` = baseline median / this median: above 1 is faster than the baseline;
- a **tie** when the difference is within noise: at most ``max((IQR_a + IQR_b) / 2,
  threshold × baseline median)``, the first term being where the bands median ± IQR/2 overlap;
- a **regression** when this run is slower by more than that, or when the baseline's result was
  right and this run's is wrong or failed; an **improvement** when faster by more than that.

``threshold`` (5% by default) is the run-to-run drift the comparison forgives on top of the
measured spread: across machines, days or library versions, clocks and power states move timings
by a few percent even when each run's IQR is tight.

Runs are labelled by their fingerprints: device name, driver and the library versions that
differ between the runs, then the date; the file name is added where labels would coincide.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from gemmzoo.bench import OK, UNSUPPORTED, BenchResult
from gemmzoo.grids import GridPoint
from gemmzoo.runs import Run

DEFAULT_THRESHOLD = 0.05
TIE, FASTER, SLOWER, BROKEN, MISSING, FIXED = "tie", "faster", "slower", "broken", "missing", "fixed"


@dataclass(frozen=True)
class Cell:
    """One run's result for one (point, backend), against the baseline's."""

    result: BenchResult | None
    ratio: float | None
    verdict: str | None  # None for the baseline itself


@dataclass(frozen=True)
class Row:
    """A (point, backend) across all runs; ``cells[0]`` is the baseline."""

    point: GridPoint
    backend: str
    cells: tuple[Cell, ...]

    @property
    def regressed(self) -> bool:
        return any(c.verdict in (SLOWER, BROKEN) for c in self.cells)


def _spread(result: BenchResult) -> float:
    timing = result.measurement.timing if result.measurement else None
    if timing is None or not math.isfinite(timing.q1_s) or not math.isfinite(timing.q3_s):
        return 0.0
    return max(0.0, timing.q3_s - timing.q1_s)


def _median(result: BenchResult | None) -> float | None:
    if result is None or result.status != OK or result.measurement is None:
        return None
    median = result.measurement.timing.median_s
    return median if median > 0 else None


def judge(base: BenchResult | None, other: BenchResult | None, threshold: float) -> Cell:
    """``other`` against ``base`` (see the module docstring)."""
    if other is None:
        return Cell(None, None, MISSING)
    mine, theirs = _median(base), _median(other)
    if mine is None:
        return Cell(other, None, FIXED if theirs is not None and base is not None else None)
    if theirs is None:
        return Cell(other, None, None if other.status == UNSUPPORTED else BROKEN)
    assert base is not None
    noise = max((_spread(base) + _spread(other)) / 2, threshold * mine)
    if abs(theirs - mine) <= noise:
        verdict = TIE
    else:
        verdict = SLOWER if theirs > mine else FASTER
    return Cell(other, mine / theirs, verdict)


def compare_runs(runs: Sequence[Run], threshold: float = DEFAULT_THRESHOLD) -> list[Row]:
    """One :class:`Row` per (point, backend) of the baseline (``runs[0]``), then those only the
    other runs have (their baseline cell empty)."""
    tables = [{(r.point, r.backend): r for r in run.results} for run in runs]
    keys = list(dict.fromkeys(key for table in tables for key in table))
    rows = []
    for point, backend in keys:
        base = tables[0].get((point, backend))
        cells = [Cell(base, 1.0 if _median(base) else None, None)]
        cells += [judge(base, table.get((point, backend)), threshold) for table in tables[1:]]
        rows.append(Row(point, backend, tuple(cells)))
    return rows


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
        axes.plot(xs, ys, marker="o", linestyle="none", label=run_label)
        bad = [(x, y) for x, y, row in zip(xs, ys, shown, strict=True) if row.cells[number].verdict == SLOWER]
        if bad:
            axes.plot(*zip(*bad, strict=True), marker="x", color="red", linestyle="none", markersize=9)
    axes.axhline(1.0, color="grey", linewidth=1)
    ticks = [f"{r.point.m}x{r.point.n}x{r.point.k} {r.point.dtype} {r.backend}" for r in shown]
    axes.set_xticks(list(xs), ticks, rotation=70, ha="right", fontsize="x-small")
    axes.set_ylabel(f"speed relative to {run_labels[0]}")
    axes.set_title("gemmzoo compare (red x: regression beyond noise)")
    axes.grid(True, alpha=0.3)
    axes.legend(fontsize="small")
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)
