"""``gemmzoo compare RESULTS.json...``: runs side by side; regressions beyond noise fail."""

from __future__ import annotations

import argparse

from rich.table import Table

from gemmzoo.cli.console import console, errors
from gemmzoo.compare import BROKEN, DEFAULT_THRESHOLD, FASTER, FIXED, MISSING, SLOWER, TIE, Row


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("files", nargs="+", metavar="RESULTS.json",
                        help="gemmzoo bench --json files or pytest-benchmark --benchmark-json files of "
                             "gemmzoo.benchmarks; the first is the baseline")
    parser.add_argument("--threshold", type=float, default=DEFAULT_THRESHOLD * 100, metavar="PERCENT",
                        help="drift forgiven on top of the measured spread before a difference counts "
                             f"(default {DEFAULT_THRESHOLD * 100:g})")
    parser.add_argument("--plot", metavar="FILE.png", help="plot each run's speed relative to the baseline")
    parser.add_argument("--all", action="store_true", help="show every row, not only those that differ")


_STYLE = {TIE: "≈", FASTER: "[green]faster[/]", SLOWER: "[bold red]SLOWER[/]", BROKEN: "[bold red]BROKEN[/]",
          MISSING: "[dim]missing[/]", FIXED: "[green]fixed[/]"}


def _time(seconds: float) -> str:
    return f"{seconds * 1e3:.3g} ms" if seconds >= 1e-3 else f"{seconds * 1e6:.3g} us"


def _cell(row: Row, number: int) -> str:
    cell = row.cells[number]
    result = cell.result
    if result is None:
        return "[dim]-[/]"
    if result.measurement is None or result.status != "ok":
        text = result.status.upper()
    else:
        text = _time(result.measurement.timing.median_s)
    if number == 0:
        return text
    ratio = f" x{cell.ratio:.3g}" if cell.ratio is not None else ""
    return f"{text}{ratio} {_STYLE.get(cell.verdict or '', '')}".rstrip()


def run(args: argparse.Namespace) -> int:
    from gemmzoo.compare import compare_runs, labels, summary, write_plot
    from gemmzoo.runs import RunFileError, load_run

    try:
        runs = [load_run(path) for path in args.files]
    except RunFileError as error:
        errors.print(str(error), style="red", markup=False, soft_wrap=True)
        return 2
    rows = compare_runs(runs, args.threshold / 100)
    names = labels(runs)
    for number, (name, run_) in enumerate(zip(names, runs, strict=True)):
        role = "baseline" if number == 0 else f"run {number}"
        console.print(f"{role}: {name}  [dim]({run_.path}, {len(run_.results)} results)[/]", soft_wrap=True)
    table = Table(title="gemmzoo compare: median time; xR = speed relative to the baseline",
                  caption=f"≈ within noise: IQR bands overlap or within {args.threshold:g}%")
    for column in ("MxNxK", "dtype", "layout", "backend"):
        table.add_column(column, no_wrap=True)
    for number in range(len(runs)):
        table.add_column("baseline" if number == 0 else f"run {number}", justify="right", no_wrap=True)
    shown = 0
    for row in rows:
        if not args.all and all(c.verdict in (None, TIE) for c in row.cells[1:]):
            continue
        shown += 1
        point = row.point
        table.add_row(f"{point.m}x{point.n}x{point.k}", point.dtype, point.layout, row.backend,
                      *(_cell(row, n) for n in range(len(runs))))
    if shown:
        console.print(table)
    counts = summary(rows)
    order = (TIE, FASTER, SLOWER, BROKEN, FIXED, MISSING)
    console.print("compared: " + (", ".join(f"{counts[k]} {k}" for k in order if k in counts) or "nothing"))
    if args.plot:
        try:
            write_plot(rows, names, args.plot)
        except ImportError:
            errors.print("--plot needs matplotlib (pip install matplotlib); no plot written", style="yellow")
        else:
            console.print(f"wrote {args.plot}")
    regressions = [row for row in rows if row.regressed]
    if regressions:
        console.print(f"[bold red]{len(regressions)} regressions beyond noise[/]")
        return 1
    return 0
