"""``gemmzoo list``: every backend and every plugin that failed to load."""

from __future__ import annotations

import argparse

from rich.table import Table

from gemmzoo.cli.console import console
from gemmzoo.dtypes import DTYPES
from gemmzoo.registry import get_registry


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--plain", action="store_true", help="tab-separated lines instead of a table")


def run(args: argparse.Namespace) -> int:
    registry = get_registry()
    rows = []
    for backend in registry.backends():
        reason = backend.unavailable_reason()
        provider = registry.provider(backend.name)
        dist = f"{provider.distribution} {provider.version}" if provider.distribution else "-"
        dtypes = ",".join(d for d in DTYPES if d in backend.dtypes)
        rows.append((backend.name, backend.device, dtypes, "yes" if reason is None else f"no: {reason}",
                     f"{provider.name} ({dist})"))
    if args.plain:
        for row in rows:
            print("\t".join(row))
        for failure in registry.failures:
            print(f"FAILED\t{failure.plugin.describe()}\t{failure.error}")
        return 0
    table = Table(title="gemmzoo backends")
    for column in ("backend", "device", "dtypes", "available", "plugin (distribution)"):
        table.add_column(column, overflow="fold")
    for name, device, dtypes, available, plugin in rows:
        style = "green" if available == "yes" else "yellow"
        table.add_row(name, device, dtypes, f"[{style}]{available}[/]", plugin)
    console.print(table)
    if registry.failures:
        failed = Table(title="plugins that failed to load", title_style="red")
        failed.add_column("plugin")
        failed.add_column("error", overflow="fold")
        for failure in registry.failures:
            failed.add_row(failure.plugin.describe(), failure.error)
        console.print(failed)
    if registry.disabled:
        console.print(f"disabled by GEMMZOO_DISABLE_PLUGINS: {', '.join(registry.disabled)}")
    return 0
