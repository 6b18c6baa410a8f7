"""``gemmzoo bench``: check and time backends over a shape grid; table, JSON, CSV, plot."""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import shlex
import signal
import sys
import threading
from collections.abc import Iterator
from typing import Any

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from gemmzoo.cli.console import errors, messages
from gemmzoo.cli.options import (
    COUNT,
    add_point_arguments,
    default_selection,
    executor_settings,
    points_from_arguments,
    shard_meta,
)
from gemmzoo.cli.output import Column, Listing, add_format_arguments, emit
from gemmzoo.cli.sizes import too_large
from gemmzoo.errors import UnknownBackendError
from gemmzoo.measure import TIMERS
from gemmzoo.plugins.registry import unavailable_reason
from gemmzoo.problems.grids import GridError, GridPoint, backends_device, default_grid_name, grids
from gemmzoo.scale import jobs as scale_jobs
from gemmzoo.scale.bench import OK, UNSUPPORTED, BenchResult, run_bench
from gemmzoo.scale.bench import environment as bench_environment
from gemmzoo.session import current

#: Interleaved rounds by default: drift of the machine during a run (seen between identical runs
#: on a shared 2-core machine, docs/results/2026-11-25-cpu-repeatability.md) lands in each
#: result's noise, where compare can see it, instead of between runs.
DEFAULT_ROUNDS = 3


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_point_arguments(parser, "bench")
    parser.add_argument("--baseline", metavar="NAME",
                        help="show each backend's caller-time speed-up over this one (default: the first of "
                             "torch, cupy, numpy, torch-cpu benched that computes every dtype asked for, "
                             "else the first such by name)")
    parser.add_argument("--timer", choices=TIMERS, default="events",
                        help="device timer on a GPU: events (CUDA events, calls queued behind a stream hold; "
                             "default), graph (the same around CUDA-graph replays of the call), do_bench "
                             "(triton.testing.do_bench, for cross-checks), nvbench (NVIDIA's nvbench; needs "
                             "the nvbench extra: pip install 'gemmzoo[nvbench]')")
    parser.add_argument("--threads", type=int, metavar="N",
                        help="threads every BLAS/OpenMP pool may use while a backend is timed (default: "
                             "all usable cores from 4 cores up, else 1; see docs/benchmarks.md)")
    parser.add_argument("--max-noise", type=float, default=2.0, metavar="PERCENT",
                        help="sample until the median is known to within this percent (95%% confidence) or "
                             "the budget is spent; rows that miss it are marked noisy (default 2; 0: always "
                             "spend the whole budget)")
    parser.add_argument("--rounds", type=COUNT, default=DEFAULT_ROUNDS, metavar="N",
                        help="measure in N interleaved rounds (each backend, point by point, N times; the "
                             "budget split between them) and merge them, so drift hits every backend alike "
                             f"and shows in each result's noise (default {DEFAULT_ROUNDS})")
    add_format_arguments(parser)
    parser.add_argument("--json", metavar="FILE", help="write every result as JSON")
    parser.add_argument("--csv", metavar="FILE", help="write every result as CSV")
    parser.add_argument("--html", metavar="FILE.html",
                        help="write the self-contained HTML report of this run (as gemmzoo report does)")
    parser.add_argument("--plot", metavar="FILE.png",
                        help="plot TFLOPS against size, one line per backend (needs matplotlib: "
                             "pip install 'gemmzoo[plot]')")
    parser.add_argument("--list-grids", action="store_true", help="list the named grids and exit")
    parser.add_argument("--merge", nargs="+", metavar="RESULTS.json",
                        help="measure nothing: merge these result files (the --shard parts of one sweep) "
                             "into one table, and into --json/--csv/--plot")


def _list_grids(args: argparse.Namespace) -> int:
    default = default_grid_name()
    columns = (Column("name", "name"), Column("shapes", "shapes", justify="right"),
               Column("default", "default here", compact=False),
               Column("description", "description", text=True))
    rows = [{"name": grid.name, "shapes": str(len(grid.shapes)),
             "default": "yes" if grid.name == default else "", "description": grid.description}
            for grid in grids().values()]
    emit(Listing(f"gemmzoo grids (default here: {default})", columns, rows), args.format, args.wide)
    return 0


