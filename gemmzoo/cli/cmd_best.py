"""``gemmzoo best M N K`` (or ``--problem TEXT`` for the classes beyond gemm): the backend
best_backend returns for a problem, and why."""

from __future__ import annotations

import argparse

from rich.markup import escape

from gemmzoo.cli.console import console, errors
from gemmzoo.cli.options import SIZE, add_timeout_argument, timeout_lines
from gemmzoo.cli.output import Column, Listing, add_format_arguments, emit
from gemmzoo.contract.accuracy import ACCURACY_CLASSES, COMPONENTWISE, accuracy_of
from gemmzoo.contract.dtypes import DTYPES
from gemmzoo.errors import GemmError

#: What a ranked figure is, by :attr:`gemmzoo.tuning.choose.Timed.bound`.
_FIGURES = {
    "host": "host time: launch-bound, the GPU waits for the launches",
    "loop": "loop time: the median time per call of timed loops of calls",
    "device": "device time",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    for name in ("M", "N", "K"):
        parser.add_argument(name, type=SIZE, nargs="?",
                            help=f"{name} (0: an empty product, answered without measuring)")
    parser.add_argument("--problem", metavar="TEXT",
                        help="a problem of another class instead of M N K, in its text form: "
                             "bmm:BxMxNxK, scaled:rowwise|blockwise|tensorwise:MxNxK, "
                             "grouped:gG:NxK:m=M1,M2,... (see docs/classes.md)")
    parser.add_argument("--dtype", choices=DTYPES, default="float32", help="default float32 (IEEE)")
    parser.add_argument("--device", choices=("cpu", "cuda"),
                        help="default: cuda when a CUDA backend is available, else cpu")
    parser.add_argument("--accuracy", choices=ACCURACY_CLASSES, default=COMPONENTWISE,
                        help="the weakest accuracy class to accept (default componentwise: normwise "
                             "backends are left out)")
    parser.add_argument("--by", choices=("caller", "device"), default="caller",
                        help="rank by caller time (the larger of device and host time per call; default) "
                             "or by device time alone")
    parser.add_argument("--no-measure", action="store_true",
                        help="never measure now; answer from the nearest measured shape instead")
    add_format_arguments(parser)
    add_timeout_argument(parser)


COLUMNS = (
    Column("shape", "MxNxK"), Column("dtype", "dtype"), Column("device", "device"),
    Column("backend", "backend"),
    Column("source", "source"), Column("basis", "measured at"), Column("median_us", "median us"),
    Column("runner_up", "runner-up"), Column("tie", "tie"),
)


def _listing(choice: object, args: argparse.Namespace) -> Listing:
    mine, other = choice.timing, choice.runner_up
    row = {"shape": f"{args.M}x{args.N}x{args.K}", "dtype": args.dtype, "device": choice.device,
           "backend": choice.backend.name, "source": choice.source,
           "basis": "x".join(map(str, choice.basis)) if choice.basis else "-",
           "median_us": f"{mine.median_s * 1e6:.4g}" if mine is not None else "-",
           "runner_up": other.backend if other is not None else "-", "tie": ",".join(choice.tied)
           if choice.tie else ""}
    record = {**row, "median_s": mine.median_s if mine is not None else None, "note": choice.note,
              "excluded": dict(choice.excluded)}
    del record["median_us"]
    return Listing("gemmzoo best", COLUMNS, [row], [record])


def _too_large(args: argparse.Namespace) -> str | None:
    """Why measuring this shape cannot fit here (see :mod:`gemmzoo.cli.sizes`), or ``None``."""
    from gemmzoo.cli.sizes import too_large
    from gemmzoo.problems.grids import GridPoint
    from gemmzoo.session import current

    candidates = [b for b in current().select(None)
                  if args.dtype in b.dtypes and (args.device is None or b.device == args.device)]
    return too_large([GridPoint(args.M, args.N, args.K, args.dtype)], candidates)


def _us(seconds: float) -> str:
    return f"{seconds * 1e6:,.1f} us"


def _run_class(args: argparse.Namespace) -> int:
    """A class problem: the stored winner if ``gemmzoo tune`` measured it, else the first candidate
    that passed the class's cases (nothing is measured here)."""
    from gemmzoo.dispatch.classes import best_class_backend, class_answer_source

    if any(size is not None for size in (args.M, args.N, args.K)):
        errors.print("gemmzoo best: give M N K or --problem, not both", style="red", markup=False)
        return 2
    try:
        backend = best_class_backend(args.problem, args.dtype, args.device)
        problem, source = class_answer_source(args.problem, args.dtype, args.device, backend)
    except (GemmError, ValueError) as error:
        errors.print(f"gemmzoo best: {error}", style="red", markup=False)
        return 2
    row = {"shape": problem.text(), "dtype": problem.dtype, "device": backend.device,
           "backend": backend.name, "source": source, "basis": "-", "median_us": "-",
           "runner_up": "-", "tie": ""}
    if args.format != "table":
        emit(Listing("gemmzoo best", COLUMNS, [row], [dict(row)]), args.format)
        return 0
    console.print(f"[bold]{escape(backend.name)}[/] for {escape(problem.text())} {problem.dtype} "
                  f"on {backend.device}")
    console.print(f"  source: {source}", markup=False)
    return 0


def run(args: argparse.Namespace) -> int:
    if args.problem is not None:
        return _run_class(args)
    if any(size is None for size in (args.M, args.N, args.K)):
        errors.print("gemmzoo best: give M N K (or --problem TEXT)", style="red", markup=False)
        return 2
    from gemmzoo.measure.ties import TIE_MAX_RATIO
    from gemmzoo.tuning.select import DEFAULT_ORDER, TIE_FLOOR, WARM_SPEEDUP_MAX, explain

    shape = (args.M, args.N, args.K)
    if not args.no_measure and min(shape) > 0:  # a new shape is measured now: seconds to minutes
        problem = _too_large(args)
        if problem is not None:
            errors.print(f"gemmzoo best: {problem} (--no-measure answers from the nearest measured "
                         "shape)", style="red", markup=False)
            return 2
        errors.print(f"gemmzoo best: looking up {args.M}x{args.N}x{args.K} {args.dtype} in the tuning "
                     "database; the candidates are measured now if it is not there (Ctrl-C stops; "
                     "--no-measure answers from the nearest measured shape)", style="dim", markup=False)
    try:
        choice = explain(shape, args.dtype, args.device, measure=False if args.no_measure else None,
                         accuracy=args.accuracy, by=args.by)
    except (GemmError, ValueError) as error:
        for line in timeout_lines():
            errors.print(line, style="red", markup=False, soft_wrap=True)
        errors.print(str(error), style="red", markup=False)
        return 2
    if args.format != "table":
        emit(_listing(choice, args), args.format)
        lines = timeout_lines()
        for line in lines:
            errors.print(line, style="red", markup=False, soft_wrap=True)
        return 1 if lines else 0
    flops = 2 * args.M * args.N * args.K
    console.print(f"[bold]{escape(choice.backend.name)}[/] for {args.M}x{args.N}x{args.K} {args.dtype} "
                  f"on {choice.device}")
    console.print(f"  accuracy: {accuracy_of(choice.backend)} (accepted: {args.accuracy}"
                  f"{' or stronger' if args.accuracy != COMPONENTWISE else ''})", markup=False)
    basis = "x".join(map(str, choice.basis)) if choice.basis else "-"
    note = f" ({choice.note})" if choice.note else ""
    console.print(f"  source: {choice.source}{note}", markup=False)
    mine = choice.timing
    if mine is not None:
        exact = choice.basis == shape and mine.median_s > 0
        rate = f", {flops / mine.median_s / 1e12:.3g} TFLOPS" if exact else ""
        console.print(f"  time: {_us(mine.median_s)} median, IQR {_us(mine.spread_s)} "
                      f"at {basis}{rate}")
        bound = _FIGURES.get(mine.bound, "device time")
        ranked = ("caller time (timed loops of calls where the near-fastest had them, else the larger "
                  "of device and host time per call)") if args.by == "caller" else "device time"
        console.print(f"  ranked by: {ranked}; {choice.backend.name}'s figure is its {bound}")
    # the fastest other checked backend, else the fastest timed one whose suite has not run here
    other = choice.runner_up or (choice.unchecked[0] if choice.unchecked else None)
    if other is not None:
        unchecked = "" if other is choice.runner_up else \
            f"; timed, its conformance suite not yet run here (gemmzoo check {other.backend})"
        console.print(f"  runner-up: {other.backend}, {_us(other.median_s)} median "
                      f"({other.bound} time), IQR {_us(other.spread_s)}{unchecked}", markup=False)
    else:
        console.print("  runner-up: none measured")
    if choice.tie:
        fastest = choice.ranking[0]
        console.print(
            f"  tie: yes, {', '.join(choice.tied)} are within measured noise of the fastest "
            f"({fastest.backend}): their median ± IQR/2 bands overlap, or they differ by at most "
            f"{TIE_FLOOR:.0%}, and none is over {TIE_MAX_RATIO}x the fastest. Among them "
            + ("those whose host times also tie with the least come first (where that host time is at "
               f"least 1/{WARM_SPEEDUP_MAX:g} of the device time), then " if args.by == "caller" else "")
            + "a backend before those its own search timed (searches_over), then the order "
            f"{', '.join(DEFAULT_ORDER)}, then the name", soft_wrap=True)
    elif other is not None and mine is not None:
        console.print(f"  tie: no, the runner-up is {other.median_s / mine.median_s:.2f}x slower, "
                      "beyond measured noise")
    for name, why in choice.excluded.items():
        console.print(f"  not a candidate: {name}: {why}", markup=False)
    lines = timeout_lines()
    for line in lines:
        errors.print(line, style="red", markup=False, soft_wrap=True)
    return 1 if lines else 0
