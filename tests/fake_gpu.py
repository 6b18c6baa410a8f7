"""A pretend GPU for testing the CUDA timing paths on a machine without one.

:class:`FakeEvents` models a device with a launch queue: each launch (flush, event record,
kernel) is stamped with the host's clock when it is made, and on ``synchronize`` the device runs
the queue in order, each operation starting when the previous one ended or when it was launched,
whichever is later, so a slow host leaves the device idle between operations as a real GPU
would. A hold (``hold()``) is a kernel that runs until the host releases it, as the engine's
stream hold does; a launch that would overflow the queue behind a closed hold, or a
synchronisation while one is closed, waits for it like the real thing (until the hold's watchdog
opens it). :class:`FakeCudaBackend` computes with NumPy on the host (so results are real and
checkable) but declares ``device = "cuda"``, spends ``launch_s`` of host time per call and
charges ``gemm_s`` of device time.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from gemmzoo import Backend
from gemmzoo.measure.gpu_stream import StreamHold


class FakeEvent:
    """Stamped with the device's time when the device reaches it."""

    def __init__(self, device: FakeEvents) -> None:
        self.device = device
        self.time: float | None = None

    def record(self) -> None:
        self.device.launch(0.0, event=self)


@dataclass
class _Op:
    launched: float
    duration: float
    event: FakeEvent | None = None
    flag: np.ndarray | None = None


class FakeEvents:
    """The device interface of a pretend GPU (``pair``, ``flush``, ``synchronize``,
    ``elapsed_s``, ``wait``, ``hold``). ``holds=False`` is a machine without a hold kernel."""

    def __init__(self, flush_s: float = 0.004, depth: int = 1024, holds: bool = True,
                 hold_timeout_s: float = 2.0) -> None:
        self.flush_s = flush_s
        self.depth = depth
        self.holds = holds
        self.hold_timeout_s = hold_timeout_s
        self.free_at = 0.0
        self.syncs = 0
        self.flushes = 0
        self.max_queued = 0  # the most operations ever waiting behind a closed hold
        self._queue: list[_Op] = []

    def pair(self) -> tuple[FakeEvent, FakeEvent]:
        return FakeEvent(self), FakeEvent(self)

    def flush(self) -> None:
        self.flushes += 1
        self.launch(self.flush_s)

    def run(self, seconds: float) -> None:
        """A kernel that keeps the device busy for ``seconds``."""
        self.launch(seconds)

    def hold(self) -> StreamHold | None:
        if not self.holds:
            return None
        flag = np.zeros(1, np.int32)
        return StreamHold(flag, lambda: self.launch(0.0, flag=flag), self.hold_timeout_s)

    def _closed_hold(self) -> np.ndarray | None:
        return next((op.flag for op in self._queue if op.flag is not None and op.flag[0] == 0), None)

    def launch(self, seconds: float, event: FakeEvent | None = None, flag: np.ndarray | None = None) -> None:
        closed = self._closed_hold()
        if closed is not None:
            behind = len(self._queue)
            self.max_queued = max(self.max_queued, behind)
            if behind >= self.depth:  # a full queue: the host blocks until the device moves
                self._wait(closed)
        self._queue.append(_Op(time.perf_counter(), seconds, event, flag))

    @staticmethod
    def _wait(flag: np.ndarray) -> None:
        deadline = time.perf_counter() + 10
        while flag[0] == 0:
            if time.perf_counter() > deadline:
                raise RuntimeError("deadlock: the device waits for a hold that is never released")
            time.sleep(0.001)

    def synchronize(self) -> None:
        self.syncs += 1
        for op in self._queue:
            if op.flag is not None:
                self._wait(op.flag)
        released = time.perf_counter()
        for op in self._queue:
            start = max(self.free_at, op.launched)
            end = max(start, released) if op.flag is not None else start + op.duration
            if op.event is not None:
                op.event.time = start
            self.free_at = end
        self._queue.clear()

    def wait(self, event: FakeEvent) -> None:
        self.synchronize()

    def elapsed_s(self, start: FakeEvent, end: FakeEvent) -> float:
        assert start.time is not None and end.time is not None, "event read before the device reached it"
        return end.time - start.time


def spend_host(seconds: float) -> None:
    """Keep the host busy for ``seconds`` (a busy wait: sleeps are too coarse)."""
    until = time.perf_counter() + seconds
    while time.perf_counter() < until:
        pass


class FakeCudaBackend(Backend):
    """NumPy maths, fake CUDA timing: every matmul costs ``launch_s`` of host time and
    ``gemm_s`` of device time."""

    device = "cuda"
    dtypes = frozenset({"float32"})

    def __init__(self, events: FakeEvents, gemm_s: float = 0.003, name: str = "fake-cuda",
                 wrong: bool = False, launch_s: float = 0.0, syncs: bool = False) -> None:
        self.events = events
        self.gemm_s = gemm_s
        self.name = name
        self.wrong = wrong
        self.launch_s = launch_s
        self.syncs = syncs

    def from_numpy(self, x: np.ndarray, dtype: str) -> np.ndarray:
        self.check_dtype(dtype, np.shape(x))
        return np.array(x, dtype=np.float32)

    def to_numpy(self, y: Any) -> np.ndarray:
        return np.array(y, copy=True)

    def matmul(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        self.check_operands(a, b)
        spend_host(self.launch_s)
        self.events.run(self.gemm_s)
        if self.syncs:  # a backend that waits for its own result inside the call
            self.events.synchronize()
        c = np.matmul(a, b)
        if self.wrong:
            c[-1, -1] += 1.0  # one wrong element: a backend that is fast but not right
        return c

    def synchronize(self) -> None:
        self.events.synchronize()


class OwnStreamBackend(FakeCudaBackend):
    """A CUDA backend that computes on a stream of its own, as JAX does: the pretend GPU's events
    never see its work, which only its ``synchronize`` waits for (``gemm_s`` of wall time per
    call launched since the last one). ``stream_ordered`` says so, unless ``declared=False``."""

    def __init__(self, events: FakeEvents, gemm_s: float, declared: bool = True) -> None:
        super().__init__(events, gemm_s=gemm_s, name="own-stream")
        self.stream_ordered = not declared
        self.pending = 0

    def matmul(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        self.check_operands(a, b)
        self.pending += 1
        return np.matmul(a, b)

    def synchronize(self) -> None:
        spend_host(self.pending * self.gemm_s)
        self.pending = 0
