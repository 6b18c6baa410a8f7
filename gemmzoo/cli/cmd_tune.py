"""``gemmzoo tune``: measure backends over a grid or shapes and store the results for best_backend."""

from __future__ import annotations

import argparse
import dataclasses
import re
from typing import Any

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from gemmzoo import grids
from gemmzoo.cli.console import console
from gemmzoo.dtypes import DTYPES
from gemmzoo.errors import GemmError
from gemmzoo.grids import LAYOUTS, GridPoint

_SHAPE = re.compile(r"^\s*(\d+)\s*[xX,]\s*(\d+)\s*[xX,]\s*(\d+)\s*$")


def parse_shape(text: str) -> tuple[int, int, int]:
    """``"4096x4096x512"`` -> ``(4096, 4096, 512)``; ``argparse.ArgumentTypeError`` otherwise."""
    found = _SHAPE.match(text)
    if not found:
        raise argparse.ArgumentTypeError(f"shape must be MxNxK, e.g. 4096x4096x512; got {text!r}")
    m, n, k = (int(x) for x in found.groups())
    return m, n, k


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--grid", action="append", metavar="NAME",
                        help="a named grid (repeatable; default: smoke when no --shape is given)")
    parser.add_argument("--shape", action="append", type=parse_shape, metavar="MxNxK",
                        help="a shape to tune (repeatable; float32 unless --dtype says otherwise)")
    parser.add_argument("--backend", action="append", metavar="NAME",
                        help="tune only this backend (repeatable; default: GEMMZOO_BACKENDS, else all)")
    parser.add_argument("--dtype", action="append", choices=DTYPES,
                        help="tune this dtype (repeatable; replaces the grid's dtypes)")
    parser.add_argument("--layout", choices=LAYOUTS, default="NN", help="operand layout of --shape points")
    parser.add_argument("--budget", type=float, default=0.2, metavar="SECONDS",
                        help="timing budget per backend and shape (default 0.2)")
    parser.add_argument("--no-verify", action="store_true",
                        help="skip each measurement's check against the float64 reference")


def _points(args: argparse.Namespace) -> list[GridPoint]:
    points: list[GridPoint] = []
    names = args.grid or ([] if args.shape else ["smoke"])
    if names:
        get_grid = getattr(grids, "get_grid", None)
        if get_grid is None:
            raise GemmError("named grids are not available in this gemmzoo; use --shape MxNxK")
        for name in names:
            points += get_grid(name)
    points += [GridPoint(m, n, k, "float32", args.layout) for m, n, k in args.shape or []]
    if args.dtype:
        points = [dataclasses.replace(p, dtype=d) for p in points for d in args.dtype]
    return list(dict.fromkeys(points))


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
        points = _points(args)
        chosen = get_registry().select(args.backend)
    except (GemmError, KeyError, ValueError) as error:
        console.print(f"[red]{error}[/]")
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
