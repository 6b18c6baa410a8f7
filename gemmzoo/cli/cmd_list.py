"""``gemmzoo list``: every backend and every plugin that failed to load."""

from __future__ import annotations

import argparse
import importlib.util
import sys
from collections.abc import Sequence
from typing import Any

from gemmzoo.cli.console import console
from gemmzoo.cli.output import Column, Listing, add_format_arguments, emit
from gemmzoo.contract.accuracy import accuracy_of
from gemmzoo.contract.backend import declared
from gemmzoo.contract.dtypes import DTYPES
from gemmzoo.plugins.registry import unavailable_reason
from gemmzoo.session import current

# The plain format's column order is the one scripts have read since the first release; after the
# header and the rows come FAILED and DISABLED lines, in three fields.
COLUMNS = (
    Column("backend", "backend"),
    Column("device", "device"),
    Column("dtypes", "dtypes", drop=1),  # left out first where a long list leaves no room for the rest
    Column("available", "available", text=True),
    Column("plugin", "plugin (distribution)", compact=False),
    Column("accuracy", "accuracy", compact=False),
)
_INTERPRETER_HINT = "no GPU: set TRITON_INTERPRET=1"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_format_arguments(parser)
    parser.add_argument(
        "-v", "--verbose", action="store_true",
        help="ask every backend whether it runs here, importing its framework (without -v a backend "
             "whose framework is installed but not imported yet is listed as installed); print each "
             "available backend's conformance verdicts (when and against what they were earned) and the "
             "traceback of each plugin that raised (to stderr unless --format table)",
    )


NOT_PROBED = "installed"
NOT_PROBED_NOTE = ("installed: its framework is installed and was not imported to ask whether the backend "
                   "runs here; gemmzoo list -v asks every backend")
NO_GPU = "installed, no GPU here"
NO_GPU_NOTE = ("installed, no GPU here: a CUDA backend whose framework is installed, on a machine with no "
               "GPU device; it runs here only where its framework runs without one (Triton's interpreter, "
               "TRITON_INTERPRET=1); gemmzoo list -v asks every backend")


def _availability(backend: Any, probe: bool,
                  gpu_nodes: Sequence[str] | None = None) -> tuple[bool | None, str | None]:
    """(available, reason): asked of the backend when ``probe`` is on or asking is cheap (a module
    it requires is missing, or all of them are imported already); else ``(None, NO_GPU)`` for a CUDA
    backend on a machine with no GPU device (:func:`gemmzoo.measure.device.no_gpu_reason`: told without
    importing anything, from ``gpu_nodes``, default its :data:`~gemmzoo.measure.device.GPU_DEVICE_NODES`),
    ``(None, NOT_PROBED)`` for the others."""
    try:
        required = tuple(declared(backend, "requires") or ())
        cheap = probe or not required or any(importlib.util.find_spec(m) is None for m in required) \
            or all(m in sys.modules for m in required)
        gpu = not cheap and backend.device == "cuda"
    except Exception:  # a malformed declaration: ask the backend, which says what is wrong
        cheap, gpu = True, False
    if gpu:
        from gemmzoo.measure.device import no_gpu_reason

        if (no_gpu_reason() if gpu_nodes is None else no_gpu_reason(gpu_nodes)) is not None:
            return None, NO_GPU
    if not cheap:
        return None, NOT_PROBED
    reason = unavailable_reason(backend)  # guarded: a broken plugin is a reason, not a crash
    return reason is None, None if reason is None else " ".join(reason.split())  # one line, no tabs


def _print_tracebacks(registry: Any, plain: bool) -> None:
    for failure in registry.failures:
        if failure.traceback:
            header = f"traceback of plugin {failure.plugin.describe()}:"
            if plain:
                print(f"{header}\n{failure.traceback}\n", file=sys.stderr)
            else:
                console.print(header, style="red", markup=False)
                console.print(failure.traceback, markup=False)


def _print_verdicts(registry: Any, stream: Any) -> None:
    """Each available backend's verdicts (:func:`gemmzoo.tuning.verdicts.verdict_lines`)."""
    from gemmzoo.tuning import state
    from gemmzoo.tuning.verdicts import verdict_lines

    try:
        store = state.store()
    except Exception as error:  # no database: say so, list the rest
        print(f"verdicts: the tuning database cannot be opened ({type(error).__name__})", file=stream)
        return
    for backend in registry.backends():
        if unavailable_reason(backend) is not None:
            continue
        try:
            lines = verdict_lines(backend, store)
        except Exception as error:
            lines = [f"verdicts unreadable: {type(error).__name__}"]
        print(f"verdicts of {backend.name}:", file=stream)
        for line in lines:
            print(f"  {line}", file=stream)


