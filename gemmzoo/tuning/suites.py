"""Conformance suites run beside other work: worker processes, a few at a time, each under a time
limit, polled by the process that goes on measuring meanwhile.

:class:`SuitePool` starts each suite (a backend and a dtype) in a spawned process (a CUDA parent
must not fork) and hands back each one's :class:`Finished` as it ends. A suite that runs past
its time limit, or past the deadline :meth:`SuitePool.wait` is given, is ended (its process
terminated) and reported without a verdict, so one slow suite never holds up the rest; nothing
is stored for it, and the next run asks again. The worker stores its verdict in the database the
parent reads (the same ``GEMMZOO_CACHE_DIR``, inherited).
"""

from __future__ import annotations

import multiprocessing
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

#: Seconds one suite may run in a worker before it is ended (``--suite-limit``'s default).
SUITE_LIMIT_S = 60.0
#: How often a waiting :meth:`SuitePool.wait` looks at its workers.
POLL_S = 0.05


@dataclass(frozen=True)
class Finished:
    """One suite's end: the backend and dtype, whether it passed (``None``: no verdict, see
    ``why``), and the seconds it ran."""

    name: str
    dtype: str
    passed: bool | None
    seconds: float
    why: str = ""


def suite_in_child(name: str, dtype: str) -> bool | None:
    """Run backend ``name``'s suite for ``dtype`` in this (worker) process and store the verdict
    where the parent reads it: whether it passed, ``None`` where no verdict could be stored (the
    suite overran the watchdog's limit, or the backend is unavailable here)."""
    from gemmzoo.plugins.registry import get_registry
    from gemmzoo.tuning import state
    from gemmzoo.tuning.tune import conformance_verdict

    backend = get_registry().get(name)
    if state.unavailable_reason(backend) is not None:
        return None
    store = state.store()
    conformance_verdict(store, backend, dtype)
    state.verdicts.clear()  # what was stored, not what this process remembers (a timeout is not kept)
    return conformance_verdict(store, backend, dtype, run=False)


def _child(connection: Any, target: Callable[[str, str], bool | None], name: str, dtype: str) -> None:
    try:
        connection.send(("ok", target(name, dtype)))
    except BaseException as error:  # the parent hears why, whatever it was
        connection.send(("error", f"{type(error).__name__}: {error}"))
    finally:
        connection.close()


class SuitePool:
    """Suites (``jobs``: backend name and dtype) in at most ``workers`` spawned processes at a
    time, each ended after ``limit_s`` seconds. ``target(name, dtype)`` runs one in the worker
    (:func:`suite_in_child`; replaceable for tests: it must be importable by name). Use as a
    context manager, or call :meth:`close`: workers still running then are ended."""

    def __init__(self, jobs: Sequence[tuple[str, str]], workers: int, limit_s: float = SUITE_LIMIT_S, *,
                 target: Callable[[str, str], bool | None] = suite_in_child,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if workers < 1:
            raise ValueError(f"a suite pool needs at least one worker, not {workers}")
        self._queued = list(dict.fromkeys(jobs))
        self._workers = workers
        self._limit_s = limit_s
        self._target = target
        self._clock = clock
        self._context = multiprocessing.get_context("spawn")
        self._running: list[tuple[str, str, Any, Any, float]] = []  # name, dtype, process, pipe, start
        self.poll()

    @property
    def pending(self) -> list[tuple[str, str]]:
        """The suites not yet finished, running or queued."""
        return [(name, dtype) for name, dtype, *_ in self._running] + list(self._queued)

    @property
    def done(self) -> bool:
        return not self._running and not self._queued

    def poll(self) -> list[Finished]:
        """Collect the suites that ended (or overran their limit, which ends them), start queued
        ones in the free places; never waits."""
        ended: list[Finished] = []
        still = []
        now = self._clock()
        for name, dtype, process, pipe, started in self._running:
            took = now - started
            if pipe.poll():
                ended.append(self._collect(name, dtype, process, pipe, took))
            elif not process.is_alive():
                process.join()
                why = f"its worker exited with code {process.exitcode}"
                ended.append(Finished(name, dtype, None, took, why))
            elif took > self._limit_s:
                self._end(process)
                why = f"ran past its time limit of {self._limit_s:g} s"
                ended.append(Finished(name, dtype, None, took, why))
            else:
                still.append((name, dtype, process, pipe, started))
        self._running = still
        while self._queued and len(self._running) < self._workers:
            name, dtype = self._queued.pop(0)
            parent, child = self._context.Pipe(duplex=False)
            process = self._context.Process(target=_child, args=(child, self._target, name, dtype),
                                            daemon=True)
            process.start()
            child.close()
            self._running.append((name, dtype, process, parent, self._clock()))
        return ended

    def wait(self, seconds: float | None = None) -> list[Finished]:
        """Poll until every suite ended, or for at most ``seconds``: the suites still pending
        then are ended and reported without a verdict."""
        until = None if seconds is None else self._clock() + max(seconds, 0.0)
        ended: list[Finished] = []
        while not self.done:
            ended += self.poll()
            if self.done:
                break
            if until is not None and self._clock() >= until:
                ended += self.close("the run's time budget was spent")
                break
            time.sleep(POLL_S)
        return ended

    def close(self, why: str = "the run ended first") -> list[Finished]:
        """End every running worker and drop the queued suites; each reported without a verdict."""
        now = self._clock()
        ended = []
        for name, dtype, process, pipe, started in self._running:
            if pipe.poll():
                ended.append(self._collect(name, dtype, process, pipe, now - started))
                continue
            self._end(process)
            ended.append(Finished(name, dtype, None, now - started, why))
        ended += [Finished(name, dtype, None, 0.0, why) for name, dtype in self._queued]
        self._running, self._queued = [], []
        return ended

    def __enter__(self) -> SuitePool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @staticmethod
    def _collect(name: str, dtype: str, process: Any, pipe: Any, took: float) -> Finished:
        try:
            kind, value = pipe.recv()
        except (EOFError, OSError) as error:
            kind, value = "error", f"no answer from its worker ({type(error).__name__})"
        process.join(timeout=5)
        if process.is_alive():
            SuitePool._end(process)
        if kind == "ok":
            why = "" if value is not None else "no verdict stored (the watchdog ended it, or unavailable)"
            return Finished(name, dtype, value, took, why)
        return Finished(name, dtype, None, took, f"its worker failed: {value}")

    @staticmethod
    def _end(process: Any) -> None:
        process.terminate()
        process.join(timeout=5)
        if process.is_alive():
            process.kill()
            process.join()
