"""``gemmzoo compare RESULTS.json...``: runs side by side, a verdict per row from both runs' noise.

Exit status: 0 when no row regressed, 1 for a confident regression (SLOWER beyond the threshold,
or BROKEN), 2 for bad input: an unreadable file, a single file, runs with no row in common, or
rows missing from a run (unless ``--allow-missing``).
"""

from __future__ import annotations

import argparse
import csv
import io
import json

from rich.table import Table
from rich.text import Text

from gemmzoo.cli.console import console, errors
from gemmzoo.cli.output import duration
from gemmzoo.results.compare import (
    AMBIGUOUS,
    BROKEN,
    DEFAULT_THRESHOLD,
    FASTER,
    FIXED,
    MAX_MACHINE_MOVE,
    MISSING,
    SAME,
    SLOWER,
    VERDICTS,
    Row,
)

FORMATS = ("table", "plain", "json", "csv")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("files", nargs="+", metavar="RESULTS.json",
                        help="gemmzoo bench --json files or pytest-benchmark --benchmark-json files of "
                             "gemmzoo.benchmarks; the first is the baseline")
    parser.add_argument("--threshold", type=_percent, default=DEFAULT_THRESHOLD * 100, metavar="PERCENT",
                        help="a difference within this is SAME; a regression must exceed it to fail "
                             f"(default {DEFAULT_THRESHOLD * 100:g})")
    parser.add_argument("--allow-missing", action="store_true",
                        help="rows missing from a run (a backend lost, another grid) are reported, "
                             "not an error")
    parser.add_argument("--plot", metavar="FILE.png", help="plot each run's speed relative to the baseline")
    parser.add_argument("--all", action="store_true", help="show every row, not only those that are not SAME")
    parser.add_argument("--format", choices=FORMATS, default="table",
                        help="table (default), plain text, json or csv on standard output")


