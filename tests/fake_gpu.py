"""A pretend GPU for testing the CUDA timing paths on a machine without one.

:class:`FakeEvents` is a device with its own clock: launched work advances it by a known amount,
events stamp it when recorded, and ``synchronize`` counts the syncs. :class:`FakeCudaBackend`
computes with NumPy on the host (so results are real and checkable) but declares ``device =
"cuda"`` and charges each GEMM a fixed ``gemm_s`` of device time.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from gemmzoo import Backend


class FakeEvent:
    """Records the fake device's clock."""

    def __init__(self, device: FakeEvents) -> None:
        self.device = device
        self.time: float | None = None

    def record(self) -> None:
        self.time = self.device.now


class FakeEvents:
    """The event source of a pretend GPU (``pair``, ``flush``, ``synchronize``, ``elapsed_s``)."""

    def __init__(self, flush_s: float = 0.004) -> None:
        self.now = 0.0
        self.flush_s = flush_s
        self.syncs = 0
        self.flushes = 0
        self.spins: list[float] = []

    def pair(self) -> tuple[FakeEvent, FakeEvent]:
        return FakeEvent(self), FakeEvent(self)

    def flush(self, spin_s: float = 0.0) -> None:
        """A spin of ``spin_s`` (when asked for), then the flush."""
        self.flushes += 1
        self.spins.append(spin_s)
        self.now += spin_s + self.flush_s

    def synchronize(self) -> None:
        self.syncs += 1

    def elapsed_s(self, start: FakeEvent, end: FakeEvent) -> float:
        assert start.time is not None and end.time is not None, "event read before it was recorded"
        return end.time - start.time

    def run(self, seconds: float) -> None:
        """A kernel that keeps the device busy for ``seconds``."""
        self.now += seconds


class FakeCudaBackend(Backend):
    """NumPy maths, fake CUDA timing: every matmul costs ``gemm_s`` of device time."""

    device = "cuda"
    dtypes = frozenset({"float32"})

    def __init__(self, events: FakeEvents, gemm_s: float = 0.003, name: str = "fake-cuda",
                 wrong: bool = False) -> None:
        self.events = events
        self.gemm_s = gemm_s
        self.name = name
        self.wrong = wrong

    def from_numpy(self, x: np.ndarray, dtype: str) -> np.ndarray:
        self.check_dtype(dtype, np.shape(x))
        return np.array(x, dtype=np.float32)

    def to_numpy(self, y: Any) -> np.ndarray:
        return np.array(y, copy=True)

    def matmul(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        self.check_operands(a, b)
        self.events.run(self.gemm_s)
        c = np.matmul(a, b)
        if self.wrong:
            c[-1, -1] += 1.0  # one wrong element: a backend that is fast but not right
        return c

    def synchronize(self) -> None:
        self.events.synchronize()
