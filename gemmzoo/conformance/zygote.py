"""The process suite workers are forked from: it imports a worker's libraries once, so that each
worker (:mod:`gemmzoo.conformance.shard_worker`) starts in a fraction of a second rather than
importing its frameworks anew (seconds each, several workers at once).

``python -m gemmzoo.conformance.zygote MODULE ...`` imports each module it can, writes ``ready``,
then reads one request a line on its standard input: ``{"spec": PATH, "env": {...}, "path":
[...], "cwd": DIR}``. For each it forks a worker, which takes the request's environment, module
path and working directory, sends its output nowhere, and runs
:func:`gemmzoo.conformance.shard_worker.main` on the spec; the server writes the worker's process
id (or ``-1`` where no fork could be had) on a line of its own. A request with ``"standby":
PATH`` and ``"backends": [NAME, ...]`` in place of ``"spec"`` forks a worker that readies those
backends and waits for its spec to appear at PATH
(:func:`gemmzoo.conformance.shard_worker.standby`). The worker's results are its spec's result
file; its exit status is not kept (ended workers are reaped at once). The server
ends when its input does, which is when the process that started it ends, however it ends; a
worker ends when the server does (see ``shard_worker``). Interrupts (Ctrl-C in the terminal) are
the suite's to handle: the server ignores them, and a worker ends by them as a worker started as
a process of its own would.

Not :mod:`multiprocessing`'s forkserver: its children import the program's main script again,
which runs a script's top-level code in every worker where the script has no main guard.
"""

from __future__ import annotations

import importlib
import json
import os
import signal
import sys


def _forked(request: dict[str, object]) -> int:
    """In a new worker: take the request's environment, path and working directory, silence the
    output, and run the worker on its spec (or stand by for one); the worker's exit status."""
    devnull = os.open(os.devnull, os.O_RDWR)
    for stream in (0, 1, 2):
        os.dup2(devnull, stream)
    os.close(devnull)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # a worker's own children are its to wait for
    from gemmzoo.conformance import shard_worker

    shard_worker.take_surroundings(request)
    if "standby" in request:
        backends = [str(name) for name in request.get("backends", ())]  # type: ignore[attr-defined]
        return shard_worker.standby(str(request["standby"]), backends, parent=os.getppid())
    return shard_worker.main([str(request["spec"])], parent=os.getppid())


def serve(modules: list[str]) -> int:
    """The server's loop (see the module's docstring)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # ended workers are reaped by the kernel
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception:  # a worker imports what it needs itself
            pass
    print("ready", flush=True)
    for line in sys.stdin:
        try:
            request = json.loads(line)
            pid = os.fork()
        except (ValueError, OSError):
            print(-1, flush=True)
            continue
        if pid == 0:
            code = 1
            try:
                code = _forked(request)
            except BaseException:  # the worker's end is its exit status alone
                pass
            finally:
                os._exit(code)
        print(pid, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(serve(sys.argv[1:]))
