"""``gemmzoo tune``: measure backends over a grid or shapes and store the results for best_backend."""

from __future__ import annotations

import argparse
from typing import Any

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from gemmzoo.cli.console import console
from gemmzoo.cli.options import add_point_arguments, points_from_arguments
from gemmzoo.errors import GemmError
from gemmzoo.grids import GridPoint


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_point_arguments(parser, "tune")
    parser.add_argument("--no-verify", action="store_true",
                        help="skip each measurement's check against the float64 reference")


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


def run(args: argparse.Namespace) -> int:
    from gemmzoo.registry import get_registry
    from gemmzoo.tuning import state
    from gemmzoo.tuning.tune import tune

    try:
        points = points_from_arguments(args)
        chosen = get_registry().select(args.backend)
    except (GemmError, KeyError, ValueError) as error:
        console.print(str(error), style="red", markup=False)
        return 2
    if not points:
        console.print("[red]nothing to tune: the grid is empty[/]")
        return 2
    total = sum(1 for p in points for b in chosen if p.dtype in b.dtypes)
    skipped: dict[tuple[Any, str], list[str]] = {}
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console, transient=True) as progress:
        task = progress.add_task("tuning", total=total)

        def step(kind: str, backend: Any, point: GridPoint, record: Any) -> None:
            if kind == "skipped":
                skipped.setdefault((point, backend.device), []).append(backend.name)
            progress.update(task, advance=1, description=f"{backend.name} {point.id}")

        records = tune(points, [b.name for b in chosen], budget_s=args.budget, verify=not args.no_verify,
                       on_step=step)
    console.print(_summary(records, skipped))
    store = state.store()
    where = store.path if store.persistent else "memory only (see the warning above)"
    console.print(f"stored {len(records)} measurements in {where}")
    return 0 if records else 1
