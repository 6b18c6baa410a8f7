"""``gemmzoo report``: result files as one self-contained HTML page (see :mod:`gemmzoo.results.html`)."""

from __future__ import annotations

import argparse

from gemmzoo.cli.console import console, errors
from gemmzoo.cli.options import number


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("files", nargs="+", metavar="RESULTS.json",
                        help="result files (bench --json, --merge, a pytest-benchmark JSON of gemmzoo's "
                             "benchmarks); with two or more, each later run is set beside the first")
    parser.add_argument("-o", "--output", required=True, metavar="FILE.html", help="the HTML file to write")
    parser.add_argument("--title", default="gemmzoo report", help="the page's title")
    parser.add_argument("--threshold", type=number(float, 0.0), default=None, metavar="FRACTION",
                        help="runs side by side: the drift forgiven as SAME, as in gemmzoo compare "
                             "(default 0.05)")


def run(args: argparse.Namespace) -> int:
    from gemmzoo.results.html import write_report
    from gemmzoo.results.runs import RunFileError, load_run

    try:
        runs = [load_run(path) for path in args.files]
    except (RunFileError, OSError) as error:
        errors.print(str(error), style="red", markup=False, soft_wrap=True)
        return 2
    try:
        write_report(runs, args.output, args.title, args.threshold)
    except OSError as error:
        errors.print(f"gemmzoo report: cannot write {args.output}: {error}", style="red", markup=False)
        return 2
    console.print(f"wrote {args.output} ({sum(len(r.results) for r in runs)} results, {len(runs)} runs)",
                  markup=False)
    return 0
