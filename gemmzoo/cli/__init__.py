"""The ``gemmzoo`` command line (also ``python -m gemmzoo``)."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

from gemmzoo.cli.console import errors
from gemmzoo.cli.options import join_dashed_values
from gemmzoo.config import Config
from gemmzoo.errors import GemmError
from gemmzoo.session import Session, current

# Each subcommand lives in gemmzoo/cli/cmd_<name>.py with add_arguments(parser) and run(args).
COMMANDS = {
    "list": "every backend: name, device, dtypes, availability; plugins that failed to load",
    "check": "run the conformance suite on backends; exit 0 only when every one conforms",
    "bench": "check and time backends over a shape grid; table, JSON, CSV, plot",
    "tune": "measure and store the best backend for each shape of a grid",
    "best": "print the backend best_backend would return for M N K, and why",
    "compare": "results of several runs, machines or versions side by side; regressions beyond noise fail",
    "cache": "where the tuning database is, its size and rows; --clear empties it",
    "report": "result files as one self-contained HTML report: heatmaps, winners, roofline, verdicts",
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


def _session(args: argparse.Namespace) -> Session:
    """The session a command runs in: the current one where the environment read now, with the
    options that override it (``--timeout``), configures it alike; else a new one of that
    configuration. Raises :class:`~gemmzoo.config.ConfigError` for a bad value."""
    config = Config.from_environ()
    if hasattr(args, "timeout"):
        config = config.replace(timeout=args.timeout)
    found = current()
    return found if found.config == config else Session(config)


INTERRUPTED = 130


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status: 0 all good; 1 a failure, WRONG, ERROR,
    TIMEOUT or confident regression; 2 bad usage or input (gemmzoo's own errors included); 130
    interrupted (commands that measure write their results so far first).

    Run as the program (``argv`` None), an interrupted command ends the process at once with 130
    after its output is flushed: the interpreter's teardown would run the C++ destructors of
    frameworks whose worker threads may still be inside them (JAX's), which aborts the process.
    Run so, it also ends the process once the command is done even when a plugin left a thread
    running that is not a daemon: nothing a plugin starts keeps a command from exiting; and
    likewise, output flushed, when JAX was loaded (:data:`ABORTING_TEARDOWN`).
    """
    if argv is not None:
        return _main(argv)
    import signal

    pressed: list[bool] = []

    def on_interrupt(_signum: int, _frame: object) -> None:
        # remembered as well as raised: a KeyboardInterrupt that lands in a finalizer or a
        # callback is printed and dropped by Python, and the command would finish as if not asked
        pressed.append(True)
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, on_interrupt)
    code = INTERRUPTED
    try:
        code = _main(None)
    except KeyboardInterrupt:
        code = INTERRUPTED
    finally:
        if code == INTERRUPTED or pressed:
            _end_interrupted()
    _end_despite_lingering_threads(code)
    return code


def _end_interrupted() -> None:
    """Flush what was written and end the process with 130, a second Ctrl-C ignored meanwhile."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # a closed pipe: nothing more can be said to it
            pass
    os._exit(INTERRUPTED)


#: Frameworks whose runtime keeps threads of its own that the interpreter's teardown can catch
#: inside their C++ code, aborting the process after the command succeeded (JAX's XLA clients,
#: started when a command asks whether a JAX backend runs here, beside torch's CUDA context).
ABORTING_TEARDOWN = ("jax",)


def _end_despite_lingering_threads(code: int) -> None:
    """Exit now with ``code`` when a thread that is not a daemon is still running (Python would
    otherwise wait for it at exit, forever for a plugin's that never ends), or when a framework
    of :data:`ABORTING_TEARDOWN` was loaded (its teardown could turn the command's status into an
    abort)."""
    import threading

    lingering = [t for t in threading.enumerate()
                 if t is not threading.current_thread() and not t.daemon and t.is_alive()]
    if not lingering and not any(name in sys.modules for name in ABORTING_TEARDOWN):
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
        session = _session(args)
    except GemmError as error:  # a bad environment variable or option value: bad input
        errors.print(f"gemmzoo {args.command}: {error}", markup=False, style="red")
        return 2
    try:
        with session:
            return int(args.handler(args) or 0)
    except KeyboardInterrupt:
        errors.print(f"gemmzoo {args.command}: interrupted", style="yellow", markup=False)
        return INTERRUPTED
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
