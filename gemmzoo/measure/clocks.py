"""Throttle detection: the GPU's SM clock read through NVML while a measurement runs.

A GPU held under its power or thermal limit lowers its clock, and every time taken meanwhile is
slower than the same GEMM on a cool GPU. As nvbench does, a measurement whose average SM clock
is below :data:`THROTTLE_THRESHOLD` of the GPU's default clock is flagged *throttled*. Without
NVML (no ``nvidia-ml-py`` and no driver library) nothing is read and nothing is flagged.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

THROTTLE_THRESHOLD = 0.75
"""A measurement whose mean SM clock is below this fraction of the default clock is throttled."""


@dataclass(frozen=True)
class ClockReport:
    """The SM clock during one measurement: mean and lowest of the readings (MHz), the GPU's
    default SM clock, how many readings, and whether the mean was below the threshold."""

    mean_sm_mhz: float
    min_sm_mhz: float
    default_sm_mhz: float | None
    readings: int
    throttled: bool | None

    def as_dict(self) -> dict[str, Any]:
        return {"sm_clock_mhz": round(self.mean_sm_mhz, 1), "min_sm_clock_mhz": self.min_sm_mhz,
                "default_sm_clock_mhz": self.default_sm_mhz, "clock_readings": self.readings,
                "throttled": self.throttled}


class ClockWatch:
    """Reads the SM clock each time :meth:`read` is called (between batches of a measurement).

    ``reader`` returns the clock in MHz (or ``None`` when it cannot); ``default_mhz`` is the
    clock a cool GPU runs at. Without a reader the watch does nothing and reports ``None``.
    """

    def __init__(self, reader: Callable[[], int | None] | None = None, default_mhz: float | None = None,
                 threshold: float = THROTTLE_THRESHOLD) -> None:
        self.reader = reader
        self.default_mhz = default_mhz
        self.threshold = threshold
        self.values: list[float] = []

    def read(self) -> None:
        """Take one reading (nothing without a reader)."""
        if self.reader is None:
            return
        try:
            value = self.reader()
        except Exception:  # a reading that fails does not end the measurement
            return
        if value:
            self.values.append(float(value))

    def report(self) -> ClockReport | None:
        """The readings so far, or ``None`` without any."""
        if not self.values:
            return None
        mean = statistics.fmean(self.values)
        throttled = None if not self.default_mhz else mean < self.threshold * self.default_mhz
        return ClockReport(mean, min(self.values), self.default_mhz, len(self.values), throttled)


def nvml_watch() -> ClockWatch:
    """A watch on the GPU this process measures on, through NVML (inactive without it)."""
    from gemmzoo.measure.gpu_state import sm_clock_reader

    found = sm_clock_reader()
    if found is None:
        return ClockWatch()
    read, default = found
    return ClockWatch(read, default)