def choose_baseline(backends: list[Any], points: list[GridPoint], requested: str | None,
                    say: Any) -> tuple[str | None, str | None]:
    """``(baseline, error)``: the requested baseline when it is benched and computes every dtype
    of the grid; otherwise the preferred backend that does (``say`` hears why the first choice
    was passed over); ``error`` is set when a requested baseline cannot serve."""
    from gemmzoo.tuning.select import preference

    dtypes = {p.dtype for p in points}
    names = {b.name: b for b in backends}
    if requested:
        if requested not in names:
            return None, (f"baseline {requested!r} is not among the benched backends: "
                          f"{', '.join(names)}")
        missing = sorted(dtypes - set(names[requested].dtypes))
        if missing:
            return None, (f"baseline {requested!r} does not compute {', '.join(missing)}; choose one of: "
                          f"{', '.join(n for n, b in names.items() if dtypes <= set(b.dtypes)) or 'none'}")
        return requested, None
    ordered = sorted(names, key=preference)
    serving = [n for n in ordered if dtypes <= set(names[n].dtypes)]
    if serving and ordered and serving[0] != ordered[0]:
        missing = sorted(dtypes - set(names[ordered[0]].dtypes))
        say(f"baseline: {serving[0]} ({ordered[0]}, the first choice, does not compute {', '.join(missing)})")
    return (serving[0] if serving else (ordered[0] if ordered else None)), None


def _show(args: argparse.Namespace, results: list[BenchResult], baseline: str | None,
          environment: dict[str, Any], command: str, meta: dict[str, Any]) -> None:
    from gemmzoo.results.report import bench_listing, json_document, summary_lines, write_csv

    if args.format == "json":
        print(json_document(results, environment, command, baseline, meta=meta), flush=True)
        return
    if args.format == "csv":
        write_csv(results, sys.stdout)
        return
    listing = bench_listing(results, baseline)
    listing.notes = summary_lines(results, baseline)
    listing.notes += [f"{r.status.upper()} {r.backend} {r.point.id}: {r.detail}" for r in results
                      if r.status not in (OK, UNSUPPORTED)]
    listing.notes += [f"BEYOND ROOFLINE {r.backend} {r.point.id}: faster than the device's floor "
                      f"({r.roof.percent:.0f}% of it): the work was not done, or not timed; never ranked"
                      for r in results if r.beyond_roofline and r.roof is not None and r.roof.percent]
    emit(listing, args.format, args.wide)
    if args.format == "plain":
        for note in listing.notes:
            print(note)


def run(args: argparse.Namespace) -> int:
    if args.list_grids:
        return _list_grids(args)
    if args.merge:
        from gemmzoo.cli.merge import run_merge

        return run_merge(args)
    say = messages(args.format)
    if args.plot and importlib.util.find_spec("matplotlib") is None:
        errors.print("--plot needs matplotlib, which is not installed: pip install 'gemmzoo[plot]' "
                     "(or matplotlib); nothing was run", style="red", markup=False)
        return 2
    if args.threads is not None and args.threads < 1:
        errors.print("--threads must be at least 1", style="red", markup=False)
        return 2
    if args.max_noise < 0:
        errors.print("--max-noise must be 0 or more (percent)", style="red", markup=False)
        return 2
    noise_target = args.max_noise / 100
    from gemmzoo.measure.threads import usable_cores

    cores = usable_cores()
    if args.threads is not None and args.threads > cores:
        plural = "s" if cores != 1 else ""
        errors.print(f"--threads {args.threads} is more than the {cores} core{plural} this process may run "
                     "on: the pools' threads will wait for each other (oversubscribed); CPU rows will read "
                     "contended", style="yellow", markup=False, soft_wrap=True)
    from gemmzoo.results.atomic_file import unwritable
    from gemmzoo.scale.executors import ExecutorError

    try:
        settings = executor_settings(args)
    except (ExecutorError, GridError) as error:
        errors.print(str(error), style="red", markup=False)
        return 2

    for option in ("json", "csv", "plot"):
        path = getattr(args, option)
        problem = unwritable(path) if path is not None else None
        if problem is not None:  # refused now, not after the whole run
            errors.print(f"gemmzoo bench: --{option} {path}: {problem}; nothing was run", style="red",
                         markup=False)
            return 2
    with _terminate_as_interrupt():
        if args.devices or settings is not None:
            return _run(args, say, noise_target, settings)
        from gemmzoo.measure.threads import confined_to_policy

        # XLA's pool, out of threadpoolctl's reach, takes the policy's cores (docs/benchmarks.md)
        with confined_to_policy(args.threads):
            return _run(args, say, noise_target)


