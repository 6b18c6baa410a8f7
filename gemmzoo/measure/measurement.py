"""One backend on one grid point, measured: :class:`Measurement` and :func:`measure`."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from gemmzoo.measure.calibration import Calibration
from gemmzoo.measure.clocks import ClockReport
from gemmzoo.measure.contention import ContentionReport
from gemmzoo.measure.problems import Problem, make_problem
from gemmzoo.measure.reference import UNCHECKED, judge_problem, spot_check
from gemmzoo.measure.stats import NOISE_TARGET, Timing
from gemmzoo.measure.threads import ThreadReport
from gemmzoo.measure.timers import run_timing
from gemmzoo.problems.grids import GridPoint


@dataclass(frozen=True)
class Measurement:
    """One backend on one grid point: device and host time per call, its error against the
    bound, the thread policy it was timed under and, on CUDA with NVML, the SM clock meanwhile.
    ``host`` is ``None`` only for measurements made without host timing."""

    backend: str
    point: GridPoint
    timing: Timing
    error_ratio: float
    rel_error: float = float("nan")
    host: Timing | None = None
    threads: ThreadReport | None = None
    clocks: ClockReport | None = None
    contention: ContentionReport | None = None
    #: On the CPU, where asked for: the machine's speed during the samples
    #: (:mod:`gemmzoo.measure.calibration`).
    calibration: Calibration | None = None

    @property
    def tflops(self) -> float:
        """TFLOPS from the median device time."""
        return self.point.flops / self.timing.median_s / 1e12 if self.timing.median_s > 0 else 0.0

    @property
    def host_s(self) -> float | None:
        """Median host time per call."""
        return self.host.median_s if self.host is not None else None

    @property
    def caller_s(self) -> float:
        """What a loop of calls achieves per call: the larger of device and host time."""
        return max(self.timing.median_s, self.host_s or 0.0)

    @property
    def caller_timing(self) -> Timing:
        """Whichever timing :attr:`caller_s` is."""
        return self.host if self.launch_bound and self.host else self.timing

    @property
    def caller_spread_s(self) -> float:
        """The spread of whichever time :attr:`caller_s` is."""
        return self.caller_timing.spread_s

    @property
    def launch_bound(self) -> bool:
        """Whether the host time per call exceeds the device time: the GPU waits for launches."""
        return self.host_s is not None and self.host_s > self.timing.median_s

    @property
    def caller_tflops(self) -> float:
        """TFLOPS at the caller time."""
        return self.point.flops / self.caller_s / 1e12 if self.caller_s > 0 else 0.0

    @property
    def noisy(self) -> bool:
        """Whether the device samples did not meet their noise target within the budget."""
        return self.timing.noisy

    @property
    def contended(self) -> bool:
        """Whether a CPU timing shared its cores (:mod:`gemmzoo.measure.contention`)."""
        return bool(self.contention and self.contention.contended)

    @property
    def throttled(self) -> bool:
        """Whether the GPU's SM clock was below the throttle threshold during the samples."""
        return bool(self.clocks and self.clocks.throttled)

    def merged(self, other: Measurement) -> Measurement:
        """This measurement and a later round's of the same backend and point, as one (the
        slower clock of the two kept: a throttled round taints the merged samples)."""
        host = self.host.merged(other.host) if self.host and other.host else self.host or other.host
        clocks = self.clocks
        if other.clocks is not None and (clocks is None or other.clocks.mean_sm_mhz < clocks.mean_sm_mhz):
            clocks = other.clocks
        contention = self.contention
        if other.contention is not None:
            contention = other.contention if contention is None else contention.merged(other.contention)
        calibration = self.calibration
        if other.calibration is not None:
            calibration = other.calibration if calibration is None else calibration.merged(other.calibration)
        return replace(self, timing=self.timing.merged(other.timing), host=host, clocks=clocks,
                       contention=contention, calibration=calibration)


def measure(backend: Any, point: GridPoint, budget_s: float = 0.5, verify: bool = True,
            seed: int = 0, timer: str = "events", gpu: Any = None, *, threads: int | None = None,
            noise_target: float = NOISE_TARGET, settle_above_s: float | None = None,
            problem: Problem | None = None, judge: bool = True, calibrate: bool = False) -> Measurement:
    """Make the problem, judge one result (unless ``verify`` is False), time one backend on one
    point (see :func:`gemmzoo.measure.timers.run_timing`; ``settle_above_s``: a rival's time,
    sampling stops once this backend is slower beyond doubt) and, when verifying, spot-check the
    last timed call's result too (:func:`gemmzoo.measure.reference.spot_check`). ``problem``:
    operands already made for this backend and point (by default drawn from ``seed``); ``judge``
    false skips the element-by-element judge of the first result (a large C's takes seconds on the
    host) while ``verify`` still spot-checks the timed calls'. ``calibrate``: on the CPU, record the
    machine's speed during the samples too (:mod:`gemmzoo.measure.calibration`)."""
    if problem is None:
        problem = make_problem(backend, point, seed)
    deviation = judge_problem(problem) if verify and judge else UNCHECKED
    timed = run_timing(problem, budget_s, gpu=gpu, timer=timer, threads=threads, noise_target=noise_target,
                       settle_above_s=settle_above_s, calibrate=calibrate)
    if verify and timed.last is not None:
        spot_check(problem, *timed.last, seed=seed + 1)
    return Measurement(backend.name, point, timed.device, deviation.error_ratio, deviation.rel_error,
                       timed.host, timed.threads, timed.clocks, timed.contention, timed.calibration)
