"""``gemmzoo check NAME...``: the conformance suite, from the command line."""

from __future__ import annotations

import argparse

from rich.markup import escape
from rich.progress import Progress
from rich.table import Table

from gemmzoo.accuracy import accuracy_of
from gemmzoo.cli.console import console
from gemmzoo.conformance import check_backend, conformance_cases, input_checks
from gemmzoo.conformance.random_problems import DEFAULT_MAX_WORK
from gemmzoo.dtypes import DTYPES
from gemmzoo.errors import UnknownBackendError
from gemmzoo.registry import get_registry


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("names", nargs="*", metavar="NAME",
                        help="backends to check (default: GEMMZOO_BACKENDS, else every available one)")
    parser.add_argument("--dtype", action="append", choices=DTYPES,
                        help="check only this dtype (repeatable; default: every dtype the backend declares)")
    parser.add_argument("-v", "--verbose", action="store_true", help="list every check, not only failures")
    parser.add_argument("--random", type=int, default=0, metavar="N",
                        help="also N random problems per backend, in no fixed list (default: 0)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random problems (default: 0)")
    parser.add_argument("--max-work", type=float, default=DEFAULT_MAX_WORK, metavar="MNK",
                        help=f"largest M·N·K of a random problem (default: {DEFAULT_MAX_WORK:g}; "
                             "1e10 reaches a GPU's large-problem routes)")


def _store_verdicts(backend: object, report: object, dtypes: list[str]) -> None:
    """The verdicts replace this machine's stored ones (what selection trusts); a database that
    fails must not fail the check."""
    from gemmzoo.tuning.verdicts import store_report

    try:
        store_report(backend, report, dtypes)
    except Exception as error:
        console.print(f"verdicts not stored: {type(error).__name__}: {error}", markup=False, soft_wrap=True)


def run(args: argparse.Namespace) -> int:
    registry = get_registry()
    try:
        chosen = registry.select(args.names)
    except UnknownBackendError as error:
        console.print(str(error), style="red", markup=False)
        return 2
    if not args.names:  # checking "everything" means everything usable here
        chosen = [b for b in chosen if b.unavailable_reason() is None]
    if not chosen:
        console.print("[red]no backend to check[/]")
        return 2

    summary = Table(title="gemmzoo conformance")
    for column in ("backend", "dtypes", "accuracy", "checks", "failed", "result"):
        summary.add_column(column)
    all_passed = True
    for backend in chosen:
        try:
            dtypes = [d for d in DTYPES if d in backend.dtypes and (not args.dtype or d in args.dtype)]
            cases = sum(len(conformance_cases(d, backend.device)) for d in dtypes)
            total = len(input_checks(backend)) + cases + (args.random if dtypes else 0)
        except Exception:  # a malformed backend: check_backend reports what is wrong with it
            dtypes, total = [], None
        with Progress(console=console, transient=True) as progress:
            task = progress.add_task(f"checking {backend.name}", total=total)
            report = check_backend(backend, dtypes, on_result=lambda _r, t=task: progress.advance(t),
                                   random=args.random, seed=args.seed, max_work=args.max_work)
        _store_verdicts(backend, report, dtypes)
        if report.unavailable is not None:
            all_passed = False
            reason = escape(report.unavailable)
            summary.add_row(backend.name, "-", str(accuracy_of(backend)), "0", "-",
                            f"[yellow]unavailable: {reason}[/]")
            continue
        all_passed &= report.passed
        for result in report.results:
            if not result.passed or args.verbose:
                mark = "[green]ok[/]" if result.passed else "[red]FAIL[/]"
                detail = escape(result.detail)  # it quotes errors and values: brackets are text
                console.print(f"{mark} {backend.name} {result.check}: {detail}", soft_wrap=True)
        # One line as each backend finishes: a log of a long run (no terminal, so no progress bar)
        # then shows how far it got.
        console.print(f"{backend.name}: {len(report.results)} checks, {len(report.failures)} failed",
                      markup=False)
        verdict = "[green]conforms[/]" if report.passed else "[red]does not conform[/]"
        summary.add_row(backend.name, ",".join(dtypes), escape(str(accuracy_of(backend))),
                        str(len(report.results)), str(len(report.failures)), verdict)
    console.print(summary)
    return 0 if all_passed else 1
