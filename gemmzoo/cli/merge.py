"""``gemmzoo bench --merge RESULTS.json...``: the parts of a split sweep as one result."""

from __future__ import annotations

import argparse
from typing import Any

from rich.markup import escape

from gemmzoo.cli.console import console, errors
from gemmzoo.results.runs import RunFileError, load_run, merge_runs
from gemmzoo.scale.bench import OK, UNSUPPORTED


def run_merge(args: argparse.Namespace) -> int:
    """Merge ``args.merge``; print the table; write ``--json``/``--csv``/``--plot``. Exit 1 when
    a result is wrong, 2 when the files cannot be merged."""
    from gemmzoo.cli.output import emit
    from gemmzoo.results.report import bench_listing

    try:
        merged, notes = merge_runs([load_run(path) for path in args.merge])
    except RunFileError as error:
        errors.print(str(error), style="red", markup=False, soft_wrap=True)
        return 2
    for note in notes:
        errors.print(f"note: {note}", style="yellow", markup=False, soft_wrap=True)
    results = merged.results
    emit(bench_listing(results, args.baseline, title="gemmzoo bench (merged): time per call (median)"),
         args.format, args.wide)
    for result in results:
        if result.status not in (OK, UNSUPPORTED):
            console.print(f"[red]{result.status.upper()}[/] {escape(result.detail)}", soft_wrap=True)
    console.print(f"merged {len(results)} results from {len(args.merge)} files")
    return write_outputs(args, results, merged.environment, "gemmzoo bench --merge " + " ".join(args.merge),
                         meta=merged.meta, extras=merged.extras)


def write_outputs(args: argparse.Namespace, results: list[Any], environment: dict[str, Any] | None,
                  command: str, baseline: str | None = None, meta: dict[str, Any] | None = None,
                  extras: list[dict[str, Any]] | None = None) -> int:
    """Write the JSON (the result format, :func:`gemmzoo.results.report.json_document`), CSV and plot that
    ``args`` asks for, for ``bench`` and ``bench --merge``; the exit status (1 if any result is
    WRONG, ERROR or TIMEOUT). ``extras`` that do not match the results one to one are left out."""
    from gemmzoo.cli.console import messages
    from gemmzoo.results.report import write_csv, write_json

    say = messages(getattr(args, "format", "table"))
    if args.json:
        write_json(results, args.json, environment, command, baseline, meta=meta,
                   extras=extras if extras is not None and len(extras) == len(results) else None)
        say.print(f"wrote {args.json}", markup=False)
    if args.csv:
        write_csv(results, args.csv)
        say.print(f"wrote {args.csv}", markup=False)
    if args.plot and results:
        from gemmzoo.results.report import write_plot

        write_plot(results, args.plot)
        say.print(f"wrote {args.plot}", markup=False)
    if getattr(args, "html", None) and results:
        from gemmzoo.results.html import write_report
        from gemmzoo.results.report import json_document
        from gemmzoo.results.runs import run_from_text

        text = json_document(results, environment, command, baseline, meta=meta,
                             extras=extras if extras is not None and len(extras) == len(results) else None)
        write_report([run_from_text(text, args.json or "this run")], args.html)
        say.print(f"wrote {args.html}", markup=False)
    return 1 if any(r.status not in (OK, UNSUPPORTED) for r in results) else 0
