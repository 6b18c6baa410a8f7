"""``gemmzoo compare RESULTS.json...``: runs side by side; regressions beyond noise fail."""

from __future__ import annotations

import argparse

from gemmzoo.cli.console import errors, messages
from gemmzoo.cli.output import Column, Listing, add_format_arguments, emit
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
    add_format_arguments(parser)


_WORD = {TIE: "≈", FASTER: "faster", SLOWER: "SLOWER", BROKEN: "BROKEN", MISSING: "missing", FIXED: "fixed"}
_STYLE = {"faster": "green", "fixed": "green", "SLOWER": "bold red", "BROKEN": "bold red", "missing": "dim"}


def _time(seconds: float) -> str:
    return f"{seconds * 1e3:.3g} ms" if seconds >= 1e-3 else f"{seconds * 1e6:.3g} us"


def _cell(row: Row, number: int) -> str:
    cell = row.cells[number]
    result = cell.result
    if result is None:
        return "-"
    if result.measurement is None or result.status != "ok":
        text = result.status.upper()
    else:
        text = _time(result.measurement.timing.median_s)
    if number == 0:
        return text
    ratio = f" x{cell.ratio:.3g}" if cell.ratio is not None else ""
    return f"{text}{ratio} {_WORD.get(cell.verdict or '', '')}".rstrip()


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
    console = messages(args.format)
    for number, (name, run_) in enumerate(zip(names, runs, strict=True)):
        role = "baseline" if number == 0 else f"run {number}"
        console.print(f"{role}: {name}  ({run_.path}, {len(run_.results)} results)", markup=False)
    columns = [Column("shape", "MxNxK", hoist=True), Column("dtype", "dtype", hoist=True),
               Column("layout", "layout", hoist=True), Column("backend", "backend")]
    columns += [Column(f"run{n}", "baseline" if n == 0 else f"run {n}", justify="right")
                for n in range(len(runs))]
    table_rows = []
    for row in rows:
        if not args.all and all(c.verdict in (None, TIE) for c in row.cells[1:]):
            continue
        point = row.point
        table_rows.append({"shape": f"{point.m}x{point.n}x{point.k}", "dtype": point.dtype,
                           "layout": point.layout, "backend": row.backend,
                           **{f"run{n}": _cell(row, n) for n in range(len(runs))}})
    listing = Listing("gemmzoo compare: median time; xR = speed relative to the baseline", columns,
                      table_rows, caption=f"≈ within noise: IQR bands overlap or within {args.threshold:g}%",
                      styles={c.key: lambda cell: _STYLE.get(cell.rsplit(" ", 1)[-1]) for c in columns[4:]})
    if table_rows or args.format != "table":
        emit(listing, args.format, args.wide)
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
        console.print(f"{len(regressions)} regressions beyond noise", style="bold red")
        return 1
    return 0
