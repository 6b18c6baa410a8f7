"""Spreading a sweep: ``--shard I/N`` across machines (a cluster's job array) and
``--devices`` across the GPUs of one machine (one worker process per GPU).

A shard is a deterministic part of a grid: every machine that resolves the same grid (the same
``--grid``, ``--shape``, ``--file``, ``--dtype`` and ``--layout``) computes the same split, so the
job with ``--shard 2/3`` measures exactly the points that ``1/3`` and ``3/3`` leave out, and the
three result files merge into one (``gemmzoo bench --merge``). Parts are balanced by an estimate
of each point's cost (see :func:`point_cost`), largest first onto the lightest part; within a
part the grid's own order is kept.

``--devices all|0,1,...`` starts one worker process per GPU (``spawn``, so no CUDA state is
inherited; ``CUDA_VISIBLE_DEVICES`` set to that GPU alone before the worker starts, and the
host's cores split between the workers: :func:`core_shares`). Points go to whichever worker is
free, costliest first, and the results come back in the grid's order as one run. Start-up is
overlapped with the sweep: the points are queued as soon as they are known
(:meth:`DevicePool.submit`, before the parent has checked its backends), so each worker starts
measuring the moment its own warm-up is done, while the other workers and the parent are still
starting. :class:`DevicePool` is the engine; :mod:`gemmzoo.scale.jobs` holds what a worker does
for ``bench`` and ``tune``.
"""

from __future__ import annotations

import glob
import hashlib
import multiprocessing
import multiprocessing.connection
import os
import re
import time
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from gemmzoo.config import environment_value, process_environment
from gemmzoo.problems.grids import GridError, GridPoint


class ShardError(GridError):
    """A ``--shard`` text that is not ``I/N`` with ``1 <= I <= N``."""


@dataclass(frozen=True)
class Shard:
    """The ``index``-th (1-based) of ``count`` parts."""

    index: int
    count: int

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


_SHARD_TEXT = re.compile(r"\s*(\d+)\s*/\s*(\d+)\s*")


def parse_shard(text: str) -> Shard:
    """``"2/3"`` → ``Shard(2, 3)``; raises :class:`ShardError` on anything else."""
    match = _SHARD_TEXT.fullmatch(text or "")
    if match is None:
        raise ShardError(f"--shard {text!r}: expected I/N, e.g. 1/4 (the first of four parts)")
    index, count = int(match.group(1)), int(match.group(2))
    if count < 1 or not 1 <= index <= count:
        raise ShardError(f"--shard {text!r}: I must be between 1 and N (and N at least 1)")
    return Shard(index, count)


def point_cost(point: GridPoint) -> float:
    """A relative estimate of what benchmarking ``point`` costs: a fixed part per point (the
    timing budget, a backend's setup) plus one for making and moving its operands and result,
    which dominate for large shapes. Only the order of magnitude matters: it balances parts."""
    elements = point.m * point.k + point.k * point.n + point.m * point.n
    return 1.0 + elements / 2**24


def assign(points: Sequence[GridPoint], count: int) -> list[int]:
    """The part (0-based) of each point: costliest first onto the part with the least cost so
    far (ties: the lower part, then the earlier point). Depends only on the points and their order."""
    order = sorted(range(len(points)), key=lambda i: (-point_cost(points[i]), i))
    loads = [0.0] * count
    parts = [0] * len(points)
    for i in order:
        part = min(range(count), key=lambda p: (loads[p], p))
        parts[i] = part
        loads[part] += point_cost(points[i])
    return parts


def shard_points(points: Sequence[GridPoint], shard: Shard | None) -> list[GridPoint]:
    """The points of ``shard`` (all of them for ``None``), in the grid's order."""
    if shard is None or shard.count == 1:
        return list(points)
    parts = assign(points, shard.count)
    return [p for p, part in zip(points, parts, strict=True) if part == shard.index - 1]


def grid_digest(points: Sequence[GridPoint]) -> str:
    """A short fingerprint of a whole grid (its point ids in order): parts of one split share it."""
    text = "\n".join(p.id for p in points)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


# Many GPUs: one worker process per GPU --------------------------------------------------------


class DevicesError(GridError):
    """A ``--devices`` text that names no GPU, or one this machine does not have."""


