"""Writers for ``gemmzoo bench`` results: rich or plain table, per-backend summary, JSON, CSV and
a TFLOPS-against-size plot."""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TextIO

from rich.table import Table

from gemmzoo.cli.output import Column, Listing, build_table, plain_text
from gemmzoo.plugins.inert import inert
from gemmzoo.problems.grids import GridPoint
from gemmzoo.results.atomic_file import write_atomically
from gemmzoo.scale.bench import OK, UNSUPPORTED, WRONG, BenchResult
from gemmzoo.tuning.select import Timed, preference, rank

CSV_FIELDS = (
    "backend", "device", "point", "m", "n", "k", "dtype", "layout", "accuracy", "status", "median_s", "q1_s",
    "q3_s", "samples", "host_s", "host_q1_s", "host_q3_s", "caller_s", "launch_bound", "tflops",
    "caller_tflops", "gbps", "peak_tflops", "peak_percent", "bandwidth_gbps", "roofline_bound",
    "roofline_percent", "verdict", "error_ratio", "rel_error", "method", "detail",
    "noise", "converged", "threads", "throttled",
)
BEST, TIE, NOISY, UNDECIDED = "best", "tie", "noisy", "undecided"


def _backends(results: Sequence[BenchResult]) -> list[str]:
    return list(dict.fromkeys(r.backend for r in results))


def _by_point(results: Sequence[BenchResult]) -> dict[GridPoint, dict[str, BenchResult]]:
    rows: dict[GridPoint, dict[str, BenchResult]] = {}
    for result in results:
        rows.setdefault(result.point, {})[result.backend] = result
    return rows


def _timed(result: BenchResult) -> Timed:
    measured = result.measurement
    assert measured is not None
    bound = "host" if measured.launch_bound else "device"
    return Timed(result.backend, measured.caller_s, measured.caller_spread_s, bound,
                 measured.caller_timing.half_width_s, not measured.noisy and not result.beyond_roofline)


def verdicts(row: dict[str, BenchResult]) -> dict[str, str]:
    """``{backend: "best" | "tie" | "noisy"}`` for one point, by caller time: the fastest is
    ``best`` unless others are within measured noise of it (``best_backend``'s rule,
    :func:`gemmzoo.tuning.select.rank`), and then all of those are ``tie``; a measurement that
    missed its noise target is ``noisy`` and not ranked with the others, and when a noisy one
    measured faster than the fastest ranked ones, those are ``undecided``: ``best`` never goes to
    a row slower than another conforming row."""
    timed = [_timed(r) for r in row.values() if r.caller_s is not None]
    if not timed:
        return {}
    noisy = {t.backend: NOISY for t in timed if not t.converged}
    if len(noisy) == len(timed):
        return noisy
    _winner, _ranking, tied = rank([t for t in timed if t.converged])
    fastest = min(t.median_s for t in timed)
    if min(t.median_s for t in timed if t.backend in tied) > fastest:
        # a row that missed its noise target measured faster: nothing here is known to be best
        return {**dict.fromkeys(tied, UNDECIDED), **noisy}
    if len(tied) > 1:
        return {**dict.fromkeys(tied, TIE), **noisy}
    return {tied[0]: BEST, **noisy}


def winner(row: dict[str, BenchResult]) -> BenchResult | None:
    """The fastest conforming result of one point by caller time (under the tie rule, the one
    ``best_backend`` would pick), or ``None`` when none conformed."""
    timed = [_timed(r) for r in row.values() if r.caller_s is not None]
    return row[rank(timed)[0]] if timed else None


