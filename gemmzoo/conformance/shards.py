"""A conformance suite shared among worker processes, for a backend whose cases compile kernels.

Triton compiles a kernel while holding the GIL, so threads compile one kernel at a time and
processes compile side by side; and a JIT backend's suite is mostly compiles, each layout and
edge case being a kernel specialization of its own. So the checks of such a backend
(:attr:`gemmzoo.Backend.suite_compiles`) are dealt out (:func:`deal`) between this process and
``n - 1`` worker processes.

A worker finds the backend by name in the registry its own process builds from the installed
plugins, and runs only when the code it finds is the code being checked here (the same digest,
:mod:`gemmzoo.plugins.code_digest`). A worker that cannot, that fails, or that outlives its time
leaves its checks to this process, which runs them as it would have: sharing changes how long a
suite takes, never which checks run or what they say. A check that overran its time limit in a
worker is the worker's last result, and ends the suite and quarantines the backend here too, as
it would have in this process (it is not run a second time here).

Where this platform can fork, workers are forked from a process that has imported their
frameworks once (:mod:`gemmzoo.conformance.zygote`), started by the first suite that shares its
checks, or earlier by :func:`warm_start` (a first answer starts it before it measures, so that
those imports pass while it measures, and has it fork workers on standby, which start their
devices meanwhile and wait for a suite's checks); elsewhere, or where that process cannot be
had, each worker is a process of its own (``python -m gemmzoo.conformance.shard_worker SPEC``).
"""

from __future__ import annotations

import atexit
import contextlib
import json
import math
import os
import random
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

from gemmzoo.config import process_environment
from gemmzoo.contract.backend import declared
from gemmzoo.contract.dtypes import DTYPES
from gemmzoo.measure.threads import own_cores, usable_cores
from gemmzoo.plugins.watchdog import default_timeout

R = TypeVar("R")

#: At most this many processes share one suite (this one included).
MAX_WORKERS = 8
#: Cores per process sharing a suite: a compile is one core's work, and the checks' array work
#: runs on threads of its own. A worker is confined to cores of its own (its CPU affinity), so that
#: a library sizing its pools by the cores it sees (Inductor's compile workers, OpenMP, BLAS) starts
#: that many, not one per core of the machine in every worker.
CORES_PER_WORKER = 2
#: Checks per process at least: a worker's start (importing the backend's frameworks) costs
#: seconds, worth it only for several compiles.
CHECKS_PER_WORKER = 4
#: Seconds a worker has to start (import and probe the backend) before its checks' own limits.
START_S = 120.0


def worker_cores(number: int, cores: list[int], start: int = 0) -> list[int]:
    """The cores worker ``number`` (1 and up; this process is 0) is confined to: the next
    :data:`CORES_PER_WORKER` of ``cores`` (this process's, in order, from index ``start`` on)
    after those of the processes before it, wrapping round when there are more workers than cores
    to go round."""
    if not cores:
        return []
    first = start + number * CORES_PER_WORKER
    return sorted({cores[(first + j) % len(cores)] for j in range(CORES_PER_WORKER)})