def visible_gpus(environ: dict[str, str] | None = None,
                 device_files: Sequence[str] | None = None) -> list[str]:
    """The GPUs this process may use, as ``CUDA_VISIBLE_DEVICES`` entries: that variable's entries
    when it is set, else ``0 .. count-1`` with the count from NVML or the driver's device files.
    Starts no CUDA context."""
    name = "CUDA_VISIBLE_DEVICES"
    visible = environment_value(name) if environ is None else environ.get(name)
    if visible is not None:
        return [d.strip() for d in visible.split(",") if d.strip() and d.strip() != "-1"]
    if device_files is None:
        count = _nvml_count()
        if count is not None:
            return [str(i) for i in range(count)]
        device_files = glob.glob("/dev/nvidia[0-9]*")
    return [str(i) for i in range(len(device_files))]


def _nvml_count() -> int | None:
    from gemmzoo.measure.gpu_state import gpu_count

    return gpu_count()


def parse_devices(text: str, visible: Sequence[str]) -> list[str]:
    """``"all"`` → every visible GPU; ``"0,2"`` → the first and third of them (positions in the
    visible list, as CUDA numbers them). Returns ``CUDA_VISIBLE_DEVICES`` entries, one per worker."""
    if not visible:
        raise DevicesError(f"--devices {text}: no GPU is visible here (CUDA_VISIBLE_DEVICES, driver)")
    if text.strip().lower() == "all":
        return list(visible)
    chosen = []
    for word in text.split(","):
        word = word.strip()
        if not word.isdigit() or int(word) >= len(visible):
            raise DevicesError(f"--devices {text}: {word!r} is not one of the visible GPUs "
                               f"0..{len(visible) - 1} (or say all)")
        if visible[int(word)] in chosen:
            raise DevicesError(f"--devices {text}: GPU {word} is named twice")
        chosen.append(visible[int(word)])
    return chosen


@dataclass
class WorkerReport:
    """What one worker did: its ``CUDA_VISIBLE_DEVICES`` entry (or an engine's name for it),
    points done, busy seconds, seconds from the sweep's start until the worker began
    (``began_s``: its process started and its job loaded; engine executors), until it was warm
    (``ready_s``: its setup done, the conformance suites included where the setup runs them) and
    until its last point was done (``done_s``), what its setup did (``setup``: seconds per step,
    as the setup reports them), and the error that ended it early, if one did."""

    device: str
    points: int = 0
    busy_s: float = 0.0
    error: str = ""
    ready_s: float | None = None
    done_s: float | None = None
    began_s: float | None = None
    setup: dict[str, Any] | None = None

    def as_dict(self) -> dict[str, Any]:
        def seconds(value: float | None) -> float | None:
            return None if value is None else round(value, 3)

        found = {"device": self.device, "points": self.points, "busy_s": round(self.busy_s, 3),
                 "ready_s": seconds(self.ready_s), "done_s": seconds(self.done_s), "error": self.error}
        if self.began_s is not None:
            found["began_s"] = seconds(self.began_s)
        if self.setup is not None:
            found["setup"] = self.setup
        return found


def core_shares(cores: Sequence[int], count: int) -> list[list[int]]:
    """``cores`` dealt into ``count`` disjoint, near-equal shares (one per worker; a share is all
    of them when there are fewer cores than workers), so that the workers' host work (launches,
    making operands, judging results) and thread pools do not compete for the same cores."""
    ordered = sorted(cores)
    if len(ordered) < count:
        return [list(ordered) for _ in range(count)]
    size, extra = divmod(len(ordered), count)
    shares, start = [], 0
    for number in range(count):
        end = start + size + (1 if number < extra else 0)
        shares.append(ordered[start:end])
        start = end
    return shares


def host_cores() -> list[int]:
    """The cores this process may run on (its affinity where the OS tells, else all of them)."""
    try:
        return sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return list(range(os.cpu_count() or 1))


_READY = -1  # the number of the message a worker sends once it is warm

_POOL_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


