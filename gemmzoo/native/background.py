"""The compiled dispatch built in the background on first use (``compiled_dispatch="auto"``).

Where the compiled dispatch (:mod:`gemmzoo.native`) is not built for this torch and Python, the
first product of CUDA torch tensors in a process whose session says ``compiled_dispatch="auto"``
(the default) starts its build in a process of its own, ``python -m gemmzoo.native.background``:
in a new session (the caller's Ctrl-C and exit do not reach it), at low priority (``nice``), its
output in :data:`~gemmzoo.native.BACKGROUND_LOG` in the build directory. The caller's product
goes on at once through the Python dispatch; starting the process is all it waits for. At a
later call that plans a new problem (never on the hot path), at most once a second
(:data:`CHECK_EVERY_S`, a :class:`Watch`'s ``check_every_s``), the process looks whether the
build is done and switches to it; every later process loads it when it starts, as after
``gemmzoo cache --build-dispatch``.

One build at a time: a process takes the build directory's lock (:data:`gemmzoo.native.BUILD_LOCK`)
without waiting and hands it to the process it starts, which holds it until its build takes it
for itself (:func:`gemmzoo.native.build`); a process that finds it held starts nothing and waits
for that build's result. A build that fails is recorded
(:data:`~gemmzoo.native.BACKGROUND_FAILED`: its error, one line) and not started again by itself:
``gemmzoo cache`` and ``gemmzoo list -v`` say why, and ``gemmzoo cache --build-dispatch`` tries
again. Nothing starts without a C++ compiler and ninja on the ``PATH``, nor on a system without
``flock``.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import math
import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from gemmzoo import native

if TYPE_CHECKING:
    from gemmzoo.tuning.state import SessionState

#: Seconds between two looks at a background build from the calls of one session.
CHECK_EVERY_S = 1.0
#: ``module:function`` that the background process calls to build (``function(verbose=True)``).
BUILDER = "gemmzoo.native:build"
#: The priority increment of the background process (``os.nice``).
NICENESS = 10


@dataclass
class Watch:
    """What a session knows of the background build: when it last looked, the process it
    started (at most one), and whether there is nothing more to look for; and how it looks:
    ``check_every_s`` (seconds between two looks, default :data:`CHECK_EVERY_S`) and ``builder``
    (what the process it starts calls, default :data:`BUILDER`). A session makes one with the
    defaults on first use (:func:`watch_of`); a session given one beforehand uses it."""

    check_every_s: float = CHECK_EVERY_S
    builder: str = BUILDER
    checked_at: float = -math.inf
    process: subprocess.Popen[bytes] | None = None
    finished: bool = False
    why: str | None = None
    """Why no build is or will be running for this session (failed, no compiler, ...), or ``None``."""
    lock: threading.Lock = field(default_factory=threading.Lock)


def watch_of(session: SessionState) -> Watch:
    """The session's :class:`Watch` (made on first use)."""
    found = session.compiled_build
    if found is None:
        found = session.compiled_build = Watch()
    return found


def step(session: SessionState, now: float | None = None) -> ModuleType | None:
    """Look at the compiled dispatch's build, at most once every ``check_every_s`` of the
    session's :class:`Watch`: the built module, once it can be loaded (the caller switches to
    it); else ``None``, having started the build where none runs, none failed, and this session
    started none before."""
    watch = watch_of(session)
    now = time.monotonic() if now is None else now
    if watch.finished or now - watch.checked_at < watch.check_every_s \
            or not watch.lock.acquire(blocking=False):
        return None
    try:
        watch.checked_at = now
        module = native.load()
        if module is not None:
            watch.finished = True
            return module
        if watch.process is not None:
            code = watch.process.poll()  # reaps it once it has ended
            if code is None:
                return None
            watch.process = None
            watch.finished = True
            module = native.load()  # it may have ended since the look above
            if module is None:
                watch.why = _ended(code)
            return module
        started, why = start(session)
        if not started and why is not None:
            watch.finished, watch.why = True, why
        return None
    finally:
        watch.lock.release()


def _ended(code: int) -> str:
    """Why the build this session started is over without a module to load (recorded, where the
    build process could not record it itself)."""
    found = native.build_directory()
    if found is None:
        return f"the background build ended (exit {code})"
    _name, directory = found
    failed = native.background_failure(directory)
    if failed is None:  # killed, or its module does not load here: said, so that nobody waits for it
        failed = f"the background build ended with exit status {code} and no loadable module"
        record_failure(directory, failed)
    return failed