def _percent(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 <= value < 1000:
        raise argparse.ArgumentTypeError(f"a percentage from 0 to 1000, got {text}")
    return value


_STYLE = {SAME: "", FASTER: "green", SLOWER: "bold red", BROKEN: "bold red", AMBIGUOUS: "yellow",
          MISSING: "dim", FIXED: "green"}


def _cell(row: Row, number: int) -> tuple[str, str]:
    """The text of a run's cell and its style."""
    cell = row.cells[number]
    result = cell.result
    if result is None:
        return ("-" if number == 0 else "MISSING"), "dim"
    if result.measurement is None or result.status != "ok":
        text = result.status.upper()
    else:
        text = duration(result.measurement.timing.median_s)
        text += f" ±{cell.noise * 50:.2g}%" if cell.noise is not None else " ±?"
    if cell.flags:
        text += f" ({', '.join(cell.flags)})"
    if number == 0:
        return text, ""
    if cell.ratio is not None:
        text += f" x{cell.ratio:.3g}"
    if cell.verdict:  # beside the ratio, so that a wrapped cell keeps the two on one line
        text += f" {cell.verdict.upper()}"
    if cell.relative_diff is not None and any(f.startswith("machine ") for f in cell.flags):
        text += f" (x{1 / (1 + cell.relative_diff):.3g} relative to the machine)"
    return text, _STYLE.get(cell.verdict or "", "")


def _machine_line(move: float | None, threshold: float) -> str | None:
    """The header's words on how far the machine moved against the baseline (its calibration,
    the median over the rows), where the runs' rows carry comparable calibrations."""
    if move is None:
        return None
    if 1 / (1 + threshold) <= move <= 1 + threshold:
        how = f"within {threshold * 100:g}% of the baseline's (calibration x{move:.3g})"
    else:
        how = f"{move:.2f}x slower" if move > 1 else f"{1 / move:.2f}x faster"
        how += " than the baseline's"
    if not 1 / MAX_MACHINE_MOVE <= move <= MAX_MACHINE_MOVE:
        return (f"machine: {how}: too far for a ratio to carry over; rows judged as measured, none faster "
                "or slower")
    return f"machine: {how}; rows judged relative to it"


def _shown(rows: list[Row], show_all: bool) -> list[Row]:
    return [row for row in rows if show_all or row.missing
            or any(c.verdict not in (None, SAME) for c in row.cells[1:])]


def _plain(rows: list[Row], count: int) -> str:
    heads = ["baseline" if n == 0 else f"run {n}" for n in range(count)]
    lines = [["MxNxK", "dtype", "layout", "backend", *heads]]
    for row in rows:
        p = row.point
        lines.append([f"{p.m}x{p.n}x{p.k}", p.dtype, p.layout, row.backend,
                      *(_cell(row, n)[0] for n in range(count))])
    widths = [max(len(line[i]) for line in lines) for i in range(len(lines[0]))]
    texts = ("  ".join(v.ljust(w) for v, w in zip(line, widths, strict=True)).rstrip() for line in lines)
    return "\n".join(texts)


def _table(rows: list[Row], count: int, threshold: float) -> Table:
    """The table: a dtype or layout that every row shares is said once in the title, and each run's
    cell holds its time on one line and its ratio and verdict on the next, so that at 80 columns
    no shape, name or verdict is cut (the name columns never shrink below their longest value)."""
    said = {key: values.pop() for key in ("dtype", "layout")
            if len(values := {getattr(row.point, key) for row in rows}) == 1}
    title = "gemmzoo compare: median time ±half its IQR; xR = speed relative to the baseline"
    if said:
        title += f" ({', '.join(said.values())})"
    table = Table(title=title,
                  caption=f"SAME: within {threshold:g}% or within both runs' noise; SLOWER/FASTER: beyond "
                          f"{threshold:g}% even between the IQR bands' nearest edges; AMBIGUOUS: the "
                          "runs' noise cannot tell; rows with the machine's calibration are judged "
                          "relative to it")
    names = [f"{row.point.m}x{row.point.n}x{row.point.k}" for row in rows]
    keys = [key for key in ("dtype", "layout") if key not in said]
    columns = [("MxNxK", names), *((key, [getattr(row.point, key) for row in rows]) for key in keys),
               ("backend", [row.backend for row in rows])]
    for head, values in columns:
        table.add_column(head, no_wrap=True, min_width=max(len(head), *map(len, values)))
    cells = [[_cell(row, n) for n in range(count)] for row in rows]
    for number in range(count):
        texts = [cell[number][0] for cell in cells]
        lines = [line for text in _two_lines(texts, number) for line in text.split("\n")]
        table.add_column("baseline" if number == 0 else f"run {number}", justify="right",
                         min_width=max(len(word) for line in lines for word in line.split()))
    for row, name, row_cells in zip(rows, names, cells, strict=True):
        texts = [Text(text, style) for text, style in
                 zip(_two_lines([text for text, _ in row_cells], None), (st for _, st in row_cells),
                     strict=True)]
        table.add_row(name, *(getattr(row.point, key) for key in keys), Text(row.backend), *texts)
    return table


def _two_lines(texts: list[str], number: int | None) -> list[str]:
    """Run cells with the ratio and verdict on a line of their own (the baseline's stay one line)."""
    out = []
    for index, text in enumerate(texts):
        first = number == 0 if number is not None else index == 0
        head, sep, tail = text.partition(" x")
        out.append(text if first or not sep else f"{head}\nx{tail}")
    return out


def _examples(missing: list[Row], runs: list) -> str:
    """``numpy on 64x64x64-float32-NN is not in b.json`` for the first few missing rows."""
    texts = []
    for row in missing[:3]:
        absent = [run.path for run, cell in zip(runs, row.cells, strict=True) if cell.result is None]
        texts.append(f"{row.backend} on {row.point.id} is not in {', '.join(absent)}")
    more = f" and {len(missing) - 3} more" if len(missing) > 3 else ""
    return "; ".join(texts) + more


def _print_wide(table: Table) -> None:
    """On a terminal as wide as it is; into a pipe or file as wide as the table needs."""
    if console.is_terminal:
        console.print(table)
        return
    from rich.console import Console
    from rich.measure import Measurement

    needed = Measurement.get(console, console.options.update_width(100_000), table).maximum
    Console(width=max(console.width, needed + 2), highlight=False).print(table)


def run(args: argparse.Namespace) -> int:
    from gemmzoo.results.compare import (
        DuplicateRowError,
        compare_runs,
        labels,
        machine_moves,
        records,
        summary,
        write_plot,
    )
    from gemmzoo.results.runs import RunFileError, load_run

    try:
        runs = [load_run(path) for path in args.files]
    except RunFileError as error:
        errors.print(str(error), style="red", markup=False, soft_wrap=True)
        return 2
    if len(runs) < 2:
        errors.print(f"gemmzoo compare needs two result files or more (a baseline and a run to judge); "
                     f"got one: {args.files[0]}", style="red", markup=False, soft_wrap=True)
        return 2
    try:
        rows = compare_runs(runs, args.threshold / 100)
    except DuplicateRowError as error:
        errors.print(str(error), style="red", markup=False, soft_wrap=True)
        return 2
    names = labels(runs)
    moves = machine_moves(rows, len(runs))
    counts = summary(rows)
    common = [row for row in rows if not row.missing]
    missing = [row for row in rows if row.missing]
    regressions = [row for row in rows if row.regressed]
    if not common:
        status = 2
    elif missing and not args.allow_missing:
        status = 2
    else:
        status = 1 if regressions else 0
    shown = _shown(rows, args.all)
    if args.format == "json":
        print(json.dumps({"runs": [{"label": n, "path": r.path, "machine": m}
                                   for n, r, m in zip(names, runs, moves, strict=True)],
                          "threshold_percent": args.threshold, "rows": records(rows, names),
                          "summary": counts, "status": status}, indent=2))
    elif args.format == "csv":
        buffer = io.StringIO()
        table_rows = records(shown, names)
        fields = list(table_rows[0]) if table_rows else ["backend", "verdict"]
        writer = csv.DictWriter(buffer, fieldnames=fields, lineterminator="\n")
        writer.writeheader()
        writer.writerows({k: "" if v is None else v for k, v in r.items()} for r in table_rows)
        print(buffer.getvalue(), end="")
    else:
        for number, (name, run_) in enumerate(zip(names, runs, strict=True)):
            role = "baseline" if number == 0 else f"run {number}"
            console.print(f"{role}: {name}  ({run_.path}, {len(run_.results)} results)", markup=False,
                          soft_wrap=True)
            said = _machine_line(moves[number], args.threshold / 100) if number else None
            if said:
                console.print(f"  {said}", markup=False, soft_wrap=True)
        if shown and args.format == "plain":
            print(_plain(shown, len(runs)))
        elif shown:
            _print_wide(_table(shown, len(runs), args.threshold))
        console.print(f"compared {len(common)} rows: "
                      + (", ".join(f"{counts[k]} {k}" for k in VERDICTS if counts.get(k)) or "nothing"),
                      markup=False, soft_wrap=True)
        if counts.get(AMBIGUOUS):
            console.print(f"{counts[AMBIGUOUS]} ambiguous: the runs' noise cannot tell; measure longer "
                          "(--budget) to decide", markup=False, soft_wrap=True)
    if args.plot:
        try:
            write_plot(rows, names, args.plot)
        except ImportError:
            errors.print("--plot needs matplotlib (pip install matplotlib); no plot written", style="yellow")
        else:
            errors.print(f"wrote {args.plot}", markup=False)
    if not common:
        errors.print("the runs have no row in common (different grids, backends or dtypes): "
                     "nothing to compare",
                     style="red", markup=False, soft_wrap=True)
    elif missing and not args.allow_missing:
        errors.print(f"{len(missing)} rows are missing from a run (a backend lost, or another grid), "
                     f"{_examples(missing, runs)}; --allow-missing to compare the rest", style="red",
                     markup=False, soft_wrap=True)
    if regressions:
        slower = sum(1 for row in regressions if any(c.verdict == SLOWER for c in row.cells))
        broken = len(regressions) - slower
        errors.print(f"{len(regressions)} regressions beyond noise and the {args.threshold:g}% threshold "
                     f"({slower} slower, {broken} broken)", style="bold red", markup=False, soft_wrap=True)
    return status