def _worker(slot: int, device: str, warm: Callable[[], Any] | None, tasks: Any, results: Any,
            current: Any, cores: Sequence[int] | None = None) -> None:
    environ = process_environment()
    # Before anything can start CUDA in this process: only this worker's GPU is visible.
    environ["CUDA_VISIBLE_DEVICES"] = device
    if cores:
        try:
            os.sched_setaffinity(0, cores)
        except (AttributeError, OSError):  # not on this OS: the pools are still sized to the share
            pass
        for name in _POOL_VARIABLES:  # before numpy or torch start their pools
            environ.setdefault(name, str(len(cores)))
    if warm is not None:
        try:
            warm()
        except Exception:  # the jobs will meet and report the same trouble
            pass
    results.send((_READY, None, 0.0, time.time()))
    while True:
        item = tasks.get()
        if item is None:
            break
        number, job, point = item
        # Shared memory, not a message: if this process dies, the parent still knows the point.
        current[slot] = number
        began = time.perf_counter()
        try:
            payload: Any = ("ok", job(point))
        except BaseException as error:  # reported for this point; the worker goes on
            payload = ("error", f"{type(error).__name__}: {error}")
        # A pipe, not a queue: send() has written the result when it returns (a queue's feeder
        # thread could lose it if the process dies on the next point).
        results.send((number, payload, time.perf_counter() - began, time.time()))
        current[slot] = -1
    results.close()


