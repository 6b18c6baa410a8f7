"""Time limits on backend calls: a hung backend is abandoned, quarantined, and the run goes on.

A Python call that never returns cannot be stopped from inside its process. :func:`call` runs a
backend's work (one *task*: one backend's check and timing at one grid point, one conformance
case, one ``unavailable_reason()``) on a daemon worker thread and waits for it at most the time
limit. A task that overruns is abandoned where it is: its thread keeps running (it is a daemon,
so it never holds up the end of the process), and its backend is *quarantined*: every later
task of that backend in this process fails at once with :class:`BackendTimeoutError`, without
calling it again, so one hung backend costs one time limit per process, not one per task.

Worker threads are kept and reused between tasks that follow each other (a backend's
thread-local state, such as a CUDA library handle, is made once), and end after :data:`IDLE_S`
(:func:`call`'s ``idle_s``) without one, or when a run of tasks for a caller ends
(:func:`idle_workers_ended`); a worker that was abandoned is never reused. An idle worker is
not kept for longer: a thread that ran a backend's OpenMP work keeps that work's thread team
alive, and where the process's OpenMP threads then outnumber the cores, libgomp stops letting
its threads spin between parallel regions, which made the caller's own small CPU products
several times slower for as long as the worker lived. A task runs on the caller's current CUDA
device (torch's and CuPy's, where the process uses them). A task asked for from a worker thread
runs inline, under the limit of the task that contains it.

The limit comes from the ``timeout`` argument, else from ``GEMMZOO_TIMEOUT`` (seconds; ``0``
or ``off`` for none), else :data:`DEFAULT_TIMEOUT_S`. What a thread cannot do: stop a call that
holds the GIL without releasing it (a C loop), and free what the abandoned call holds. A timed-out
GPU call leaves its kernel queued or running on the device, its memory allocated and its stream
busy; see docs/plugins.md.
"""

from __future__ import annotations

import contextlib
import queue
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

from gemmzoo import config
from gemmzoo.errors import GemmError

ENV = config.TIMEOUT
#: Seconds a task may take when neither ``--timeout`` nor ``GEMMZOO_TIMEOUT`` says: enough for a
#: first call that compiles or autotunes kernels, far from an unbounded hang.
DEFAULT_TIMEOUT_S = config.DEFAULT_TIMEOUT_S

T = TypeVar("T")


class BackendTimeoutError(GemmError, TimeoutError):
    """A backend call ran past its time limit (or its backend is quarantined after one that did)."""

    def __init__(self, message: str, *, backend: str = "", what: str = "", seconds: float = 0.0) -> None:
        super().__init__(message)
        self.backend = backend
        self.what = what
        self.seconds = seconds


class BackendCrashError(GemmError):
    """A backend call raised something that is not an ``Exception`` (``sys.exit()``, say)."""


@dataclass(frozen=True)
class TimedOut:
    """One call that overran in this process: the backend's name, what was called, the limit."""

    backend: str
    what: str
    seconds: float

    def describe(self) -> str:
        """``slow: matmul at 8x8x8 took longer than 5 s``."""
        return f"{self.backend}: {self.what} took longer than {self.seconds:g} s"


def parse_timeout(text: str) -> float | None:
    """Seconds from ``text`` (``--timeout``, ``GEMMZOO_TIMEOUT``); ``None`` for no limit
    (``0``, ``off``, ``none``); :class:`gemmzoo.config.ConfigError` (a ``ValueError``) for
    anything else, a limit past a day included (:func:`gemmzoo.config.parse_timeout`)."""
    return config.parse_timeout(text)


def default_timeout() -> float | None:
    """The limit of a task when none is given: the current session's ``timeout``
    (``--timeout``, ``GEMMZOO_TIMEOUT``, else :data:`DEFAULT_TIMEOUT_S`; validated when the
    configuration was read, see :mod:`gemmzoo.config`; before any session exists, the
    environment's: :func:`gemmzoo.config.current_config`)."""
    return config.current_config().timeout



# Quarantined backends by id (the object is kept so that its id is not reused): the reason.
_quarantine: dict[int, tuple[Any, str]] = {}
_timeouts: list[TimedOut] = []
_lock = threading.Lock()


def _name(backend: Any) -> str:
    name = getattr(backend, "name", None) if backend is not None else None
    return name if isinstance(name, str) else type(backend).__name__


def quarantined(backend: Any) -> str | None:
    """Why ``backend`` is quarantined in this process, or ``None`` when it is not."""
    entry = _quarantine.get(id(backend))
    return entry[1] if entry is not None and entry[0] is backend else None


def quarantine(backend: Any, reason: str) -> None:
    """Set ``backend`` aside for the rest of the process: every later :func:`call` of it fails
    with :class:`BackendTimeoutError` saying ``reason``, and it is unavailable
    (:func:`gemmzoo.plugins.registry.unavailable_reason`)."""
    with _lock:
        _quarantine.setdefault(id(backend), (backend, reason))


def timeouts() -> list[TimedOut]:
    """The calls that overran in this process, oldest first."""
    with _lock:
        return list(_timeouts)


def forget() -> None:
    """Lift every quarantine and forget the timeouts (tests; a long-lived process that knows the
    hung calls have ended). Abandoned threads are not waited for."""
    with _lock:
        _quarantine.clear()
        _timeouts.clear()


#: Seconds an idle worker thread waits for its next task before it ends.
IDLE_S = 0.5