def _print_compiled_dispatch(stream: Any) -> None:
    """Whether gemmzoo.matmul's compiled dispatch is used here, or why not (built, being built in
    the background, its background build failed, turned off: :func:`gemmzoo.native.status`)."""
    from gemmzoo import native

    try:
        found = native.status()
    except Exception as error:  # never stops the listing
        print(f"compiled dispatch: unknown ({type(error).__name__})", file=stream)
        return
    said = f"built, {found.path}" if found.built else f"not used ({found.reason})"
    if stream is sys.stdout:  # folded to a terminal's width, one line when piped (the console's rule)
        console.print(f"compiled dispatch: {said}", markup=False)
    else:
        print(f"compiled dispatch: {said}", file=stream)


def _short(reason: str, shared: dict[str, str], room: int) -> str:
    """A reason for the table: one longer than ``room`` is given once, under the table, however
    many backends share it, and the rows say which note it is."""
    if len(reason) <= room:
        return reason
    if reason not in shared:
        shared[reason] = f"[{len(shared) + 1}]"
    return f"no: see {shared[reason]}"


def run(args: argparse.Namespace) -> int:
    registry = current().registry
    rows, records = [], []
    for backend in registry.backends():
        available, reason = _availability(backend, args.verbose)
        provider = registry.provider(backend.name)
        dist = f"{provider.distribution} {provider.version}" if provider.distribution else "-"
        dtypes = [d for d in DTYPES if d in backend.dtypes]
        shown = "yes" if available else (reason if available is None else f"no: {reason}")
        rows.append({"backend": backend.name, "device": backend.device, "dtypes": ",".join(dtypes),
                     "available": shown, "plugin": f"{provider.name} ({dist})",
                     "accuracy": str(accuracy_of(backend))})
        records.append({**rows[-1], "dtypes": dtypes, "available": available, "reason": reason})
    failures = [(f.plugin.describe(), f.error) for f in registry.failures]
    listing = Listing("gemmzoo backends", COLUMNS, rows, records)
    if args.format == "json":
        listing.records = [*records, *({"failed_plugin": p, "error": e} for p, e in failures),
                           *({"disabled_plugin": name} for name in registry.disabled)]
    if args.format == "plain":  # print, not rich: rich expands tabs and reads brackets as markup
        print("\t".join(c.title for c in COLUMNS))
        for row in rows:
            print("\t".join(row[c.key] for c in COLUMNS))
        for plugin, error in failures:
            print(f"FAILED\t{plugin}\t{error}")
        for name in registry.disabled:
            print(f"DISABLED\t{name}\tGEMMZOO_DISABLE_PLUGINS")
        if args.verbose:
            _print_tracebacks(registry, plain=True)
            _print_verdicts(registry, sys.stdout)
            _print_compiled_dispatch(sys.stdout)
        return 0
    if args.format != "table":
        emit(listing, args.format)
        if args.verbose:
            _print_tracebacks(registry, plain=True)
        return 0
    if console.is_terminal:
        shared: dict[str, str] = {}
        room = max(12, console.width - 70)  # what the other compact columns leave
        for row in rows:
            row["available"] = _short(row["available"], shared, room)
        listing.notes += [f"{mark} {reason}" for reason, mark in shared.items()]
    for status, note in ((NOT_PROBED, NOT_PROBED_NOTE), (NO_GPU, NO_GPU_NOTE)):
        if any(row["available"] == status for row in rows):
            listing.notes.append(note)
    listing.styles["available"] = lambda cell: ("green" if cell == "yes" else
                                                "dim" if cell in (NOT_PROBED, NO_GPU) else "yellow")
    emit(listing, "table", args.wide)
    if failures:
        emit(Listing("plugins that failed to load", (Column("plugin", "plugin"),
                                                    Column("error", "error", text=True)),
                     [{"plugin": p, "error": e} for p, e in failures],
                     styles={"plugin": lambda _cell: "red"}), "table")
    if registry.disabled:
        console.print(f"disabled by GEMMZOO_DISABLE_PLUGINS: {', '.join(registry.disabled)}", markup=False)
    if args.verbose:
        _print_tracebacks(registry, plain=False)
        _print_verdicts(registry, sys.stdout)
        _print_compiled_dispatch(sys.stdout)
    elif any(failure.traceback for failure in registry.failures):
        console.print("gemmzoo list -v prints the tracebacks", style="dim")
    return 0