class DevicePool:
    """One worker process per entry of ``devices``, each started by ``spawn`` with
    ``CUDA_VISIBLE_DEVICES`` set to its entry alone, so no CUDA state is inherited and each CUDA
    sees one GPU from the outset, and pinned to its share of the host's cores
    (:func:`core_shares`; ``split_cores=False`` leaves them all to every worker). ``warm()``
    (picklable) runs first in each worker: importing the frameworks and starting CUDA there
    overlaps with whatever the parent does meanwhile.

    A pool runs one sweep: :meth:`submit` queues its points (workers take them as soon as they
    are warm), :meth:`run` collects the results; then the workers exit. :meth:`close` (also on
    garbage collection) ends a pool that never ran.

    A worker that dies (killed, out of memory, a crash in a backend) loses only the point it was
    on: that point is queued again for whichever worker is free next, and a fresh worker takes the
    dead one's place on its GPU, so the pool keeps its width. A point that ends ``retries + 1``
    workers is reported as an error and the sweep goes on without it.
    """

    def __init__(self, devices: Sequence[str], warm: Callable[[], Any] | None = None,
                 context: str = "spawn", split_cores: bool = True, retries: int = 2) -> None:
        self._ctx = multiprocessing.get_context(context)
        self.devices = list(devices)
        self.retries = retries
        self._warm = warm
        self._tasks = self._ctx.Queue()
        self._current = self._ctx.Array("i", [-1] * len(self.devices))
        self._readers: dict[Any, tuple[int, str]] = {}
        self._workers: dict[int, Any] = {}
        self._submitted: tuple[Callable[[GridPoint], Any], list[GridPoint]] | None = None
        self.started = time.time()
        self._shares = (core_shares(host_cores(), len(self.devices)) if split_cores
                        else [None] * len(self.devices))
        for slot, device in enumerate(self.devices):
            self._start(slot, device)
        self._finalizer = weakref.finalize(self, DevicePool._stop, self._tasks, self._workers)

    def _start(self, slot: int, device: str) -> None:
        """Start the worker of ``slot`` (its GPU ``device``), replacing one that ended."""
        # The child inherits the environment at start: the current session's configuration
        # (a --timeout given to this process included) and its own GPU alone.
        from gemmzoo.session import current

        environ = process_environment()
        inherited = {**current().config.child_environment(), "CUDA_VISIBLE_DEVICES": device}
        saved = {name: environ.get(name) for name in inherited}
        environ.update({name: value for name, value in inherited.items() if value is not None})
        try:
            reader, writer = self._ctx.Pipe(duplex=False)
            args = (slot, device, self._warm, self._tasks, writer, self._current, self._shares[slot])
            process = self._ctx.Process(target=_worker, args=args, daemon=True, name=f"gemmzoo-gpu-{device}")
            process.start()
            writer.close()
        finally:
            for name, value in saved.items():
                if value is None:
                    environ.pop(name, None)
                else:
                    environ[name] = value
        self._workers[slot] = process
        self._readers[reader] = (slot, device)

    @staticmethod
    def _stop(tasks: Any, workers: dict[int, Any]) -> None:
        alive = list(workers.values())
        for _ in alive:
            tasks.put(None)
        for process in alive:
            process.join(timeout=10)
            if process.is_alive():
                process.terminate()

    def close(self) -> None:
        """Let the workers finish and exit (at once if they have nothing to do)."""
        self._finalizer()

    def submit(self, job: Callable[[GridPoint], Any], points: Sequence[GridPoint]) -> None:
        """Queue ``job(point)`` for every point now (``job`` picklable: a module-level function or
        a ``functools.partial`` of one), costliest first (:func:`point_cost`); each worker takes
        the next one as soon as it is warm and free. :meth:`run` collects the results."""
        if self._submitted is not None:
            raise RuntimeError("this pool's sweep was already submitted")
        self._submitted = (job, list(points))
        order = sorted(range(len(points)), key=lambda i: (-point_cost(points[i]), i))
        for number in order:
            self._tasks.put((number, job, points[number]))

    @property
    def submitted(self) -> tuple[Callable[[GridPoint], Any], list[GridPoint]] | None:
        """The job and points queued by :meth:`submit`, if any."""
        return self._submitted

    def run(self, job: Callable[[GridPoint], Any] | None = None, points: Sequence[GridPoint] | None = None,
            on_done: Callable[[GridPoint, str, Any], None] | None = None,
            ) -> tuple[list[tuple[str, Any]], list[WorkerReport]]:
        """Run ``job(point)`` for every point (:meth:`submit`, unless that was done already: then
        ``job`` and ``points`` may be left out) and wait for them. Returns, in the order of
        ``points``, ``("ok", value)`` or ``("error", text)`` for each, and a report per GPU.
        ``on_done(point, device, outcome)`` hears each point as it finishes, once. A worker that
        dies has its point run again by another (see the class docstring)."""
        if self._submitted is None:
            if job is None or points is None:
                raise ValueError("run() needs a job and points unless they were submitted")
            self.submit(job, points)
        assert self._submitted is not None
        job, points = self._submitted
        reports = {device: WorkerReport(device) for device in self.devices}
        outcomes: list[tuple[str, Any] | None] = [None] * len(points)
        losses = [0] * len(points)  # workers each point has ended
        replaced = [0] * len(self.devices)
        self._finalizer.detach()
        ending = False

        def settle(number: int, outcome: tuple[str, Any], device: str) -> None:
            outcomes[number] = outcome
            if on_done is not None:
                on_done(points[number], device, outcome)

        while self._readers:
            if not ending and all(o is not None for o in outcomes):
                ending = True  # every point is in: the workers may go
                for _ in self._workers:
                    self._tasks.put(None)
            for reader in multiprocessing.connection.wait(list(self._readers)):
                slot, device = self._readers[reader]
                try:
                    number, outcome, busy, when = reader.recv()
                except EOFError:  # the worker finished, or died
                    del self._readers[reader]
                    process = self._workers.pop(slot)
                    process.join(timeout=10)
                    number = self._current[slot]
                    self._current[slot] = -1
                    if process.exitcode == 0 and number < 0:
                        continue
                    text = f"worker on GPU {device} ended (exit code {process.exitcode})"
                    lost = 0 <= number < len(points) and outcomes[number] is None
                    if lost:
                        losses[number] += 1
                        text += f" on {points[number].id}"
                    reports[device].error = "; ".join(filter(None, (reports[device].error, text)))
                    if lost and losses[number] > self.retries:
                        given_up = f"{text}; it ended {losses[number]} workers, not tried again"
                        settle(number, ("error", given_up), device)
                    elif lost:  # measured again by whichever worker is free next
                        self._tasks.put((number, job, points[number]))
                    if not ending and any(o is None for o in outcomes) and replaced[slot] < self.retries:
                        replaced[slot] += 1
                        self._start(slot, device)
                    continue
                if number == _READY:
                    if reports[device].ready_s is None:
                        reports[device].ready_s = when - self.started
                    continue
                if outcomes[number] is not None:  # already settled: never counted twice
                    continue
                reports[device].done_s = when - self.started
                reports[device].points += 1
                reports[device].busy_s += busy
                settle(number, outcome, device)
        # Points queued again after the last worker ended stay unread: the queue must not wait
        # for them at exit.
        self._tasks.cancel_join_thread()
        for number, outcome in enumerate(outcomes):
            if outcome is None:
                outcomes[number] = ("error", "not measured: every worker process ended before this point")
        return [o for o in outcomes if o is not None], list(reports.values())


def run_on_devices(job: Callable[[GridPoint], Any], points: Sequence[GridPoint], devices: Sequence[str],
                   on_done: Callable[[GridPoint, str, Any], None] | None = None, retries: int = 2,
                   ) -> tuple[list[tuple[str, Any]], list[WorkerReport]]:
    """:meth:`DevicePool.run` on a new pool of ``devices``."""
    return DevicePool(devices, retries=retries).run(job, points, on_done)