@contextlib.contextmanager
def _terminate_as_interrupt() -> Iterator[None]:
    """SIGTERM (a job scheduler's stop, ``kill``) ends the run as Ctrl-C does: the results so far
    are shown and written, and the exit status is 130."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(_signum: int, _frame: Any) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _run(args: argparse.Namespace, say: Any, noise_target: float, settings: Any = None) -> int:
    """The run itself, after the options were checked: points, backends, timing, output."""
    from gemmzoo.cli.class_shapes import expand_grid, run_class_shapes, split_shapes

    try:
        model_points = expand_grid(args)
    except ValueError as error:
        errors.print(f"gemmzoo bench: {error}", style="red", markup=False)
        return 2
    args.shape, class_texts = split_shapes(args.shape)
    class_texts += args.class_shapes
    class_results: list[dict[str, Any]] = []
    if class_texts:  # problems of the batched, scaled and grouped classes: checked and timed apart
        code = run_class_shapes(args, class_texts, "bench", class_results)
        if not (args.shape or args.grid or args.file):
            return code
        args.json = args.csv = args.plot = None  # the class results went to --json already
    code = _run_gemm(args, say, noise_target, model_points, class_results, settings)
    return code


def _run_gemm(args: argparse.Namespace, say: Any, noise_target: float, model_points: list[Any],
              class_results: list[dict[str, Any]], settings: Any = None) -> int:
    """The gemm problems of the run; a model grid's weighted summary at the end."""
    from gemmzoo.cli.class_shapes import model_summary_line

    try:
        chosen = current().select(args.backend)
        device = backends_device(chosen)
        points = points_from_arguments(args, device)
    except (UnknownBackendError, GridError) as error:
        errors.print(str(error), style="red", markup=False)
        return 2
    problem = too_large(points, chosen)
    if problem is not None:
        errors.print(f"gemmzoo bench: {problem}", style="red", markup=False)
        return 2
    # The GPU workers start now with the sweep queued: each measures as soon as it is warm, while
    # this process still checks the backends (scale_jobs.start_bench).
    pool = None if settings is not None else scale_jobs.start_bench(
        args.devices, args.backend, points, args.budget, args.timer, args.threads, noise_target)
    backends = []
    for backend in chosen:
        reason = unavailable_reason(backend)
        if reason is None:
            backends.append(backend)
        elif args.backend:  # named explicitly: say why it is left out
            errors.print(f"{backend.name} is unavailable: {reason}", style="yellow", markup=False)
    backends = default_selection(backends, bool(args.backend),
                                 lambda line: errors.print(line, style="yellow", markup=False))
    if not backends:
        errors.print("no available backend to bench", style="red", markup=False)
        return 2
    baseline, problem = choose_baseline(backends, points, args.baseline,
                                        lambda line: errors.print(line, style="yellow", markup=False))
    if problem is not None:
        errors.print(f"gemmzoo bench: {problem}", style="red", markup=False)
        return 2

    results: list[BenchResult] = []
    extras: list[dict[str, object]] = []
    workers = None
    interrupted = False
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    try:
        with Progress(*columns, console=say, transient=True, disable=not say.is_terminal) as progress:
            task = progress.add_task("benchmarking", total=len(points) * len(backends))
            if args.rounds > 1:
                progress.update(task, description=f"benchmarking, {args.rounds} rounds")

            def advance(result: BenchResult) -> None:
                progress.update(task, advance=1, description=f"{result.point.id} {result.backend}")

            def advance_here(result: BenchResult) -> None:
                results.append(result)  # kept as they come, so that Ctrl-C still has them
                extras.append(scale_jobs.gpu_extra(result))  # the GPU's state right after measuring
                advance(result)

            if settings is not None:  # --executor slurm|ray
                def advance_kept(result: BenchResult) -> None:
                    results.append(result)  # kept as they come back, so that Ctrl-C still has them
                    extras.append({})
                    advance(result)

                results, extras, workers = scale_jobs.bench_with_executor(
                    settings, backends, points, args.budget, advance_kept, timer=args.timer,
                    threads=args.threads, noise_target=noise_target)
            elif args.devices:
                results, extras, workers = scale_jobs.bench_on_devices(
                    backends, points, args.budget, args.devices, advance, pool, timer=args.timer,
                    threads=args.threads, noise_target=noise_target)
            else:
                from gemmzoo.tuning.verdicts import passing

                results = run_bench(backends, points, args.budget, on_result=advance_here, timer=args.timer,
                                    rounds=args.rounds, threads=args.threads, noise_target=noise_target,
                                    verdict=passing)
    except KeyboardInterrupt as stop:
        interrupted = True
        so_far = getattr(stop, "results", None)  # run_bench's: every round measured so far, merged
        if so_far and len(so_far) > len(results):
            results = so_far
        errors.print(f"interrupted: {len(results)} of {len(points) * len(backends)} results measured; "
                     "writing those", style="yellow", markup=False)

    command = "gemmzoo " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    shard = shard_meta(args, device)
    run_meta: dict[str, Any] = {key: value for key, value in (("shard", shard), ("devices", workers))
                                if value}
    if settings is not None:
        run_meta["executor"] = settings.name
    if interrupted:
        run_meta["interrupted"] = True
    environment = bench_environment(backends)
    if results:
        _show(args, results, baseline, environment, command, run_meta)
    from gemmzoo.cli.merge import write_outputs

    code = write_outputs(args, results, environment, command, baseline, run_meta, extras)
    if model_points:
        say.print(model_summary_line(model_points, results, class_results, baseline,
                                     f"--grid {args.model_name}"), markup=False)
    return 130 if interrupted else code