class _Worker:
    """A daemon thread that runs tasks handed to it one at a time, and ends once idle for
    ``idle_s`` seconds (or when handed ``None``)."""

    def __init__(self, idle_s: float) -> None:
        self.idle_s = idle_s
        self.jobs: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self.thread = threading.Thread(target=self._loop, name="gemmzoo-watchdog-worker", daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        _local.worker = True
        while True:
            try:
                job = self.jobs.get(timeout=self.idle_s)
            except queue.Empty:
                with _lock:
                    if self in _idle:  # still unclaimed: end; a claimed one has a task on its way
                        _idle.remove(self)
                        return
                continue
            if job is None:
                return
            job()


_local = threading.local()
_idle: list[_Worker] = []


def _take_worker(idle_s: float) -> _Worker:
    with _lock:
        if _idle:
            return _idle.pop()
    return _Worker(idle_s)


def _give_back(worker: _Worker) -> None:
    with _lock:
        if len(_idle) < 4:
            _idle.append(worker)
            return
    worker.jobs.put(None)


def end_idle_workers() -> None:
    """End the worker threads that wait for a task now, rather than once idle for their ``idle_s``."""
    with _lock:
        idle, _idle[:] = list(_idle), []
    for worker in idle:
        worker.jobs.put(None)


@contextlib.contextmanager
def idle_workers_ended() -> Iterator[None]:
    """``with idle_workers_ended():`` (or as a decorator) around a run of tasks that the caller's
    own work follows (``best_backend``'s answer, a suite, a bench or tune run): the workers it
    leaves idle end with the block."""
    try:
        yield
    finally:
        end_idle_workers()


def call(backend: Any, what: str, fn: Callable[..., T], *args: Any,
         timeout: float | str | None = "default", idle_s: float = IDLE_S, **kwargs: Any) -> T:
    """``fn(*args, **kwargs)``, a task of ``backend`` described by ``what``, within ``timeout``
    seconds (``"default"``: :func:`default_timeout`; ``None``: no limit, run inline). A worker
    thread that none is idle for is made for it, and ends once idle for ``idle_s`` seconds
    (default :data:`IDLE_S`; a worker reused keeps the idle time it was made with).

    Returns what ``fn`` returns and raises what it raises (a ``BaseException`` that is not an
    ``Exception`` as :class:`BackendCrashError`). Raises :class:`BackendTimeoutError` when it overruns (the
    backend is then quarantined) or when ``backend`` is already quarantined. ``backend=None``
    names a task of no single backend: nothing is quarantined when it overruns.
    """
    reason = quarantined(backend) if backend is not None else None
    if reason is not None:
        name = _name(backend)
        raise BackendTimeoutError(f"{name}: {what}: not run: {reason}", backend=name, what=what)
    limit = default_timeout() if timeout == "default" else timeout
    if limit is None or getattr(_local, "worker", False):
        return _guarded(fn, args, kwargs)
    assert isinstance(limit, (int, float))
    done = threading.Event()
    outcome: list[Any] = []
    enter = _caller_devices()

    def job() -> None:
        try:
            enter()
            outcome.append((True, fn(*args, **kwargs)))
        except BaseException as error:  # handed to the caller's thread, never lost in this one
            outcome.append((False, error))
        finally:
            done.set()

    worker = _take_worker(idle_s)
    worker.jobs.put(job)
    start = time.monotonic()
    if not done.wait(limit):
        worker.jobs.put(None)  # abandoned: it ends after the hung call, if that ever returns
        name = _name(backend)
        with _lock:
            _timeouts.append(TimedOut(name, what, float(limit)))
        message = f"{what} took longer than {limit:g} s (abandoned after {time.monotonic() - start:.1f} s)"
        if backend is not None:
            quarantine(backend, f"TIMEOUT: {message}; quarantined for the rest of this process")
        raise BackendTimeoutError(f"{name}: {message}", backend=name, what=what, seconds=float(limit))
    _give_back(worker)
    ok, value = outcome[0]
    if ok:
        return value  # type: ignore[no-any-return]
    _reraise(value)
    raise AssertionError("unreachable")


def _nothing() -> None:
    return None


def _caller_devices() -> Callable[[], None]:
    """What makes a worker thread compute on the caller's current CUDA device: the CUDA runtime's
    current device is per thread, and a worker would otherwise use device 0. Only libraries the
    process has already imported are asked (never imported here)."""
    steps: list[Callable[[], None]] = []
    torch = sys.modules.get("torch")
    cuda = getattr(torch, "cuda", None)
    try:
        if cuda is not None and cuda.is_initialized():
            device = cuda.current_device()
            steps.append(lambda: cuda.set_device(device))
    except Exception:  # a torch without CUDA, or a broken one: the worker keeps its default
        pass
    cupy = sys.modules.get("cupy")
    try:
        if cupy is not None:
            number = cupy.cuda.runtime.getDevice()
            steps.append(lambda: cupy.cuda.Device(number).use())
    except Exception:  # no CUDA device for CuPy
        pass
    if not steps:
        return _nothing

    def enter() -> None:
        for step in steps:
            step()

    return enter


def _guarded(fn: Callable[..., T], args: tuple[Any, ...], kwargs: dict[str, Any]) -> T:
    try:
        return fn(*args, **kwargs)
    except Exception:
        raise
    except (SystemExit, GeneratorExit) as error:
        raise BackendCrashError(f"the call raised {type(error).__name__}({_text(error)})") from error


def _reraise(error: BaseException) -> None:
    if isinstance(error, Exception):
        raise error
    # Ctrl-C interrupts the main thread, never a worker: a KeyboardInterrupt here is the backend's
    raise BackendCrashError(f"the call raised {type(error).__name__}({_text(error)})") from error


def _text(error: BaseException) -> str:
    try:
        return str(error)
    except Exception:  # an exception whose own __str__ raises
        return "<unprintable>"
