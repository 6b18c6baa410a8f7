"""The ``gemmzoo`` command line (also ``python -m gemmzoo``)."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

from gemmzoo.cli.console import errors
from gemmzoo.cli.options import join_dashed_values
from gemmzoo.errors import GemmError

# Each subcommand lives in gemmzoo/cli/cmd_<name>.py with add_arguments(parser) and run(args).
COMMANDS = {
    "list": "every backend: name, device, dtypes, availability; plugins that failed to load",
    "check": "run the conformance suite on backends; exit 0 only when every one conforms",
    "bench": "check and time backends over a shape grid; table, JSON, CSV, plot",
    "tune": "measure and store the best backend for each shape of a grid",
    "best": "print the backend best_backend would return for M N K, and why",
    "compare": "results of several runs, machines or versions side by side; regressions beyond noise fail",
    "cache": "where the tuning database is, its size and rows; --clear empties it",
}


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("gemmzoo")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown (not installed)"


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every subcommand."""
    parser = argparse.ArgumentParser(prog="gemmzoo", description="Compare GEMM backends side by side.")
    parser.add_argument("--version", action="version", version=f"gemmzoo {_version()}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, summary in COMMANDS.items():
        module = importlib.import_module(f"gemmzoo.cli.cmd_{name}")
        sub = commands.add_parser(name, help=summary, description=summary)
        module.add_arguments(sub)
        sub.set_defaults(handler=module.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status: 0 all good; 1 a failure, WRONG, ERROR,
    TIMEOUT or confident regression; 2 bad usage or input (gemmzoo's own errors included); 130
    interrupted (commands that measure write their results so far first).

    Run as a command (``argv`` not given), it ends the process once the command is done even
    when a plugin left a thread running that is not a daemon: nothing a plugin starts keeps a
    command from exiting."""
    code = _main(argv)
    if argv is None:
        _end_despite_lingering_threads(code)
    return code


def _end_despite_lingering_threads(code: int) -> None:
    """Exit now with ``code`` when a thread that is not a daemon is still running (Python would
    otherwise wait for it at exit, forever for a plugin's that never ends)."""
    import threading

    lingering = [t for t in threading.enumerate()
                 if t is not threading.current_thread() and not t.daemon and t.is_alive()]
    if not lingering:
        return
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


def _main(argv: Sequence[str] | None) -> int:
    try:
        args = build_parser().parse_args(join_dashed_values(sys.argv[1:] if argv is None else argv))
    except SystemExit as done:  # bad usage (2), or --help / --version (0): returned, as every status is
        return done.code if isinstance(done.code, int) else 2
    try:
        return int(args.handler(args) or 0)
    except KeyboardInterrupt:
        errors.print(f"gemmzoo {args.command}: interrupted", style="yellow", markup=False)
        return 130
    except BrokenPipeError:  # the reader stopped reading (| head): nothing more to say to it
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no error at exit's flush
        return 0
    except GemmError as error:
        trace = getattr(error, "traceback", None)  # a plugin's own traceback (strict plugins)
        if trace:
            errors.print(trace, markup=False)
        errors.print(f"gemmzoo {args.command}: {error}", markup=False, style="red")
        return 2


if __name__ == "__main__":
    sys.exit(main())
