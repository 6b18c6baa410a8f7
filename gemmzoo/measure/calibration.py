"""The machine's own speed, measured inside each CPU timing: a fixed workload timed between the
backend's samples.

A CPU can run a whole process 2x slower than the one before it while each row's samples stay
within a few percent of each other: a virtual machine's core shared with another tenant on the
host, a clock that moved, a neighbour's memory traffic. Nothing inside one run shows it, so two
runs' rows differ by the machine's move and compare cannot tell it from the backend's. The
*calibration* is a fixed GEMM (:data:`SHAPE`, float32, NumPy) timed in the same thread, under the
same thread limit, between the backend's samples (:class:`CalibrationWork`: about :data:`SHARE` of
the backend's sample time, at least :data:`MIN_SAMPLES` samples). Its timing is recorded beside the
row's (:class:`Calibration`); compare reads how far the machine moved between two runs from it and
judges each row relative to that move (:mod:`gemmzoo.results.compare`).

It measures compute-bound work in the core's caches: a drift that slows only memory traffic is
not what it sees. GPU timings take no calibration (their clock is read and throttling flagged).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from gemmzoo.measure.stats import Timing

#: The calibration GEMM's M, N and K (float32): three operands of 64 KiB stay in a core's cache,
#: and one call lasts tens of microseconds on one core, short enough to sit between samples.
SHAPE = (128, 128, 128)
#: The calibration's time, as a share of the backend's sample time it is interleaved with.
SHARE = 0.25
#: Calibration samples taken at least, whatever the backend's samples took.
MIN_SAMPLES = 6
_SEED = 20261127


def workload(threads: int) -> str:
    """The text that names the calibration workload: two runs' calibrations are comparable only
    when these are equal."""
    m, n, k = SHAPE
    return f"numpy float32 {m}x{n}x{k}, {threads} thread{'s' if threads != 1 else ''}"


@dataclass(frozen=True)
class Calibration:
    """The calibration's timing during one row's samples, and what was timed."""

    workload: str
    timing: Timing

    def merged(self, other: Calibration) -> Calibration:
        """Both rounds' samples as one (the same workload), else the later round's alone."""
        if other.workload != self.workload:
            return other
        return Calibration(self.workload, self.timing.merged(other.timing))

    def as_dict(self) -> dict[str, Any]:
        """The result file's ``calibration*`` fields."""
        timing = self.timing
        return {"calibration": self.workload, "calibration_s": timing.median_s,
                "calibration_q1_s": timing.q1_s, "calibration_q3_s": timing.q3_s,
                "calibration_samples": timing.samples, "calibration_noise": timing.noise}


class CalibrationWork:
    """The calibration GEMM and its samples: :meth:`after` is called with each of the backend's
    sample times and times calibration calls until their total keeps up with :data:`SHARE` of the
    backend's; :meth:`report` tops up to :data:`MIN_SAMPLES` and summarises."""

    def __init__(self, threads: int) -> None:
        import numpy as np

        rng = np.random.default_rng(_SEED)
        m, n, k = SHAPE
        self._a = rng.standard_normal((m, k), dtype=np.float32)
        self._b = rng.standard_normal((k, n), dtype=np.float32)
        self._c = np.empty((m, n), dtype=np.float32)
        self._matmul = np.matmul
        self.workload = workload(threads)
        self.samples: list[float] = []
        self._owed = 0.0

    def warm(self) -> None:
        """Two untimed calls: the BLAS's buffers and the operands in the cache."""
        for _ in range(2):
            self._matmul(self._a, self._b, out=self._c)

    def sample(self) -> float:
        """One timed call of the calibration GEMM, in seconds."""
        start = time.perf_counter()
        self._matmul(self._a, self._b, out=self._c)
        seconds = time.perf_counter() - start
        self.samples.append(seconds)
        return seconds

    def after(self, seconds: float) -> None:
        """The backend's sample took ``seconds``: time calibration calls while they are behind
        :data:`SHARE` of the backend's time (one at the first sample)."""
        self._owed += SHARE * seconds
        while self._owed > 0 or not self.samples:
            self._owed -= self.sample()

    def report(self) -> Calibration:
        """The calibration's timing (topped up to :data:`MIN_SAMPLES` samples)."""
        while len(self.samples) < MIN_SAMPLES:
            self.sample()
        timing = Timing.of(self.samples, "wall clock, between the backend's samples")
        return Calibration(self.workload, timing)
