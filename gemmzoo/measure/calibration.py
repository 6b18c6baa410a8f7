"""The machine's own speed, measured inside each CPU timing: a fixed workload timed between the
backend's samples.

A CPU can run a whole process 2x slower than the one before it while each row's samples stay
within a few percent of each other: a virtual machine's core shared with another tenant on the
host, a clock that moved. Nothing inside one run shows it, so two runs' rows differ by the
machine's move and compare cannot tell it from the backend's. The *calibration* is a fixed GEMM
(:data:`SHAPE`, float32, NumPy) timed in the same thread, under the same thread limit, between the
backend's samples (:class:`CalibrationWork`: about :data:`SHARE` of the backend's sample time, at
least :data:`MIN_SAMPLES` samples). Recorded beside the row (:class:`Calibration`):

- its own timing, whose ratio between two runs says how far the machine moved;
- the row *in calibrations*: each of the row's samples over the median of the calibration samples
  taken around it (the last :data:`WINDOW`), summarised as a timing with the row's noise target.
  A machine that moves during a run (between rounds, or within one) moves both, so the row in
  calibrations keeps still where the row in seconds spreads or fails its noise target.

Compare judges a row relative to the machine from these (:mod:`gemmzoo.results.compare`). The
calibration measures compute-bound work in the core's caches: a drift that slows only memory
traffic is not what it sees. GPU timings take no calibration (their clock is read and throttling
flagged).
"""

from __future__ import annotations

import statistics
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
#: The calibration samples (the latest) whose median a backend sample is divided by.
WINDOW = 51
_SEED = 20261127


def workload(threads: int) -> str:
    """The text that names the calibration workload: the GEMM, the NumPy that ran it, the thread
    count and the processor model. Two runs' calibrations are comparable only when these are
    equal: across processors or NumPy versions the calibration's own speed changes, and a row
    judged against it would hide the very difference such a comparison is for."""
    import numpy as np

    from gemmzoo.measure.device import cpu_model

    m, n, k = SHAPE
    return (f"numpy {np.__version__} float32 {m}x{n}x{k}, {threads} thread{'s' if threads != 1 else ''}, "
            f"{cpu_model()}")


@dataclass(frozen=True)
class Calibration:
    """The calibration's timing during one row's samples, what was timed, and the row in units of
    it (``relative``: ``None`` where the row took no sample beside it)."""

    workload: str
    timing: Timing
    relative: Timing | None = None

    def merged(self, other: Calibration) -> Calibration:
        """Both rounds' samples as one (the same workload), else the later round's alone."""
        if other.workload != self.workload:
            return other
        relative = self.relative.merged(other.relative) if self.relative and other.relative \
            else self.relative or other.relative
        return Calibration(self.workload, self.timing.merged(other.timing), relative)

    def as_dict(self) -> dict[str, Any]:
        """The result file's ``calibration*`` and ``in_calibrations*`` fields."""
        timing, relative = self.timing, self.relative
        fields: dict[str, Any] = {
            "calibration": self.workload, "calibration_s": timing.median_s,
            "calibration_q1_s": timing.q1_s, "calibration_q3_s": timing.q3_s,
            "calibration_samples": timing.samples, "calibration_noise": timing.noise}
        if relative is not None:
            fields.update({"in_calibrations": relative.median_s, "in_calibrations_q1": relative.q1_s,
                           "in_calibrations_q3": relative.q3_s, "in_calibrations_noise": relative.noise,
                           "in_calibrations_converged": relative.converged})
        return fields


class CalibrationWork:
    """The calibration GEMM and its samples: :meth:`after` is called with each of the backend's
    sample times, times calibration calls until their total keeps up with :data:`SHARE` of the
    backend's, and keeps the sample in calibrations; :meth:`report` tops up to
    :data:`MIN_SAMPLES` and summarises."""

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
        self.relative: list[float] = []
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
        :data:`SHARE` of the backend's time (one at the first sample), then keep the sample over
        the median of the latest :data:`WINDOW` calibration samples. Each calibration call counts
        as that median, at most: one preempted call must not stop the calibration for a while."""
        self._owed += SHARE * seconds
        while self._owed > 0 or not self.samples:
            taken = self.sample()
            self._owed -= min(taken, statistics.median(self.samples[-WINDOW:]))
        nearby = statistics.median(self.samples[-WINDOW:])
        if nearby > 0:
            self.relative.append(seconds / nearby)

    def report(self, target: float | None = None) -> Calibration:
        """The calibration's timing (topped up to :data:`MIN_SAMPLES` samples) and the row in
        calibrations, judged against the row's noise ``target``."""
        while len(self.samples) < MIN_SAMPLES:
            self.sample()
        timing = Timing.of(self.samples, "wall clock, between the backend's samples")
        method = "the row's samples over the calibration's median nearby"
        relative = Timing.of(self.relative, method, target) if self.relative else None
        return Calibration(self.workload, timing, relative)
