"""``gemmzoo tune``: measure backends over a grid or shapes and store the results for best_backend."""

from __future__ import annotations

import argparse
from typing import Any

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from gemmzoo.cli.console import console
from gemmzoo.cli.options import add_point_arguments, apply_timeout, points_from_arguments, timeout_lines
from gemmzoo.errors import GemmError
from gemmzoo.grids import GridPoint


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_point_arguments(parser, "tune")
    parser.add_argument("--no-verify", action="store_true",
                        help="skip each measurement's check against the float64 reference")
    parser.add_argument("--recorded", action="store_true",
                        help="tune the problems gemmzoo.matmul met and answered without measurements "
                             "of their own (recorded in the tuning database), instead of a grid")
    parser.add_argument("--import", dest="import_files", action="append", default=[], metavar="FILE",
                        help="take in a tuning file exported elsewhere (repeatable; rows made on another "
                             "device or with other library versions are ignored); measures nothing unless "
                             "a grid or shapes are given too")
    parser.add_argument("--export", metavar="FILE",
                        help="write the tuning database to a portable JSON file (after any tuning and "
                             "--import); see docs/tuning.md")


def recorded_points() -> dict[str, list[GridPoint]]:
    """The recorded problems of each of this machine's devices (``"cpu"``, ``"cuda"``)."""
    from gemmzoo.tuning import state
    from gemmzoo.tuning.fingerprint import device_fingerprint

    store = state.store()
    found: dict[str, list[GridPoint]] = {}
    for device in ("cpu", "cuda"):
        try:
            fingerprint = device_fingerprint(device)
        except Exception:  # no such device here
            continue
        points = [point for point, _seen in store.recorded(fingerprint)]
        if points:
            found[device] = points
    return found


def _time(seconds: float) -> str:
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.3g} ms"
    return f"{seconds * 1e6:.3g} us"


def _summary(records: list[Any], skipped: dict[tuple[Any, str], list[str]]) -> Table:
    from gemmzoo.tuning.select import Timed, rank

    table = Table(title="gemmzoo tune: fastest per problem (stored)")
    for column in ("problem", "best", "median", "TFLOPS", "runner-up", "tie", "not chosen"):
        table.add_column(column, justify="right" if column in ("median", "TFLOPS") else "left")
    groups: dict[tuple[Any, str], list[Any]] = {}
    for record in records:
        point = GridPoint(record.m, record.n, record.k, record.dtype, record.layout)
        device = "cuda" if '"kind":"cuda"' in record.device else "cpu"
        groups.setdefault((point, device), []).append(record)
    for (point, device), group in groups.items():
        timed = [Timed(r.backend, r.median_s, r.spread_s or 0.0) for r in group if r.status == "ok"]
        bad = [f"{r.backend}: {r.status}" for r in group if r.status != "ok"]
        bad += [f"{name}: skipped" for name in skipped.get((point, device), [])]
        layout = "" if point.layout == "NN" else f" {point.layout}"
        problem = f"{point.m}x{point.n}x{point.k}{layout} {point.dtype} {device}"
        if not timed:
            table.add_row(problem, "-", "", "", "", "", ", ".join(bad))
            continue
        winner, ranking, tied = rank(timed)
        best = next(t for t in ranking if t.backend == winner)
        other = next((t for t in ranking if t.backend != winner), None)
        table.add_row(
            problem, winner, _time(best.median_s),
            f"{point.flops / best.median_s / 1e12:.3g}" if best.median_s > 0 else "-",
            f"{other.backend} {_time(other.median_s)}" if other else "-",
            ("yes: " + ", ".join(tied)) if len(tied) > 1 else "no", ", ".join(bad),
        )
    return table


def _portable(args: argparse.Namespace, before_tuning: bool) -> int:
    """``--import`` (before tuning) or ``--export`` (after); 0, or 2 for a bad file."""
    from gemmzoo.tuning import state
    from gemmzoo.tuning.portable import TuningFileError, export_tuning, import_tuning

    try:
        if before_tuning:
            for path in args.import_files:
                report = import_tuning(state.store(), path)
                console.print(f"{path}: {report.summary()}", markup=False, soft_wrap=True)
            state.forget_answers()
        elif args.export:
            measurements, verdicts = export_tuning(state.store(), args.export)
            console.print(f"wrote {args.export}: {measurements} measurements, "
                          f"{verdicts} conformance verdicts")
    except (TuningFileError, OSError) as error:
        console.print(str(error), style="red", markup=False, soft_wrap=True)
        return 2
    return 0


def run(args: argparse.Namespace) -> int:
    from gemmzoo.registry import get_registry
    from gemmzoo.tuning import state
    from gemmzoo.tuning.tune import tune

    apply_timeout(args)
    if args.import_files or args.export:
        if _portable(args, before_tuning=True):
            return 2
        if not (args.grid or args.shape or args.file or args.recorded):
            return _portable(args, before_tuning=False)

    try:
        chosen = get_registry().select(args.backend)
        if args.recorded:  # each device's problems, with that device's backends
            plan = [(points, names) for device, points in recorded_points().items()
                    if (names := [b.name for b in chosen if b.device == device])]
        else:
            plan = [(points_from_arguments(args), [b.name for b in chosen])]
    except (GemmError, KeyError, ValueError) as error:
        console.print(str(error), style="red", markup=False)
        return 2
    points = [p for group, _names in plan for p in group]
    if not points and args.recorded:
        console.print("nothing recorded: gemmzoo.matmul has met no problem without a measurement")
        return 0
    if not points:
        console.print("[red]nothing to tune: the grid is empty[/]")
        return 2
    total = sum(1 for group, names in plan for p in group for b in chosen
                if b.name in names and p.dtype in b.dtypes)
    skipped: dict[tuple[Any, str], list[str]] = {}
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console, transient=True) as progress:
        task = progress.add_task("tuning", total=total)

        def step(kind: str, backend: Any, point: GridPoint, record: Any) -> None:
            if kind == "skipped":
                skipped.setdefault((point, backend.device), []).append(backend.name)
            progress.update(task, advance=1, description=f"{backend.name} {point.id}")

        if args.devices:
            from gemmzoo.scale_jobs import tune_on_devices

            records = []
            for group, names in plan:
                made, passed_over, failures = tune_on_devices(
                    names, group, args.budget, not args.no_verify, args.devices,
                    lambda point: progress.update(task, advance=sum(point.dtype in b.dtypes for b in chosen),
                                                  description=point.id))
                records += made
                for key, skipped_names in passed_over.items():
                    skipped.setdefault(key, []).extend(skipped_names)
                for failure in failures:
                    console.print(f"[red]ERROR[/] {failure}", markup=True, soft_wrap=True)
        else:
            records = [record for group, names in plan
                       for record in tune(group, names, budget_s=args.budget, verify=not args.no_verify,
                                          on_step=step)]
    console.print(_summary(records, skipped))
    store = state.store()
    if args.recorded:  # measured now: no longer unmeasured
        for record in records:
            if record.status == "ok":
                store.forget_recorded(record.device, [GridPoint(record.m, record.n, record.k, record.dtype,
                                                                record.layout)])
    where = store.path if store.persistent else "memory only (see the warning above)"
    console.print(f"stored {len(records)} measurements in {where}")
    if _portable(args, before_tuning=False):
        return 2
    for line in timeout_lines():
        console.print(line, style="red", markup=False, soft_wrap=True)
    return 0 if records and not timeout_lines() else 1
