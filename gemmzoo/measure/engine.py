"""The CUDA timing engine: calls queued behind a hold on the stream, timed by CUDA events.

The calls of a batch are queued behind a hold on the stream (:mod:`gemmzoo.measure.gpu_stream`) and run
back to back once it is released, so no launch time can enter a sample; the next batch is queued
while one runs, so the GPU does not idle between batches either. At most
:data:`MAX_QUEUED_CALLS` calls make a batch, well inside CUDA's launch queue.
:class:`DeviceClock` gives the device time as a clock for pytest-benchmark's ``timer=``.
"""

from __future__ import annotations

import contextlib
import gc
import statistics
import time
from collections.abc import Callable, Iterator
from typing import Any

#: Calls queued behind one hold. CUDA's launch queue holds about a thousand entries and a timed
#: call makes at least four (flush, two events, the GEMM), and two batches may be queued at once:
#: beyond the queue the host would block on a launch while the GPU waits for the host.
MAX_QUEUED_CALLS = 64


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Python's garbage collector off inside, as ``timeit`` does: a full collection in a process
    holding torch and Triton is long enough to land in a host-time sample."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


class Engine:
    """Device and host time of calls on a CUDA device, queued behind holds on the stream.

    ``gpu`` supplies ``pair()``, ``flush()``, ``synchronize()``, ``wait(event)``,
    ``elapsed_s(start, end)`` and ``hold()`` (:class:`gemmzoo.measure.gpu_stream.CudaGpu` by default, made
    on first use so that building an engine touches no GPU). :meth:`queue` is the one place a
    timed call is made; :meth:`batch` (one batch, then a synchronisation) and :meth:`stream`
    (batches back to back: the bench samples and :class:`DeviceClock`'s rounds) build on it.
    """

    def __init__(self, gpu: Any = None) -> None:
        self._gpu = gpu
        self._pending: list[tuple[Any, Any]] = []
        self._hold: Any = None
        self.holding = True  # False once no hold can be used for these calls

    @property
    def gpu(self) -> Any:
        """The device interface (created on first use)."""
        if self._gpu is None:
            from gemmzoo.measure.gpu_stream import default_gpu

            self._gpu = default_gpu()
        return self._gpu

    @property
    def method(self) -> str:
        """How the device samples were taken, in words."""
        how = "queued behind a stream hold" if self.holding else "without a stream hold"
        return f"cuda-events, L2 flushed, {how}"

    def _open(self) -> None:
        if self._hold is None and self.holding:
            self._hold = self.gpu.hold()
            if self._hold is None:  # no hold kernel on this machine
                self.holding = False

    def _release(self) -> bool:
        """Let the queued work run; False when the watchdog had to open the hold (the calls
        synchronise or fill the launch queue, so they cannot wait behind one)."""
        hold, self._hold = self._hold, None
        if hold is None:
            return True
        hold.release()
        if hold.expired:
            self.holding = False
            return False
        return True

    def queue(self, call: Callable[[], Any], flush: bool = True) -> Any:
        """Queue one timed call: the L2 flush, a start event, ``call``, an end event."""
        if not self._pending:
            self._open()
        elif len(self._pending) >= MAX_QUEUED_CALLS:
            self._release()  # the rest of this batch runs unheld rather than fill the queue
        gpu = self.gpu
        if flush:
            gpu.flush()
        start, end = gpu.pair()
        start.record()
        result = call()
        end.record()
        self._pending.append((start, end))
        return result

    def collect(self) -> tuple[list[float], bool]:
        """Release the hold, synchronise once, and return the device seconds of every queued call,
        and whether they ran behind an intact hold."""
        intact = self._release()
        gpu = self.gpu
        gpu.synchronize()
        pairs, self._pending = self._pending, []
        return [gpu.elapsed_s(start, end) for start, end in pairs], intact

    def batch(self, call: Callable[[], Any], count: int, flush: bool = True) -> list[float]:
        """Device seconds of each of ``count`` calls (at most :data:`MAX_QUEUED_CALLS`), run back
        to back after the host queued them all."""
        while True:
            for _ in range(max(1, min(count, MAX_QUEUED_CALLS))):
                self.queue(call, flush)
            samples, intact = self.collect()
            if intact or not self.holding:
                return samples

    def _launch(self, call: Callable[[], Any], count: int, flush: bool) -> tuple[list[tuple[Any, Any]], bool]:
        """Queue ``count`` timed calls behind a fresh hold and release it; the pairs and whether the
        hold stayed intact."""
        for _ in range(count):
            self.queue(call, flush)
        pairs, self._pending = self._pending, []
        return pairs, self._release()

    def stream(self, call: Callable[[], Any], count: int, flush: bool = True) -> Iterator[list[float]]:
        """Batches of ``count`` timed calls (at most :data:`MAX_QUEUED_CALLS`), endlessly: each
        batch is queued behind its own hold while the batch before it runs, so the GPU goes from
        batch to batch without waiting for the host (idle gaps would let a large GEMM's clock
        rise above the sustained one). Yields each batch's device seconds once it has run; at
        most two batches are queued at a time. Closing the generator waits for the last one."""
        count = max(1, min(count, MAX_QUEUED_CALLS))
        gpu = self.gpu
        running = self._launch(call, count, flush)
        try:
            while True:
                queued = self._launch(call, count, flush)
                gpu.wait(running[0][-1][1])  # the end event of the running batch's last call
                pairs, intact = running
                if intact or not self.holding:
                    yield [gpu.elapsed_s(start, end) for start, end in pairs]
                running = queued
        finally:
            gpu.synchronize()

    def host_per_call(self, call: Callable[[], Any], count: int) -> float:
        """Host seconds per call over a loop of ``count`` calls queued behind a hold, so the
        loop never waits for the device."""
        count = max(1, min(count, MAX_QUEUED_CALLS))
        while True:
            self._open()
            start = time.perf_counter()
            for _ in range(count):
                call()
            elapsed = time.perf_counter() - start
            intact = self._release()
            self.gpu.synchronize()
            if intact or not self.holding:
                return elapsed / count


