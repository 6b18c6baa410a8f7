"""``gemmzoo bench``: check and time backends over a shape grid; table, JSON, CSV, plot."""

from __future__ import annotations

import argparse
import shlex
import sys

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from gemmzoo import scale_jobs
from gemmzoo.bench import OK, TIMEOUT, BenchResult, run_bench
from gemmzoo.bench import environment as bench_environment
from gemmzoo.cli.console import console, errors
from gemmzoo.cli.options import add_point_arguments, apply_timeout, points_from_arguments, shard_meta
from gemmzoo.errors import UnknownBackendError
from gemmzoo.grids import GridError, default_grid_name, grids
from gemmzoo.measure import TIMERS
from gemmzoo.registry import get_registry, unavailable_reason


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_point_arguments(parser, "bench")
    parser.add_argument("--baseline", metavar="NAME",
                        help="show each backend's caller-time speed-up over this one (default: the first of "
                             "torch, cupy, numpy, torch-cpu benched, else the first by name)")
    parser.add_argument("--timer", choices=TIMERS, default="events",
                        help="device timer on a GPU: events (CUDA events, calls queued behind a stream hold; "
                             "default), graph (the same around CUDA-graph replays of the call), do_bench "
                             "(triton.testing.do_bench, for cross-checks)")
    parser.add_argument("--rounds", type=int, default=1, metavar="N",
                        help="measure in N interleaved rounds (each backend, point by point, N times; the "
                             "budget split between them) and merge them, so drift hits every backend alike")
    parser.add_argument("--plain", action="store_true",
                        help="print the table as plain aligned text (without it, a pipe gets the rich "
                             "table at full width)")
    parser.add_argument("--json", metavar="FILE", help="write every result as JSON")
    parser.add_argument("--csv", metavar="FILE", help="write every result as CSV")
    parser.add_argument("--plot", metavar="FILE.png", help="plot TFLOPS against size, one line per backend")
    parser.add_argument("--list-grids", action="store_true", help="list the named grids and exit")
    parser.add_argument("--merge", nargs="+", metavar="RESULTS.json",
                        help="measure nothing: merge these result files (the --shard parts of one sweep) "
                             "into one table, and into --json/--csv/--plot")


def _list_grids() -> int:
    from rich.table import Table

    table = Table(title="gemmzoo grids")
    for column in ("name", "shapes", "description"):
        table.add_column(column)
    default = default_grid_name()
    for grid in grids().values():
        mark = " (default here)" if grid.name == default else ""
        table.add_row(grid.name, str(len(grid.shapes)), grid.description + mark)
    console.print(table)
    return 0


def run(args: argparse.Namespace) -> int:
    if args.list_grids:
        return _list_grids()
    if args.merge:
        from gemmzoo.cli.merge import run_merge

        return run_merge(args)
    apply_timeout(args)
    # The GPU workers start now and warm up while this process picks the backends and points.
    pool = scale_jobs.start_pool(args.devices, args.backend)
    registry = get_registry()
    try:
        chosen = registry.select(args.backend)
        points = points_from_arguments(args)
    except (UnknownBackendError, GridError) as error:
        errors.print(str(error), style="red", markup=False)
        return 2
    backends = []
    for backend in chosen:
        reason = unavailable_reason(backend)
        if reason is None:
            backends.append(backend)
        elif args.backend:  # named explicitly: say why it is left out
            errors.print(f"{backend.name} is unavailable: {reason}", style="yellow", markup=False)
    if not backends:
        errors.print("[red]no available backend to bench[/]")
        return 2
    if args.rounds < 1:
        errors.print("--rounds must be at least 1", style="red", markup=False)
        return 2
    if args.baseline and args.baseline not in {b.name for b in backends}:
        errors.print(f"baseline {args.baseline!r} is not among the benched backends: "
                     f"{', '.join(b.name for b in backends)}", style="red", markup=False)
        return 2

    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console, transient=True) as progress:
        task = progress.add_task("benchmarking", total=len(points) * len(backends))
        if args.rounds > 1:
            progress.update(task, description=f"benchmarking, {args.rounds} rounds")

        def advance(result: BenchResult) -> None:
            progress.update(task, advance=1, description=f"{result.point.id} {result.backend}")

        def advance_here(result: BenchResult) -> None:
            extras.append(scale_jobs.gpu_extra(result))  # the GPU's state right after measuring
            advance(result)

        extras: list[dict[str, object]] = []
        workers = None
        if args.devices:
            results, extras, workers = scale_jobs.bench_on_devices(
                backends, points, args.budget, args.devices, advance, pool, timer=args.timer)
        else:
            results = run_bench(backends, points, args.budget, on_result=advance_here, timer=args.timer,
                                rounds=args.rounds)

    from gemmzoo.report import plain_table, results_table, summary_lines

    if args.plain:
        print(plain_table(results, args.baseline))
    else:
        table = results_table(results, args.baseline)
        if console.is_terminal:
            console.print(table)
        else:  # a pipe or file: as wide as the table needs, never cut to 80 columns
            from rich.measure import Measurement

            needed = Measurement.get(console, console.options.update_width(100_000), table).maximum
            wide = Console(width=max(80, needed + 2), highlight=False)
            wide.print(table)
    for line in summary_lines(results, args.baseline):
        console.print(line, markup=False, soft_wrap=True)
    for result in results:
        if result.status not in (OK, "unsupported"):
            console.print(f"[red]{result.status.upper()}[/] {escape(result.detail)}", soft_wrap=True)
    command = "gemmzoo " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    shard = shard_meta(args)
    run_meta = {key: value for key, value in (("shard", shard), ("devices", workers)) if value}
    from gemmzoo.cli.merge import write_outputs

    code = write_outputs(args, results, bench_environment(backends), command, args.baseline, meta=run_meta,
                         extras=extras)
    return code or (1 if any(r.status == TIMEOUT for r in results) else 0)
