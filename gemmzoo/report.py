"""Writers for ``gemmzoo bench`` results: rich table, JSON, CSV and a TFLOPS-against-size plot."""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from rich.table import Table

from gemmzoo.bench import OK, UNSUPPORTED, WRONG, BenchResult
from gemmzoo.grids import GridPoint

CSV_FIELDS = (
    "backend", "device", "point", "m", "n", "k", "dtype", "layout", "accuracy", "status", "median_s", "q1_s",
    "q3_s", "samples", "tflops", "peak_tflops", "peak_percent", "error_ratio", "rel_error", "method",
    "detail",
)


def _backends(results: Sequence[BenchResult]) -> list[str]:
    return list(dict.fromkeys(r.backend for r in results))


def _by_point(results: Sequence[BenchResult]) -> dict[GridPoint, dict[str, BenchResult]]:
    rows: dict[GridPoint, dict[str, BenchResult]] = {}
    for result in results:
        rows.setdefault(result.point, {})[result.backend] = result
    return rows


def winner(row: dict[str, BenchResult]) -> BenchResult | None:
    """The fastest conforming result of one point, or ``None`` when none conformed."""
    timed = [r for r in row.values() if r.tflops is not None]
    return max(timed, key=lambda r: r.tflops or 0.0) if timed else None


def _cell(result: BenchResult | None, baseline: BenchResult | None, best: BenchResult | None) -> str:
    if result is None or result.status == UNSUPPORTED:
        return "[dim]-[/]"
    if result.status == WRONG:
        return "[bold red]WRONG[/]"
    if result.status != OK or result.tflops is None:
        return "[red]ERROR[/]"
    text = f"{result.tflops:.3g}" if result.tflops < 100 else f"{result.tflops:.0f}"
    if baseline is not None and baseline.tflops and result is not baseline:
        text += f" [dim]x{result.tflops / baseline.tflops:.3g}[/]"
    return f"[bold green]{text}[/]" if result is best else text


def results_table(results: Sequence[BenchResult], baseline: str | None = None,
                  title: str = "gemmzoo bench: TFLOPS (median)") -> Table:
    """One row per point, one TFLOPS column per backend, the winner, and ratios to ``baseline``."""
    backends = _backends(results)
    accuracy = {r.backend: r.accuracy for r in results}
    caption = f"xR = speed relative to {baseline}*; " if baseline else ""
    caption += "bold green = winner; accuracy class componentwise unless the column says (normwise)"
    table = Table(title=title, caption=caption)
    table.add_column("MxNxK", justify="right", no_wrap=True)
    table.add_column("dtype", no_wrap=True)
    table.add_column("layout", no_wrap=True)
    for name in backends:
        label = name + ("*" if name == baseline else "")
        if accuracy[name] != "componentwise":
            label += f" ({accuracy[name]})"
        table.add_column(label, justify="right", no_wrap=True)
    table.add_column("winner")
    has_peak = any(r.peak_percent is not None for r in results)
    if has_peak:
        table.add_column("% peak", justify="right")
    for point, row in _by_point(results).items():
        best = winner(row)
        base = row.get(baseline) if baseline else None
        cells = [_cell(row.get(name), base, best) for name in backends]
        extra = []
        if has_peak:
            extra.append(f"{best.peak_percent:.0f}%" if best and best.peak_percent is not None else "-")
        table.add_row(f"{point.m}x{point.n}x{point.k}", point.dtype, point.layout, *cells,
                      best.backend if best else "[red]none[/]", *extra)
    return table


def _clean(value: Any) -> Any:
    return None if isinstance(value, float) and not math.isfinite(value) else value


def write_json(results: Sequence[BenchResult], path: str | Path, environment: dict[str, Any] | None = None,
               command: str | None = None) -> None:
    """``{"created", "command", "environment", "results": [...]}``; NaN written as null."""
    data = {
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "command": command,
        "environment": environment or {},
        "results": [{key: _clean(value) for key, value in r.as_dict().items()} for r in results],
    }
    Path(path).write_text(json.dumps(data, indent=2) + "\n")


def write_csv(results: Sequence[BenchResult], path: str | Path) -> None:
    """One line per backend x point, the columns of :data:`CSV_FIELDS`."""
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=CSV_FIELDS)
        writer.writeheader()
        for result in results:
            record = result.as_dict()
            writer.writerow({key: "" if _clean(record[key]) is None else record[key] for key in CSV_FIELDS})


def write_plot(results: Sequence[BenchResult], path: str | Path, title: str = "gemmzoo bench") -> None:
    """TFLOPS against size, one line per backend (per dtype and layout when there are several),
    like the performance plot of Triton's matmul tutorial. Wrong results are drawn as red x
    at zero so they are not mistaken for missing points."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    points = [r.point for r in results]
    square = all(p.m == p.n == p.k for p in points)
    variants = list(dict.fromkeys((p.dtype, p.layout) for p in points))
    # Square grids plot against M like the tutorial; other grids put each shape at its own place
    # on the x axis, ordered by work, because shapes of equal volume would overlap on any scale.
    shapes = sorted({p.shape for p in points}, key=lambda s: (s[0] * s[1] * s[2], s))
    place = {shape: float(shape[0]) if square else float(i) for i, shape in enumerate(shapes)}
    figure, axes = plt.subplots(figsize=(max(9.0, 0.35 * len(shapes)) if not square else 9.0, 5.5), dpi=120)
    wrong_labelled = False
    styles = ("-", "--", ":", "-.")
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for number, backend in enumerate(_backends(results)):
        color = colors[number % len(colors)]  # one colour per backend, one line style per dtype
        for variant, (dtype, layout) in enumerate(variants):
            mine = [r for r in results
                    if r.backend == backend and (r.point.dtype, r.point.layout) == (dtype, layout)]
            timed = sorted((place[r.point.shape], r.tflops) for r in mine if r.tflops is not None)
            label = backend if len(variants) == 1 else f"{backend} {dtype} {layout}"
            if timed:
                xs, ys = zip(*timed, strict=True)
                axes.plot(xs, ys, marker="o", markersize=3, linewidth=1.5, label=label, color=color,
                          linestyle=styles[variant % len(styles)])
            wrong = [place[r.point.shape] for r in mine if r.status == WRONG]
            if wrong:
                axes.plot(wrong, [0] * len(wrong), "x", color="red", markersize=8,
                          label=None if wrong_labelled else "WRONG result")
                wrong_labelled = True
    if square:
        axes.set_xlabel("M = N = K")
    else:
        axes.set_xticks(range(len(shapes)), [f"{m}x{n}x{k}" for m, n, k in shapes], rotation=60,
                        ha="right", fontsize="small")
        axes.set_xlabel("MxNxK (ordered by 2·M·N·K)")
    axes.set_ylabel("TFLOPS (median)")
    subtitle = ""
    if len(variants) == 1:
        subtitle = variants[0][0] + (f", {variants[0][1]}" if variants[0][1] != "NN" else "")
    axes.set_title(f"{title}{': ' + subtitle if subtitle else ''}")
    axes.set_ylim(bottom=0)
    axes.grid(True, alpha=0.3)
    axes.legend(loc="best", fontsize="small")
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)
