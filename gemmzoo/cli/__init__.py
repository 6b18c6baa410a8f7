"""The ``gemmzoo`` command line (also ``python -m gemmzoo``)."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from gemmzoo.cli.console import errors
from gemmzoo.errors import GemmError

# Each subcommand lives in gemmzoo/cli/cmd_<name>.py with add_arguments(parser) and run(args).
COMMANDS = {
    "list": "every backend: name, device, dtypes, availability; plugins that failed to load",
    "check": "run the conformance suite on backends; exit 0 only when every one conforms",
    "bench": "check and time backends over a shape grid; table, JSON, CSV, plot",
    "tune": "measure and store the best backend for each shape of a grid",
    "best": "print the backend best_backend would return for M N K, and why",
    "compare": "results of several runs, machines or versions side by side; regressions beyond noise fail",
}


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every subcommand."""
    parser = argparse.ArgumentParser(prog="gemmzoo", description="Compare GEMM backends side by side.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, summary in COMMANDS.items():
        module = importlib.import_module(f"gemmzoo.cli.cmd_{name}")
        sub = commands.add_parser(name, help=summary, description=summary)
        module.add_arguments(sub)
        sub.set_defaults(handler=module.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status (2 for gemmzoo's own errors)."""
    args = build_parser().parse_args(argv)
    try:
        return int(args.handler(args) or 0)
    except GemmError as error:
        trace = getattr(error, "traceback", None)  # a plugin's own traceback (strict plugins)
        if trace:
            errors.print(trace, markup=False, soft_wrap=True)
        errors.print(f"gemmzoo {args.command}: {error}", markup=False, style="red", soft_wrap=True)
        return 2


if __name__ == "__main__":
    sys.exit(main())
