"""``gemmzoo list``: every backend and every plugin that failed to load."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from rich.markup import escape
from rich.table import Table

from gemmzoo.accuracy import accuracy_of
from gemmzoo.cli.console import console
from gemmzoo.dtypes import DTYPES
from gemmzoo.registry import get_registry, unavailable_reason


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--plain", action="store_true",
        help="tab-separated lines instead of a table: one per backend (name, device, dtypes, available, "
             "plugin, accuracy class), then FAILED and DISABLED lines for plugins",
    )
    parser.add_argument(
        "-v", "--verbose", action="store_true",
        help="also print the traceback of each plugin that raised (to stderr with --plain)",
    )


def _print_tracebacks(registry: Any, plain: bool) -> None:
    for failure in registry.failures:
        if failure.traceback:
            header = f"traceback of plugin {failure.plugin.describe()}:"
            if plain:
                print(f"{header}\n{failure.traceback}\n", file=sys.stderr)
            else:
                console.print(header, style="red", markup=False)
                console.print(failure.traceback, markup=False, soft_wrap=True)


def run(args: argparse.Namespace) -> int:
    registry = get_registry()
    rows = []
    for backend in registry.backends():
        reason = unavailable_reason(backend)  # guarded: a broken plugin is a reason, not a crash
        provider = registry.provider(backend.name)
        dist = f"{provider.distribution} {provider.version}" if provider.distribution else "-"
        dtypes = ",".join(d for d in DTYPES if d in backend.dtypes)
        available = "yes" if reason is None else "no: " + " ".join(reason.split())  # one line, no tabs
        rows.append((backend.name, backend.device, dtypes, available, f"{provider.name} ({dist})",
                     str(accuracy_of(backend))))
    if args.plain:  # print, not rich: rich expands tabs and reads brackets as markup
        for row in rows:
            print("\t".join(row))
        for failure in registry.failures:
            print(f"FAILED\t{failure.plugin.describe()}\t{failure.error}")
        for name in registry.disabled:
            print(f"DISABLED\t{name}\tGEMMZOO_DISABLE_PLUGINS")
        if args.verbose:
            _print_tracebacks(registry, plain=True)
        return 0
    table = Table(title="gemmzoo backends")
    for column in ("backend", "device", "dtypes", "accuracy", "available", "plugin (distribution)"):
        table.add_column(column, overflow="fold")
    for name, device, dtypes, available, plugin, accuracy in rows:
        style = "green" if available == "yes" else "yellow"
        # Reasons and errors are plugins' text: "pip install x[cuda]" must not be read as markup.
        table.add_row(name, device, dtypes, accuracy, f"[{style}]{escape(available)}[/]", escape(plugin))
    console.print(table)
    if registry.failures:
        failed = Table(title="plugins that failed to load", title_style="red")
        failed.add_column("plugin")
        failed.add_column("error", overflow="fold")
        for failure in registry.failures:
            failed.add_row(escape(failure.plugin.describe()), escape(failure.error))
        console.print(failed)
    if registry.disabled:
        console.print(f"disabled by GEMMZOO_DISABLE_PLUGINS: {', '.join(registry.disabled)}")
    if args.verbose:
        _print_tracebacks(registry, plain=False)
    elif any(failure.traceback for failure in registry.failures):
        console.print("gemmzoo list -v prints the tracebacks", style="dim")
    return 0
