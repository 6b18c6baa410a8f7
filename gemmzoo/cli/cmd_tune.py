"""``gemmzoo tune``: measure backends over a grid or shapes and store the results for best_backend.

``--recorded`` tunes the problems ``gemmzoo.matmul`` recorded instead (:mod:`gemmzoo.cli.recorded`)."""

from __future__ import annotations

import argparse
import time
from typing import Any

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from gemmzoo.cli.console import console, errors, messages
from gemmzoo.cli.options import (
    add_point_arguments,
    default_selection,
    executor_settings,
    points_from_arguments,
    timeout_lines,
)
from gemmzoo.cli.output import Column, Listing, add_format_arguments, duration, emit
from gemmzoo.cli.recorded import Outcome, narrowed, recorded_points
from gemmzoo.cli.sizes import too_large
from gemmzoo.errors import GemmError
from gemmzoo.problems.grids import GridPoint, backends_device
from gemmzoo.tuning.contenders import DEFAULT_TIME_BUDGET_S
from gemmzoo.tuning.suites import SUITE_LIMIT_S


def _seconds(text: str) -> float:
    """A positive number of seconds, for argparse."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, not {text}")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_point_arguments(parser, "tune")
    add_format_arguments(parser)
    parser.add_argument("--no-verify", action="store_true",
                        help="skip each measurement's check against the float64 reference")
    parser.add_argument("--recorded", action="store_true",
                        help="tune the problems gemmzoo.matmul met and answered without measurements "
                             "of their own (recorded in the tuning database), instead of a grid; one "
                             "progress line per problem on stderr")
    parser.add_argument("--include-compiling", action="store_true",
                        help="with --recorded: time backends that compile each new problem too "
                             "(torch-compile, jax: seconds a problem), which are otherwise left out "
                             "unless named")
    parser.add_argument("--verify-all", action="store_true",
                        help="with --recorded: judge every measurement's result against the float64 "
                             "reference element by element, the largest too (by default results of more "
                             "than 2^22 elements are checked by Freivalds' test instead, and those of more "
                             "than 2^25 not at all: their backends passed the suite here first)")
    parser.add_argument("--time-budget", type=_seconds, default=DEFAULT_TIME_BUDGET_S, metavar="SECONDS",
                        help="with --recorded: start no new work after this many seconds (default "
                             f"{DEFAULT_TIME_BUDGET_S:g}); the problems carrying the most recorded work "
                             "(times recorded x FLOPs) go first, and those not reached stay recorded")
    parser.add_argument("--suite-limit", type=_seconds, default=SUITE_LIMIT_S, metavar="SECONDS",
                        help="with --recorded: end a conformance suite still running after this many "
                             f"seconds in its worker (default {SUITE_LIMIT_S:g}); its backend sits this run "
                             "out")
    parser.add_argument("--suite-workers", type=int, default=None, metavar="N",
                        help="with --recorded: worker processes that run the conformance suites not yet "
                             "run here, side by side (default: one per suite up to half the cores and 8 "
                             "on CUDA, none on the CPU; 0 or 1: in this process)")
    parser.add_argument("--import", dest="import_files", action="append", default=[], metavar="FILE",
                        help="take in a tuning file exported elsewhere (repeatable; rows made on another "
                             "device or with other library versions are ignored); measures nothing unless "
                             "a grid or shapes are given too")
    parser.add_argument("--export", metavar="FILE",
                        help="write the tuning database to a portable JSON file (after any tuning and "
                             "--import); see docs/tuning.md")


SUMMARY_COLUMNS = (
    Column("problem", "problem"),
    Column("best", "best"),
    Column("median", "median", justify="right"),
    Column("tflops", "TFLOPS", justify="right"),
    Column("runner_up", "runner-up", compact=False),
    Column("tie", "tie", compact=False),
    Column("not_chosen", "not chosen", text=True),
)
#: With ``--recorded``: what ``gemmzoo.matmul`` chooses now, and its expected gain.
OUTCOME_COLUMNS = (
    Column("chosen", "chosen"),
    Column("gain", "expected gain", justify="right"),
)


def _summary(records: list[Any], skipped: dict[tuple[Any, str], list[str]],
             outcomes: dict[tuple[GridPoint, str], Outcome | None] | None = None) -> Listing:
    from gemmzoo.tuning.select import Timed, rank

    rows = []
    latest: dict[tuple[Any, str, str], Any] = {}  # a backend measured again: its latest record
    for record in records:
        point = GridPoint(record.m, record.n, record.k, record.dtype, record.layout)
        device = "cuda" if '"kind":"cuda"' in record.device else "cpu"
        latest.pop((point, device, record.backend), None)
        latest[point, device, record.backend] = record
    groups: dict[tuple[Any, str], list[Any]] = {}
    for (point, device, _name), record in latest.items():
        groups.setdefault((point, device), []).append(record)
    for (point, device), group in groups.items():
        timed = [Timed(r.backend, r.median_s, r.spread_s or 0.0) for r in group if r.status == "ok"]
        bad = [f"{r.backend}: {r.status}" for r in group if r.status != "ok"]
        bad += [f"{name}: skipped" for name in skipped.get((point, device), [])]
        layout = "" if point.layout == "NN" else f" {point.layout}"
        row = {"problem": f"{point.m}x{point.n}x{point.k}{layout} {point.dtype} {device}",
               "not_chosen": ", ".join(bad)}
        if outcomes is not None:
            found = outcomes.get((point, device))
            row.update(chosen=found.backend if found else "-", gain=found.gain_text() if found else "-")
        if not timed:
            rows.append({**row, "best": "-"})
            continue
        winner, ranking, tied = rank(timed)
        best = next(t for t in ranking if t.backend == winner)
        other = next((t for t in ranking if t.backend != winner), None)
        rows.append({
            **row, "best": winner, "median": duration(best.median_s),
            "tflops": f"{point.flops / best.median_s / 1e12:.3g}" if best.median_s > 0 else "-",
            "runner_up": f"{other.backend} {duration(other.median_s)}" if other else "-",
            "tie": ("yes: " + ", ".join(tied)) if len(tied) > 1 else "no",
        })
    columns = SUMMARY_COLUMNS if outcomes is None else (*SUMMARY_COLUMNS[:2], *OUTCOME_COLUMNS,
                                                           *SUMMARY_COLUMNS[2:])
    return Listing("gemmzoo tune: fastest per problem (stored)", columns, rows)


def _portable(args: argparse.Namespace, before_tuning: bool) -> int:
    """``--import`` (before tuning) or ``--export`` (after); 0, or 2 for a bad file."""
    from gemmzoo.tuning import state
    from gemmzoo.tuning.portable import TuningFileError, export_tuning, import_tuning

    try:
        if before_tuning:
            for path in args.import_files:
                report = import_tuning(state.store(), path)
                console.print(f"{path}: {report.summary()}", markup=False)
            state.forget_answers()
        elif args.export:
            measurements, verdicts = export_tuning(state.store(), args.export)
            console.print(f"wrote {args.export}: {measurements} measurements, "
                          f"{verdicts} conformance verdicts")
    except (TuningFileError, OSError) as error:
        console.print(str(error), style="red", markup=False)
        return 2
    return 0


def run(args: argparse.Namespace) -> int:
    from gemmzoo.session import current
    from gemmzoo.tuning import state

    if args.import_files or args.export:
        if _portable(args, before_tuning=True):
            return 2
        if not (args.grid or args.shape or args.file or args.recorded):
            return _portable(args, before_tuning=False)

    from gemmzoo.cli.class_shapes import expand_grid, run_class_shapes, split_shapes

    try:
        expand_grid(args)
    except ValueError as error:
        console.print(str(error), style="red", markup=False)
        return 2
    args.shape, class_texts = split_shapes(args.shape)
    class_texts += args.class_shapes
    if class_texts:  # problems of the batched, scaled and grouped classes: measured and stored apart
        code = run_class_shapes(args, class_texts, "tune")
        if not (args.shape or args.grid or args.file or args.recorded):
            return code
    say = messages(args.format)
    try:
        settings = executor_settings(args)
        chosen = current().select(args.backend)
        chosen = default_selection(chosen, bool(args.backend),
                                   lambda line: errors.print(line, style="yellow", markup=False))
        if args.recorded:  # each device's problems, with that device's backends
            found = recorded_points()
            chosen = narrowed(chosen, args.include_compiling, _named(args),
                              lambda line: errors.print(line, style="yellow", markup=False), set(found))
            plan = [(points, names) for device, points in found.items()
                    if (names := [b.name for b in chosen if b.device == device])]
        else:
            plan = [(points_from_arguments(args, backends_device(chosen)), [b.name for b in chosen])]
    except (GemmError, KeyError, ValueError) as error:
        console.print(str(error), style="red", markup=False)
        return 2
    points = [p for group, _names in plan for p in group]
    if not points and args.recorded:
        where = state.store().path if state.store().persistent else "memory"
        console.print(f"nothing recorded: gemmzoo.matmul has met no problem without a measurement in "
                      f"{where} (a program's problems are recorded where its GEMMZOO_CACHE_DIR points: "
                      "run this command with the same)", markup=False)
        return 0
    if not points:
        console.print("[red]nothing to tune: the grid is empty[/]")
        return 2
    problem = too_large(points, chosen)
    if problem is not None:
        errors.print(f"gemmzoo tune: {problem}", style="red", markup=False)
        return 2
    total = sum(1 for group, names in plan for p in group for b in chosen
                if b.name in names and p.dtype in b.dtypes)
    skipped: dict[tuple[Any, str], list[str]] = {}
    records: list[Any] = []
    outcomes: dict[tuple[GridPoint, str], Outcome | None] | None = None
    unfinished: set[tuple[GridPoint, str]] = set()
    interrupted = False
    started = time.perf_counter()
    try:
        if args.recorded and not args.devices and settings is None:
            outcomes = {}
            unfinished = _tune_recorded(args, chosen, skipped, records, outcomes)
        else:
            records = _tune(args, plan, chosen, total, skipped, records, say, settings)
    except KeyboardInterrupt:
        interrupted = True
        errors.print(f"interrupted: {len(records)} measurements made and stored", style="yellow",
                     markup=False)
    emit(_summary(records, skipped, outcomes), args.format, args.wide)
    if args.recorded:
        say.print(f"tuned {len({(r.m, r.n, r.k, r.dtype, r.layout, r.device) for r in records})} recorded "
                  f"problems in {time.perf_counter() - started:.1f} s (time budget {args.time_budget:g} s)",
                  markup=False)
    store = state.store()
    if args.recorded:  # measured now: no longer unmeasured (unless left part-measured)
        for record in records:
            point = GridPoint(record.m, record.n, record.k, record.dtype, record.layout)
            device = "cuda" if '"kind":"cuda"' in record.device else "cpu"
            if record.status == "ok" and (point, device) not in unfinished:
                store.forget_recorded(record.device, [point])
    where = store.path if store.persistent else "memory only (see the warning above)"
    say.print(f"stored {len(records)} measurements in {where}", markup=False)
    if interrupted:
        return 130
    if _portable(args, before_tuning=False):
        return 2
    for line in timeout_lines():
        errors.print(line, style="red", markup=False, soft_wrap=True)
    if timeout_lines() or any(record.status not in ("ok", "unsupported") for record in records):
        return 1
    return 0 if records else 1


def _named(args: argparse.Namespace) -> bool:
    """Whether the backends were named (``--backend`` or ``GEMMZOO_BACKENDS``)."""
    from gemmzoo.session import current

    return bool(args.backend) or bool(current().config.backends)


def _tune_recorded(args: argparse.Namespace, chosen: list[Any], skipped: dict[tuple[Any, str], list[str]],
                   records: list[Any], outcomes: dict[tuple[GridPoint, str], Outcome | None]
                   ) -> set[tuple[GridPoint, str]]:
    """Measure the recorded problems (see :mod:`gemmzoo.cli.recorded_run`), one line per problem
    on standard error, adding to ``records`` and ``outcomes`` as it goes (so that an interrupted
    run still has them). Returns the problems left part-measured by the time budget."""
    from gemmzoo.cli.recorded import recorded_rows
    from gemmzoo.cli.recorded_run import tune_recorded

    def say(line: str) -> None:
        errors.print(line, markup=False, soft_wrap=True)

    devices = {b.device for b in chosen}
    rows = [row for row in recorded_rows() if row[1] in devices]
    return tune_recorded(args, chosen, _named(args), rows, skipped, records, outcomes, say)


def _tune(args: argparse.Namespace, plan: list[Any], chosen: list[Any], total: int,
          skipped: dict[tuple[Any, str], list[str]], records: list[Any], say: Any,
          settings: Any = None) -> list[Any]:
    """Measure the plan, adding each record to ``records`` as it is made (so that an interrupted
    run still has them); the records."""
    from gemmzoo.tuning.tune import tune

    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=say, transient=True, disable=not say.is_terminal) as progress:
        task = progress.add_task("tuning", total=total)

        def step(kind: str, backend: Any, point: GridPoint, record: Any) -> None:
            if kind == "measured" and record is not None:
                records.append(record)
            if kind == "skipped":
                skipped.setdefault((point, backend.device), []).append(backend.name)
            progress.update(task, advance=1, description=f"{backend.name} {point.id}")

        def advance(point: GridPoint) -> None:
            progress.update(task, advance=sum(point.dtype in b.dtypes for b in chosen), description=point.id)

        def collect(made: list[Any], passed_over: dict[Any, list[str]], failures: list[str]) -> None:
            records.extend(made)
            for key, skipped_names in passed_over.items():
                skipped.setdefault(key, []).extend(skipped_names)
            for failure in failures:
                say.print(f"ERROR {failure}", style="red", markup=False)

        if settings is not None:  # --executor slurm|ray: stored through the validated import
            from gemmzoo.scale.jobs import tune_with_executor

            for group, names in plan:
                made, passed_over, failures, imported = tune_with_executor(
                    settings, names, group, args.budget, not args.no_verify, advance)
                collect(made, passed_over, failures)
                say.print(imported, markup=False)
        elif args.devices:
            from gemmzoo.scale.jobs import tune_on_devices

            for group, names in plan:
                collect(*tune_on_devices(names, group, args.budget, not args.no_verify, args.devices,
                                         advance))
        else:
            for group, names in plan:
                tune(group, names, budget_s=args.budget, verify=not args.no_verify, on_step=step)
    return records
