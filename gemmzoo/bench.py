"""The engine of ``gemmzoo bench``: every backend on every grid point, checked then timed.

Each (backend, point) becomes a :class:`BenchResult` whose status says what happened: ``ok``
(conforming result, timed), ``wrong`` (outside the conformance bound: never shown as a speed),
``error`` (the backend raised), or ``unsupported`` (the backend does not declare the dtype).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from gemmzoo.accuracy import accuracy_of
from gemmzoo.device import device_info, peak_tflops
from gemmzoo.grids import GridPoint
from gemmzoo.measure import Measurement, WrongResultError, measure

OK, WRONG, ERROR, UNSUPPORTED = "ok", "wrong", "error", "unsupported"


@dataclass(frozen=True)
class BenchResult:
    """One backend on one grid point."""

    backend: str
    device: str
    point: GridPoint
    status: str
    measurement: Measurement | None = None
    detail: str = ""
    peak_tflops: float | None = None
    #: The backend's accuracy class (:mod:`gemmzoo.accuracy`), whose bound judged the result.
    accuracy: str = "componentwise"

    @property
    def tflops(self) -> float | None:
        """TFLOPS from the median time; ``None`` unless the status is ``ok``."""
        return self.measurement.tflops if self.status == OK and self.measurement else None

    @property
    def peak_percent(self) -> float | None:
        """Share of the device's datasheet peak for the dtype, when gemmzoo knows that peak."""
        tflops = self.tflops
        return 100 * tflops / self.peak_tflops if tflops is not None and self.peak_tflops else None

    def as_dict(self) -> dict[str, Any]:
        """A flat, JSON-ready record."""
        timing = self.measurement.timing if self.measurement else None
        return {
            "backend": self.backend, "device": self.device, "point": self.point.id,
            "m": self.point.m, "n": self.point.n, "k": self.point.k,
            "dtype": self.point.dtype, "layout": self.point.layout, "accuracy": self.accuracy,
            "status": self.status,
            "median_s": timing.median_s if timing else None,
            "q1_s": timing.q1_s if timing else None,
            "q3_s": timing.q3_s if timing else None,
            "samples": timing.samples if timing else None,
            "method": timing.method if timing else None,
            "tflops": self.tflops,
            "peak_tflops": self.peak_tflops,
            "peak_percent": self.peak_percent,
            "error_ratio": self.measurement.error_ratio if self.measurement else None,
            "rel_error": self.measurement.rel_error if self.measurement else None,
            "detail": self.detail,
        }


def bench_one(backend: Any, point: GridPoint, budget_s: float = 0.2, timer: str = "events",
              verify: bool = True) -> BenchResult:
    """Check (unless ``verify`` is False) and time ``backend`` on ``point`` with ``timer`` (see
    :data:`gemmzoo.measure.TIMERS`); failures become a status, not an exception."""
    accuracy = str(accuracy_of(backend))
    if point.dtype not in backend.dtypes:
        return BenchResult(backend.name, backend.device, point, UNSUPPORTED,
                           detail=f"{backend.name} does not compute {point.dtype}", accuracy=accuracy)
    try:
        result = measure(backend, point, budget_s=budget_s, verify=verify, timer=timer)
    except WrongResultError as error:
        return BenchResult(backend.name, backend.device, point, WRONG, detail=str(error), accuracy=accuracy)
    except Exception as error:  # a crashing backend must not end the whole run
        detail = f"{type(error).__name__}: {error}"
        return BenchResult(backend.name, backend.device, point, ERROR, detail=detail, accuracy=accuracy)
    peak = peak_tflops(device_info(backend.device)["device_name"], point.dtype)
    return BenchResult(backend.name, backend.device, point, OK, result, peak_tflops=peak, accuracy=accuracy)


def run_bench(backends: Sequence[Any], points: Sequence[GridPoint], budget_s: float = 0.2,
              on_result: Callable[[BenchResult], None] | None = None) -> list[BenchResult]:
    """Every backend on every point, point by point; ``on_result`` hears each as it finishes."""
    results = []
    for point in points:
        for backend in backends:
            result = bench_one(backend, point, budget_s)
            results.append(result)
            if on_result is not None:
                on_result(result)
    return results


def environment(backends: Sequence[Any]) -> dict[str, Any]:
    """Device names, driver and library versions of the devices these backends use."""
    devices = sorted({backend.device for backend in backends})
    return {device: device_info(device) for device in devices}