def _us(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    micro = seconds * 1e6
    return f"{micro:.3g}" if micro < 100 else f"{micro:,.0f}"


def _spread(low: float | None, high: float | None, median: float | None) -> str:
    if low is None or high is None or not median:
        return ""
    return f"±{50 * (high - low) / median:.0f}%"


def _rate(value: float | None) -> str:
    """Three significant digits, so that small rates (GB/s of a compute-bound shape) never read 0."""
    if value is None:
        return "-"
    return f"{value:.3g}" if value < 1000 else f"{value:,.0f}"


def _baseline(results: Sequence[BenchResult], baseline: str | None) -> str | None:
    names = _backends(results)
    if baseline:
        return baseline
    return min(names, key=preference) if names else None


#: The bench table's columns (every format but the compact table shows them all). On the CPU
#: the device is the host: such rows fill only the caller time.
BENCH_COLUMNS = (
    Column("shape", "MxNxK", hoist=True),
    Column("dtype", "dtype", hoist=True),
    Column("layout", "layout", hoist=True),
    Column("backend", "backend"),
    Column("device_us", "device us", compact=False, justify="right"),
    Column("device_spread", "±", compact=False, justify="right"),
    Column("host_us", "host us", compact=False, justify="right"),
    Column("host_spread", "±", compact=False, justify="right"),
    Column("caller_us", "caller us", justify="right"),
    Column("caller_spread", "±", justify="right", drop=1),
    Column("limit", "limit", compact=False),
    Column("tflops", "TFLOPS", justify="right", drop=2),
    Column("gbps", "GB/s", compact=False, justify="right"),
    Column("roofline", "roofline", compact=False, justify="right"),
    Column("ratio", "x base", justify="right"),
    Column("verdict", "verdict"),
)
COLUMNS = tuple(column.title for column in BENCH_COLUMNS)
_BASE = "base"


def _cells(result: BenchResult, base: BenchResult | None, mark: str) -> dict[str, str]:
    point = result.point
    label = result.backend if result.accuracy == "componentwise" else f"{result.backend} ({result.accuracy})"
    cells = {"shape": f"{point.m}x{point.n}x{point.k}", "dtype": point.dtype, "layout": point.layout,
             "backend": label}
    if result.status != OK or result.measurement is None:
        status = {UNSUPPORTED: "-", WRONG: "WRONG"}.get(result.status, result.status.upper())
        return {**cells, "caller_us": status}
    measured, timing = result.measurement, result.measurement.timing
    host, roof = measured.host, result.roof
    caller_q = (host.q1_s, host.q3_s) if measured.launch_bound and host else (timing.q1_s, timing.q3_s)
    ratio = _BASE if result is base else ""
    if base is not None and base.caller_s and result is not base:
        ratio = f"x{base.caller_s / measured.caller_s:.3g}"
    tflops = result.tflops or 0.0
    cells.update(
        caller_us=_us(measured.caller_s), caller_spread=_spread(*caller_q, measured.caller_s),
        tflops=f"{tflops:.3g}" if tflops < 100 else f"{tflops:.0f}",
        gbps=_rate(roof.gbps if roof else None),
        roofline=f"{roof.percent:.0f}% {roof.bound}" if roof and roof.percent is not None else "-",
        ratio=ratio, verdict=mark,
    )
    if result.device == "cpu":  # device, host and caller time are one time there
        return {**cells, "limit": "-"}
    cells.update(
        device_us=_us(timing.median_s), device_spread=_spread(timing.q1_s, timing.q3_s, timing.median_s),
        host_us=_us(host.median_s if host else None),
        host_spread=_spread(host.q1_s, host.q3_s, host.median_s) if host else "",
        limit="launch" if measured.launch_bound else "device",
    )
    return cells


def bench_listing(results: Sequence[BenchResult], baseline: str | None = None,
                  title: str = "gemmzoo bench: time per call (median)") -> Listing:
    """The bench results as a :class:`~gemmzoo.cli.output.Listing`: one row per backend and point
    (:data:`BENCH_COLUMNS`), the JSON records of :func:`write_json` as its records."""
    base_name = _baseline(results, baseline)
    rows, sections, order = [], set(), []
    for row in _by_point(results).values():
        marks = verdicts(row)
        base = row.get(base_name) if base_name else None
        for name, result in row.items():
            rows.append(_cells(result, base, marks.get(name, "")))
            order.append(result)
        sections.add(len(rows) - 1)
    gpu = any(r.device != "cpu" for r in results)
    caption = ("caller = what a loop of calls gets per call" + (
        ": max(device, host); limit 'launch' = the GPU waits for launches; roofline = floor / device "
        "time, floor = max(flops / peak, bytes / bandwidth), '-' where the peak is unknown" if gpu else
        " (on the CPU, device = host = caller)") +
        f"; ± = IQR/2; x base = caller-time speed-up over the baseline ('base': {base_name}); "
        "verdict: best, or tie = within measured noise of the best; "
        "accuracy class componentwise unless the column says (normwise)")
    styles = {
        "caller_us": lambda cell: {"WRONG": "bold red", "ERROR": "red", "TIMEOUT": "red"}.get(cell),
        "verdict": lambda cell: "bold green" if cell == BEST else None,
        "limit": lambda cell: "yellow" if cell == "launch" else None,
    }
    return Listing(title, BENCH_COLUMNS, rows, _records(order), caption=caption, styles=styles,
                   sections=sections)


def table_rows(results: Sequence[BenchResult], baseline: str | None = None) -> list[list[str]]:
    """The bench table as plain cells, one row per backend and point (:data:`COLUMNS`)."""
    listing = bench_listing(results, baseline)
    return [[row.get(column.key, "") for column in BENCH_COLUMNS] for row in listing.rows]


def results_table(results: Sequence[BenchResult], baseline: str | None = None,
                  title: str = "gemmzoo bench: time per call (median)", wide: bool = True) -> Table:
    """The rich table of :func:`bench_listing`: device time, host time and caller time per call
    with their spreads (±IQR/2), which of them limits a loop of calls, TFLOPS, GB/s, share of the
    roofline floor and which bound that is, speed relative to the baseline, and best/tie by caller
    time (``wide=False``: the compact columns only). A backend of an accuracy class other than
    componentwise says so after its name."""
    return build_table(bench_listing(results, baseline, title), wide)


def plain_table(results: Sequence[BenchResult], baseline: str | None = None) -> str:
    """The bench table as tab-separated plain text (no colours, no box, every column)."""
    return plain_text(bench_listing(results, baseline))


@dataclass(frozen=True)
class Summary:
    """One backend over a whole run against the baseline: the geometric mean of baseline caller
    time / this backend's caller time over the points both timed, and fast_p: the share of the
    baseline's timed points where this backend is correct and at least ``p`` times as fast."""

    backend: str
    baseline: str
    geomean_speedup: float | None
    fast_p: float | None
    points: int
    p: float = 1.0


def summaries(results: Sequence[BenchResult], baseline: str | None = None, p: float = 1.0) -> list[Summary]:
    """A :class:`Summary` per backend (the baseline's own included, at 1)."""
    base_name = _baseline(results, baseline)
    rows = _by_point(results)
    found = []
    for name in _backends(results):
        ratios, fast, counted = [], 0, 0
        for row in rows.values():
            base, mine = row.get(base_name or ""), row.get(name)
            if base is None or base.caller_s is None or mine is None or mine.status == UNSUPPORTED:
                continue
            counted += 1
            if mine.caller_s is not None:
                ratio = base.caller_s / mine.caller_s
                ratios.append(ratio)
                fast += ratio >= p
        geomean = math.exp(sum(math.log(r) for r in ratios) / len(ratios)) if ratios else None
        found.append(Summary(name, base_name or "", geomean, fast / counted if counted else None, counted, p))
    return found


def summary_lines(results: Sequence[BenchResult], baseline: str | None = None) -> list[str]:
    """One line per backend: geometric-mean caller-time speed-up over the baseline and fast_1."""
    lines = []
    for entry in summaries(results, baseline):
        geomean = f"x{entry.geomean_speedup:.3g}" if entry.geomean_speedup is not None else "-"
        fast = f"{100 * entry.fast_p:.0f}%" if entry.fast_p is not None else "-"
        lines.append(f"{entry.backend}: geomean {geomean} against {entry.baseline} (caller time), "
                     f"fast_1 {fast} of {entry.points} points (correct and at least as fast)")
    return lines


def _clean(value: Any) -> Any:
    return None if isinstance(value, float) and not math.isfinite(value) else value


def _records(results: Sequence[BenchResult]) -> list[dict[str, Any]]:
    marks: dict[tuple[str, GridPoint], str] = {}
    for point, row in _by_point(results).items():
        marks.update(((name, point), verdict) for name, verdict in verdicts(row).items())
    return [{**{key: _clean(value) for key, value in r.as_dict().items()},
             "verdict": marks.get((r.backend, r.point), "")} for r in results]


def json_document(results: Sequence[BenchResult], environment: dict[str, Any] | None = None,
                  command: str | None = None, baseline: str | None = None, meta: dict[str, Any] | None = None,
                  extras: Sequence[dict[str, Any]] | None = None) -> str:
    """The text :func:`write_json` writes."""
    from gemmzoo.results.schema import FORMAT, VERSION, finite

    records = _records(results)
    if extras is not None:
        for record, extra in zip(records, finite(list(extras)), strict=True):
            record.update(extra)
    for record in records:  # a plugin's message with a control character must not spoil the file
        for key, value in record.items():
            if isinstance(value, str):
                record[key] = inert(value, lines=key == "detail")
    data = {
        "format": FORMAT,
        "version": VERSION,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "command": command,
        "environment": finite(environment or {}),
        **finite(meta or {}),
        "results": records,
        "summary": [vars(entry) for entry in summaries(results, baseline)],
    }
    return json.dumps(data, indent=2)


def write_json(results: Sequence[BenchResult], path: str | Path, environment: dict[str, Any] | None = None,
               command: str | None = None, baseline: str | None = None, meta: dict[str, Any] | None = None,
               extras: Sequence[dict[str, Any]] | None = None) -> None:
    """``{"format", "version", "created", "command", "environment", "results": [...], "summary":
    [...]}`` (the result format of :mod:`gemmzoo.results.schema`); NaN written as null.

    ``meta`` adds top-level keys (``shard``, ``devices``, ``interrupted``: see :mod:`gemmzoo.results.runs`);
    ``extras[i]`` adds keys to the i-th result (``gpu``: the GPU that measured it and its state then).
    Written atomically: a failed write leaves an earlier file at ``path`` whole."""
    write_atomically(path, json_document(results, environment, command, baseline, meta, extras) + "\n")


def write_csv(results: Sequence[BenchResult], path: str | Path | TextIO) -> None:
    """One line per backend x point, the columns of :data:`CSV_FIELDS`, to a file path or an open
    text file."""
    if not isinstance(path, (str, Path)):
        _csv_rows(results, path)
        return
    text = io.StringIO(newline="")
    _csv_rows(results, text)
    write_atomically(path, text.getvalue())


def _csv_rows(results: Sequence[BenchResult], handle: TextIO) -> None:
    writer = csv.DictWriter(handle, fieldnames=CSV_FIELDS, lineterminator="\n")
    writer.writeheader()
    for record in _records(results):
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
            label = (backend if len(variants) == 1 else f"{backend} {dtype} {layout}").replace("$", r"\$")
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
    image = io.BytesIO()
    figure.savefig(image, format=Path(path).suffix.lstrip(".").lower() or "png")
    plt.close(figure)
    write_atomically(path, image.getvalue())