class DeviceClock:
    """A clock that reads the GEMM time a device has spent, for pytest-benchmark's ``timer=``.

    ``clock.wrap(call, calls)`` gives a target that, each time it is called, takes the next batch
    of ``calls`` timed calls from :meth:`Engine.stream` (the batch after it is already queued, so
    the GPU runs from batch to batch without waiting for the host) and adds the batch's median
    device time per call to a running total; reading the clock (``clock()``) returns that total.
    pytest-benchmark reads its timer before and after each round, so with ``iterations=1`` a
    round's duration is the median device time of one GEMM in a batch that ran back to back: not
    launch time, not the flush, not a synchronisation. The median, not the mean, so that a few
    slow calls in a batch (a clock dip under the power cap) move a round as little as they move
    the engine's and do_bench's medians over single calls. :meth:`finish` drains the last batch.
    """

    __name__ = "DeviceClock"  # pytest-benchmark names its timer by __module__ and __name__

    def __init__(self, gpu: Any = None) -> None:
        self.engine = Engine(gpu)
        self._total = 0.0
        self._stream: Iterator[list[float]] | None = None
        self.reads = 0
        self.batches = 0

    def __call__(self) -> float:
        self.reads += 1
        return self._total

    def wrap(self, call: Callable[[], Any], calls: int = 1, flush: bool = True) -> Callable[[], None]:
        """A target that runs one batch of ``calls`` timed calls of ``call`` per invocation."""
        self.finish()
        stream = self._stream = self.engine.stream(call, calls, flush)

        def timed() -> None:
            self._total += statistics.median(next(stream))
            self.batches += 1

        return timed

    def finish(self) -> None:
        """Wait for the batch still queued and drop it (call after the last round)."""
        if self._stream is not None:
            self._stream.close()
            self._stream = None

    def __repr__(self) -> str:
        return "DeviceClock()"