def start(session: SessionState) -> tuple[bool, str | None]:
    """Start the background build for the session's cache, torch and Python, unless one runs (then
    ``(False, None)``: wait for it), one failed, or it cannot build here (``(False, why)``).
    ``(True, None)``: started; the process is on the session's :class:`Watch`."""
    found = native.build_directory()
    if found is None:
        return False, "torch is not installed"
    _name, directory = found
    failed = native.background_failure(directory)
    if failed is not None:
        return False, failed
    missing = native.toolchain_missing()
    if missing is not None:
        return False, missing
    try:
        import fcntl
    except ImportError:
        return False, "no background build without flock"
    try:
        directory.mkdir(parents=True, exist_ok=True)
        held = os.open(directory / native.BUILD_LOCK, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError as error:
        return False, f"the build directory {directory} cannot be written ({type(error).__name__})"
    try:
        try:
            fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # another process builds it now
            return False, None
        try:
            with open(directory / native.BACKGROUND_LOG, "wb") as log:
                process = subprocess.Popen(
                    [sys.executable, "-m", "gemmzoo.native.background", "--lock-fd", str(held),
                     "--directory", str(directory), "--builder", watch_of(session).builder],
                    stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, pass_fds=(held,),
                    start_new_session=True, env=_child_environment(session))
        except OSError as error:
            why = f"the background build could not start: {type(error).__name__}: {error}"
            record_failure(directory, why)
            return False, why
    finally:
        os.close(held)  # the lock stays with the process started, which holds the same open file
    watch_of(session).process = process
    return True, None


def _child_environment(session: SessionState) -> dict[str, str]:
    """The background process's environment: this one's, the session's configuration, and this
    gemmzoo first on the import path (the process builds for the code that started it)."""
    from gemmzoo.config import COMPILED_DISPATCH, process_environment

    environment = {**process_environment(), **session.config.child_environment()}
    environment[COMPILED_DISPATCH] = "on"  # the builder never starts another build
    root = str(Path(native.__file__).resolve().parents[2])
    path = environment.get("PYTHONPATH")
    environment["PYTHONPATH"] = root if not path else os.pathsep.join((root, path))
    return environment


def record_failure(directory: Path, why: str) -> None:
    """Record that the background build of ``directory`` failed, and why (one line)."""
    with contextlib.suppress(OSError):
        temporary = directory / f"{native.BACKGROUND_FAILED}.{os.getpid()}.tmp"
        temporary.write_text(" ".join(why.split())[:2000] + "\n", encoding="utf-8")
        os.replace(temporary, directory / native.BACKGROUND_FAILED)


def _builder(text: str) -> Any:
    module, _, name = text.partition(":")
    return getattr(importlib.import_module(module), name)


def main(argv: list[str] | None = None) -> int:
    """The background process: build (``--builder``) at low priority, record a failure."""
    parser = argparse.ArgumentParser(prog="python -m gemmzoo.native.background",
                                     description="build the compiled dispatch (gemmzoo.matmul starts it)")
    parser.add_argument("--lock-fd", type=int, required=True, help="the build lock, held until the build")
    parser.add_argument("--directory", type=Path, required=True, help="the build directory")
    parser.add_argument("--builder", default=BUILDER, help="module:function that builds")
    args = parser.parse_args(argv)
    with contextlib.suppress(OSError, AttributeError):
        os.nice(NICENESS)
    started = time.monotonic()
    print(f"gemmzoo: building the compiled dispatch in the background (process {os.getpid()}, "
          f"{time.strftime('%Y-%m-%d %H:%M:%S')})", flush=True)
    try:
        build = _builder(args.builder)
        with contextlib.suppress(ImportError):  # imported while the lock is held: the build takes it at once
            importlib.import_module("torch.utils.cpp_extension")
        os.close(args.lock_fd)  # the build takes the lock for itself (gemmzoo.native.build_lock)
        build(verbose=True)
    except BaseException as error:  # whatever it was, it is said where gemmzoo cache shows it
        import traceback

        traceback.print_exc()
        record_failure(args.directory, f"{type(error).__name__}: {error}")
        return 1
    print(f"gemmzoo: compiled dispatch built in {time.monotonic() - started:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