def worker_count(backend: Any, checks: int, workers: int | None = None) -> int:
    """How many processes share ``checks`` checks of ``backend``: ``workers`` where given (at most
    one per check), else one unless the backend declares :attr:`gemmzoo.Backend.suite_compiles`,
    then one per :data:`CORES_PER_WORKER` usable cores, at most :data:`MAX_WORKERS` and one per
    :data:`CHECKS_PER_WORKER` checks."""
    if workers is not None:
        return max(1, min(int(workers), checks))
    if declared(backend, "suite_compiles") is not True:
        return 1
    return max(1, min(_machine_processes(), checks // CHECKS_PER_WORKER))


def _machine_processes() -> int:
    """Processes a compiling suite is shared among on this machine, its size aside: one per
    :data:`CORES_PER_WORKER` usable cores, at most :data:`MAX_WORKERS`."""
    return min(MAX_WORKERS, usable_cores() // CORES_PER_WORKER)


class Shared:
    """A suite's checks dealt out: :attr:`here` are this process's (indices into the suite's
    checks), the rest run in worker processes until :meth:`results` collects them."""

    def __init__(self, here: list[int], workers: list[tuple[subprocess.Popen, str, list[int], list[str]]],
                 deadline: float | None, folder: tempfile.TemporaryDirectory) -> None:
        self.here = here
        self._workers = workers
        self._deadline = deadline
        self._folder = folder

    def stop(self) -> None:
        """End every worker still running; their checks are not run."""
        for process, _path, _indices, _labels in self._workers:
            if process.poll() is None:
                process.kill()
            with contextlib.suppress(Exception):
                process.wait(timeout=10)
        self._workers = []
        self._folder.cleanup()

    def results(self, fallback: Callable[[int], tuple[R, str | None]], make: Callable[..., R]
                ) -> Iterator[tuple[int, R, str | None]]:
        """``(index, result, overran)`` of every worker's checks, worker by worker, each result
        ``make(backend, check, passed, detail)``; the checks of a worker that fails, outlives its
        time or writes anything unreadable come from ``fallback(index)`` (run here). ``overran``
        says what ran past its time limit, else ``None``: a check that overran in a worker is its
        last result, and the last one given (its suite ends there, as it would have here)."""
        try:
            for process, path, indices, labels in self._workers:
                got = _collect(process, path, indices, labels, self._deadline)
                for index in indices:
                    if got is None:
                        yield (index, *fallback(index))
                        continue
                    fields, overran = got[index]
                    yield index, make(*fields), overran
                    if overran is not None:
                        return
        finally:
            self.stop()


def start(backend: Any, settings: dict[str, Any], timeout: float | str | None, labels: list[str],
          workers: int | None = None) -> Shared | None:
    """Start the workers that share a suite's checks (``labels``, in order, chosen by
    ``settings``, the fields of :class:`gemmzoo.conformance.runner.SuiteSettings`; a worker finds
    each of its checks by its label) with this process, or ``None``
    when it runs here alone (one process, or a backend a worker could not find: not the backend
    of that name that the installed plugins register in this process)."""
    checks = len(labels)
    if len(set(labels)) != checks:  # a check a worker could not tell apart runs here
        return None
    count = worker_count(backend, checks, workers)
    if count <= 1:
        return None
    from gemmzoo.plugins.registry import get_registry

    try:  # a worker builds the registry of the installed plugins: only a backend of it is found there
        registry = get_registry()
        name = backend.name
        if registry.get(name) is not backend:
            return None
        digest = registry.code_digest(name)
    except Exception:  # the installed plugins do not have it: it runs here
        return None
    limit = default_timeout() if timeout == "default" else timeout
    dealt = deal(labels, count)
    folder = tempfile.TemporaryDirectory(prefix="gemmzoo-suite-")
    cores = own_cores()
    # where this suite's cores begin, drawn: suites run side by side on a machine with more cores
    # than one suite uses would otherwise all be confined to the same first ones
    begin = random.randrange(len(cores)) if cores else 0
    started = []
    for number, indices in enumerate(dealt[1:], start=1):
        spec = {"backend": name, "digest": digest, "settings": settings, "timeout": limit,
                "parent": os.getpid(), "labels": [labels[i] for i in indices],
                "cores": worker_cores(number, cores, begin),
                "out": os.path.join(folder.name, f"results-{number}.json")}
        spec_path = os.path.join(folder.name, f"spec-{number}.json")
        with open(spec_path, "w", encoding="utf-8") as out:
            json.dump(spec, out)
        process = start_worker(spec_path, spec["out"], backend)
        if process is None:  # no process to be had: its checks run here
            dealt[0] += indices
            continue
        started.append((process, spec["out"], indices, spec["labels"]))
    most = max((len(indices) for _p, _o, indices, _l in started), default=0)
    deadline = None if limit is None else time.monotonic() + START_S + float(limit) * most
    return Shared(sorted(dealt[0]), started, deadline, folder)


#: Sizes in a check's label, ``MxNxK`` (or ``NxK`` for a grouped case).
_SIZES = re.compile(r"(\d+)x(\d+)(?:x(\d+))?")
#: Work (M·N·K) past which a problem takes kernels and configs of its own (as the Triton
#: backends' autotuning does).
_SMALL_WORK = 2**24
#: Elements of a check's operands and result (M·K + K·N + M·N) that cost about as much as a
#: compile to draw, copy and judge on the host, which is most of a large problem's check.
_ELEMENTS_PER_COMPILE = 2e7


def _sizes(label: str) -> list[int] | None:
    """The sizes in a check's label (``MxNxK``, or ``NxK`` for a grouped case); ``None`` for none."""
    found = _SIZES.search(label)
    return None if found is None else [int(size) for size in found.groups() if size is not None]


def kernel_key(label: str) -> tuple[str, ...] | None:
    """What a check's kernels are likely specialized on, read from its label (a case id such as
    ``bfloat16-random-37x43x53-NT``): its class, dtype and layout, and for a small problem each
    size as a JIT compiler such as Triton's sees it (zero, one, a multiple of 16, other), which
    with the layout decides its strides'; a larger problem is a key of its own. Checks of one
    key most often run the same compiled kernels. ``None`` for a label with no sizes (an input
    check: no kernel)."""
    sizes = _sizes(label)
    if sizes is None:
        return None
    parts = label.split("-")
    layout = parts[-1] if len(parts[-1]) == 2 and set(parts[-1]) <= set("NTS") else ""
    if math.prod(sizes) > _SMALL_WORK:
        return (label,)
    kinds = tuple("0" if v == 0 else "1" if v == 1 else "16" if v % 16 == 0 else "n" for v in sizes)
    problem_class = parts[0] if parts[0] not in DTYPES else "gemm"  # a gemm case's id begins with its dtype
    dtype = next((part for part in parts if part in DTYPES), "")
    return (problem_class, dtype, layout, *kinds)


def _host_elements(label: str) -> int:
    """The elements of a check's operands and result, read from its label's sizes (0 for none)."""
    sizes = _sizes(label)
    if sizes is None:
        return 0
    if len(sizes) < 3:
        return math.prod(sizes)
    m, n, k = sizes
    return m * k + k * n + m * n


def deal(labels: list[str], count: int) -> list[list[int]]:
    """The checks (``labels``, by index) of each of ``count`` processes, this one first: checks
    of one :func:`kernel_key` go to one process, so that a kernel is compiled in one process
    rather than in each that meets it; the keys go, heaviest first, to the process with the
    least to do (a compile per key, a little per check, and a large problem's host work)."""
    groups: dict[Any, list[int]] = {}
    for index, label in enumerate(labels):
        key = kernel_key(label)
        groups.setdefault(("alone", index) if key is None else key, []).append(index)

    def weight(key: Any, indices: list[int]) -> float:
        elements = sum(_host_elements(labels[index]) for index in indices)
        return (0.0 if key[0] == "alone" else 1.0) + 0.2 * len(indices) + elements / _ELEMENTS_PER_COMPILE

    load = [0.0] * count
    dealt: list[list[int]] = [[] for _ in range(count)]
    weighed = sorted(((weight(key, indices), indices) for key, indices in groups.items()),
                     key=lambda item: -item[0])
    for heft, indices in weighed:
        least = min(range(count), key=load.__getitem__)
        dealt[least] += indices
        load[least] += heft
    return [sorted(indices) for indices in dealt]


def start_worker(spec_path: str, out: str, backend: Any) -> Any:
    """A worker running the spec at ``spec_path`` (results to ``out``): forked from the zygote
    where there is one to be had (started now, importing ``backend``'s frameworks, where none
    runs), else a process of its own; ``None`` where neither can be started."""
    zygote = _zygote([backend])
    if zygote is not None:
        forked = zygote.fork(spec_path, out)
        if forked is not None:
            return forked
    try:
        return subprocess.Popen([sys.executable, "-m", "gemmzoo.conformance.shard_worker", spec_path],
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
    except OSError:
        return None


def warm_start(backends: Iterable[Any]) -> None:
    """Start the zygote now, importing the frameworks of those of ``backends`` whose suites
    compile kernels (:attr:`gemmzoo.Backend.suite_compiles`), where such a suite would be shared
    among workers on this machine and no zygote runs yet, and have it fork as many workers as a
    suite shares its checks with on standby, readying those backends: the imports and the
    devices' starts then take their seconds while this process goes on (a first answer calls it
    before it measures its candidates, and :func:`release_standby` once its suites have run)."""
    compiling = [b for b in backends if declared(b, "suite_compiles") is True]
    count = _machine_processes() - 1  # this process is one of them
    if not compiling or count < 1:
        return
    zygote = _zygote(compiling)
    if zygote is not None:
        zygote.stand_by(count, [b.name for b in compiling])


def release_standby() -> None:
    """Let the workers :func:`warm_start` put on standby that no suite took end unused."""
    with _zygote_lock:
        running = list(_zygotes)
    for zygote in running:
        zygote.release()


class ForkedWorker:
    """A worker forked by the zygote, with what a suite uses of :class:`subprocess.Popen`'s
    interface. It is not this process's child: its end is seen by its process id going away
    (the zygote reaps it at once), and its success by its result file, which a worker writes
    whole, last, and only when it ran its checks."""

    def __init__(self, pid: int, out: str) -> None:
        self.pid = pid
        self._out = out
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None and not _alive(self.pid):
            self.returncode = 0 if os.path.exists(self._out) else 1
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        end = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if end is not None and time.monotonic() >= end:
                raise subprocess.TimeoutExpired(f"suite worker {self.pid}", timeout or 0.0)
            time.sleep(0.01)
        return self.returncode  # type: ignore[return-value]

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(self.pid, signal.SIGKILL)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, PermissionError):  # gone, or another user's: no worker of ours any more
        return False
    return True


class Zygote:
    """A running :mod:`gemmzoo.conformance.zygote`, which imported ``modules`` and forks workers
    on request: for a spec, or on standby (:meth:`stand_by`) before the spec is known."""

    def __init__(self, modules: list[str]) -> None:
        self.process = subprocess.Popen([sys.executable, "-m", "gemmzoo.conformance.zygote", *modules],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=subprocess.DEVNULL, bufsize=0)
        self._ready = False
        self._unread = b""  # what the zygote wrote past the last line read
        self._lock = threading.Lock()
        self._owed: list[Standby] = []  # standby workers whose process ids are not read yet
        self._standing: list[Standby] = []
        self._folder: str | None = None  # where standby workers' specs appear
        self._asked = 0  # standby workers asked for so far, which numbers their spec files
        atexit.register(self.close)

    def alive(self) -> bool:
        return self.process.poll() is None

    @property
    def standing(self) -> int:
        """How many workers are on standby, waiting for a spec."""
        return len(self._standing)

    def fork(self, spec_path: str, out: str) -> ForkedWorker | None:
        """A worker for the spec at ``spec_path``, with this process's environment, module path
        and working directory: one on standby where one waits, forked with the same module path
        and directory and an environment that has only gained variables since (libraries set
        some as they start), else one forked now; ``None`` where the zygote is gone, does not
        answer within :data:`START_S` or could not fork."""
        here = _surroundings()
        with self._lock:
            try:
                self._settle()
                while self._standing:
                    waiting = self._standing.pop(0)
                    if waiting.pid > 0 and _grown(waiting.surroundings, here) and _alive(waiting.pid):
                        waiting.start(spec_path, here)
                        return ForkedWorker(waiting.pid, out)
                    waiting.release()
                self._send({"spec": spec_path, **here})
                pid = int(self._line())
            except (OSError, ValueError, AssertionError):
                self.close()
                return None
        return ForkedWorker(pid, out) if pid > 0 else None

    def stand_by(self, count: int, backends: list[str]) -> None:
        """Have ``count`` workers forked as soon as the zygote is ready, each readying
        ``backends`` (:func:`gemmzoo.conformance.shard_worker.standby`) and then waiting for a
        spec that :meth:`fork` hands it. Returns at once: the requests are written by a thread
        (a zygote still importing reads none, and its pipe holds only so many)."""
        here = _surroundings()
        with self._lock:
            if self._folder is None:
                self._folder = tempfile.mkdtemp(prefix="gemmzoo-standby-")
            waiting = [Standby(os.path.join(self._folder, f"spec-{self._asked + number}.json"), here)
                       for number in range(count)]
            self._asked += count
            self._standing += waiting

        def send() -> None:
            with self._lock:
                for worker in waiting:
                    try:
                        self._send({"standby": worker.path, "backends": backends, **here})
                    except (OSError, ValueError):  # the zygote gone, or its pipe closed by close()
                        worker.pid = -1
                        continue
                    self._owed.append(worker)

        threading.Thread(target=send, daemon=True, name="gemmzoo-standby").start()

    def release(self) -> None:
        """Let every worker still on standby end unused (without waiting for the zygote)."""
        with self._lock:
            for waiting in self._standing:
                waiting.release()
            self._standing = []

    def _send(self, request: dict[str, Any]) -> None:
        assert self.process.stdin is not None
        data = memoryview((json.dumps(request) + "\n").encode())
        while data:
            data = data[self.process.stdin.write(data) or 0:]

    def _settle(self) -> None:
        """Read the zygote's ``ready`` and the process ids owed to standby requests."""
        if not self._ready:
            self._ready = self._line() == "ready"
            if not self._ready:
                raise OSError("the zygote did not start")
        while self._owed:
            self._owed.pop(0).pid = int(self._line())

    def _line(self) -> str:
        """The zygote's next line, read from its pipe as it comes (several may come at once)."""
        assert self.process.stdout is not None
        while b"\n" not in self._unread:
            ready, _, _ = select.select([self.process.stdout], [], [], START_S)
            chunk = os.read(self.process.stdout.fileno(), 65536) if ready else b""
            if not chunk:
                raise OSError("the zygote did not answer")
            self._unread += chunk
        line, self._unread = self._unread.split(b"\n", 1)
        return line.decode().strip()

    def close(self) -> None:
        """End the zygote (its input ends; killed where it does not end at once), and with it
        its workers."""
        with contextlib.suppress(OSError):
            if self.process.stdin is not None:
                self.process.stdin.close()
        try:
            self.process.wait(timeout=2)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        if self._folder is not None:
            shutil.rmtree(self._folder, ignore_errors=True)
            self._folder = None


def _surroundings() -> dict[str, Any]:
    """What a forked worker takes from this process: its environment, module path and working
    directory."""
    return {"env": dict(process_environment()), "path": list(sys.path), "cwd": os.getcwd()}


def _grown(then: dict[str, Any], now: dict[str, Any]) -> bool:
    """Whether surroundings ``now`` are ``then`` with, at most, variables added to the environment."""
    env = now["env"]
    return (then["path"] == now["path"] and then["cwd"] == now["cwd"]
            and all(env.get(name) == value for name, value in then["env"].items()))


class Standby:
    """A worker on standby: the path its spec is to appear at, and the surroundings it was
    forked with (its process id once the zygote has said it; ``-1`` where it could not fork)."""

    def __init__(self, path: str, surroundings: dict[str, Any]) -> None:
        self.path = path
        self.surroundings = surroundings
        self.pid = 0

    def start(self, spec_path: str, surroundings: dict[str, Any]) -> None:
        """Hand it the spec at ``spec_path`` and the ``surroundings`` it is to run in."""
        with open(spec_path, encoding="utf-8") as source:
            spec = json.load(source)
        self._place({**spec, "surroundings": surroundings})

    def release(self) -> None:
        """Let it end unused (what appears at its path says ``release``)."""
        with contextlib.suppress(OSError):
            self._place({"release": True})

    def _place(self, content: dict[str, Any]) -> None:
        """Write ``content`` whole, then rename it to the path the worker watches."""
        with open(self.path + ".part", "w", encoding="utf-8") as out:
            json.dump(content, out)
        os.replace(self.path + ".part", self.path)


#: The zygote of this process, while it runs (a process's workers are forked from one).
_zygotes: list[Zygote] = []
_zygote_lock = threading.Lock()


def _zygote(backends: list[Any]) -> Zygote | None:
    """This process's zygote, started where none runs (importing the worker's module and each of
    ``backends``' frameworks); ``None`` where this platform cannot fork or it cannot start."""
    if not hasattr(os, "fork"):
        return None
    with _zygote_lock:
        if _zygotes and _zygotes[-1].alive():
            return _zygotes[-1]
        modules = ["gemmzoo.conformance.shard_worker"]
        for backend in backends:
            modules += [name for name in declared(backend, "requires") if isinstance(name, str)]
        try:
            _zygotes[:] = [Zygote(list(dict.fromkeys(modules)))]
        except OSError:
            return None
        return _zygotes[-1]


def _collect(process: Any, path: str, indices: list[int], labels: list[str],
             deadline: float | None) -> dict[int, tuple[tuple[str, str, bool, str], str | None]] | None:
    """A worker's results by index, once it has ended (killed at ``deadline``); ``None`` when it
    failed, outlived ``deadline`` or wrote anything but a result for each of ``indices`` (or for
    the first ones, up to one that overran its time limit), each the check its label (in
    ``labels``, aligned with ``indices``) names."""
    try:
        process.wait(timeout=None if deadline is None else max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        return None
    if process.returncode != 0:
        return None
    try:
        with open(path, encoding="utf-8") as source:
            rows = json.load(source)
        if not isinstance(rows, list) or not 0 < len(rows) <= len(indices):
            return None
        found = {}
        overran = None
        for index, label, row in zip(indices, labels, rows, strict=False):
            if overran is not None:  # a result after one that overran: the worker's suite ended there
                return None
            ran, backend, check, passed, detail, overran = row
            texts = (backend, check, detail)
            if not (ran == label and all(isinstance(text, str) for text in texts) and isinstance(passed, bool)
                    and (overran is None or isinstance(overran, str))):
                return None
            found[index] = ((backend, check, passed, detail), overran)
    except (OSError, ValueError, TypeError):
        return None
    # fewer results than checks only where the last one overran
    return found if len(found) == len(indices) or overran is not None else None
