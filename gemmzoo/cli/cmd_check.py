"""``gemmzoo check NAME...``: the conformance suite, from the command line."""

from __future__ import annotations

import argparse

from rich.progress import Progress

from gemmzoo.cli.console import errors, messages
from gemmzoo.cli.options import (
    SIZE,
    add_timeout_argument,
    default_selection,
    number,
    timeout_lines,
)
from gemmzoo.cli.output import Column, Listing, add_format_arguments, emit
from gemmzoo.conformance import check_backend, conformance_cases, input_checks
from gemmzoo.conformance.random_problems import DEFAULT_MAX_WORK
from gemmzoo.contract.accuracy import accuracy_of
from gemmzoo.contract.dtypes import DTYPES
from gemmzoo.errors import UnknownBackendError
from gemmzoo.plugins.registry import unavailable_reason
from gemmzoo.session import current


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("names", nargs="*", metavar="NAME",
                        help="backends to check (default: GEMMZOO_BACKENDS, else every available one)")
    parser.add_argument("--dtype", action="append", choices=DTYPES,
                        help="check only this dtype (repeatable; default: every dtype the backend declares)")
    parser.add_argument("-v", "--verbose", action="store_true", help="list every check, not only failures")
    add_format_arguments(parser)
    parser.add_argument("--random", type=SIZE, default=0, metavar="N",
                        help="also N random problems per backend, in no fixed list (default: 0)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random problems (default: 0)")
    parser.add_argument("--max-work", type=number(float, 1), default=DEFAULT_MAX_WORK, metavar="MNK",
                        help=f"largest M·N·K of a random problem (default: {DEFAULT_MAX_WORK:g}; "
                             "1e10 reaches a GPU's large-problem routes)")
    parser.add_argument("--workers", type=number(int, 1, high=64), metavar="N",
                        help="processes a backend's suite is shared among (default: more than one only for a "
                             "backend whose cases compile kernels, on a machine with cores to spare)")
    add_timeout_argument(parser)


COLUMNS = (
    Column("backend", "backend"),
    Column("dtypes", "dtypes", compact=False),
    Column("accuracy", "accuracy", compact=False),
    Column("checks", "checks", justify="right"),
    Column("failed", "failed", justify="right"),
    Column("result", "result", text=True),
)
_STYLE = {"conforms": "green", "does not conform": "red", "TIMEOUT": "red"}


def _store_verdicts(backend: object, report: object, dtypes: list[str], say: object) -> None:
    """The verdicts replace this machine's stored ones (what selection trusts), and a line says
    when and against what they were earned; a database that fails must not fail the check."""
    from gemmzoo.tuning.verdicts import describe_key, store_report, when

    try:
        stored = store_report(backend, report, dtypes)
    except Exception as error:
        errors.print(f"verdicts not stored: {type(error).__name__}: {error}", markup=False, soft_wrap=True)
        return
    if stored:
        first = stored[0]
        dtypes_earned = ", ".join(r.dtype for r in stored)
        say.print(f"verdicts of {backend.name} for {dtypes_earned} earned {when(first.created)} "
                  f"against {describe_key(first.device, first.versions)}", markup=False)


def run(args: argparse.Namespace) -> int:
    say = messages(args.format)
    try:
        chosen = current().select(args.names)
    except UnknownBackendError as error:
        say.print(str(error), style="red", markup=False)
        return 2
    if not args.names:  # checking "everything" means everything usable here
        chosen = [b for b in chosen if unavailable_reason(b) is None]
        chosen = default_selection(chosen, False,
                                   lambda line: errors.print(line, style="yellow", markup=False))
    if not chosen:
        say.print("no backend to check", style="red", markup=False)
        return 2

    rows: list[dict[str, str]] = []
    all_passed, interrupted = True, False
    try:
        for backend in chosen:
            all_passed &= _check_one(args, backend, rows, say)
    except KeyboardInterrupt:
        interrupted = True
        errors.print(f"interrupted: {len(rows)} of {len(chosen)} backends checked", style="yellow",
                     markup=False)
    listing = Listing("gemmzoo conformance", COLUMNS, rows,
                      styles={"result": lambda cell: _STYLE.get(cell, "yellow")})
    emit(listing, args.format, args.wide)
    checked = {backend.name for backend in chosen}
    others = [line for line in timeout_lines() if line.split(" ", 2)[1].rstrip(":") not in checked]
    for line in others:  # backends left out because asking whether they are available overran
        errors.print(line, style="red", markup=False, soft_wrap=True)
    if interrupted:
        return 130
    return 0 if all_passed and not timeout_lines() else 1


def _check_one(args: argparse.Namespace, backend: object, rows: list[dict[str, str]], say: object) -> bool:
    """Check one backend, print its failures (every check with ``-v``) and its one-line tally,
    add its row; whether it conforms."""
    try:
        dtypes = [d for d in DTYPES if d in backend.dtypes and (not args.dtype or d in args.dtype)]
        cases = sum(len(conformance_cases(d, backend.device)) for d in dtypes)
        total = len(input_checks(backend)) + cases + (args.random if dtypes else 0)
    except Exception:  # a malformed backend: check_backend reports what is wrong with it
        dtypes, total = [], None
    with Progress(console=say, transient=True, disable=not say.is_terminal) as progress:
        task = progress.add_task(f"checking {backend.name}", total=total)
        report = check_backend(backend, dtypes, on_result=lambda _r, t=task: progress.advance(t),
                               random=args.random, seed=args.seed, max_work=args.max_work,
                               workers=args.workers)
    if report.timed_out is None:  # an overrun says nothing about conformance: ask again next time
        _store_verdicts(backend, report, dtypes, say)
    row = {"backend": backend.name, "dtypes": ",".join(dtypes), "accuracy": str(accuracy_of(backend))}
    if report.timed_out is not None:
        say.print(f"TIMEOUT {report.timed_out}", markup=False, soft_wrap=True, style="red")
        rows.append({**row, "checks": str(len(report.results)), "failed": str(len(report.failures)),
                     "result": "TIMEOUT"})
        return False
    if report.unavailable is not None:
        rows.append({**row, "dtypes": "-", "checks": "0", "failed": "-",
                     "result": f"unavailable: {' '.join(report.unavailable.split())}"})
        return False
    for result in report.results:
        if not result.passed or args.verbose:
            mark = "ok" if result.passed else "FAIL"
            say.print(f"{mark} {backend.name} {result.check}: {result.detail}", markup=False,
                      style=None if result.passed else "red")
    # One line as each backend finishes: a log of a long run (no terminal, so no progress bar)
    # then shows how far it got.
    say.print(f"{backend.name}: {len(report.results)} checks, {len(report.failures)} failed", markup=False)
    rows.append({**row, "checks": str(len(report.results)), "failed": str(len(report.failures)),
                 "result": "conforms" if report.passed else "does not conform"})
    return bool(report.passed)
