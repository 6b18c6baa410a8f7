"""The engine of ``gemmzoo bench``: every backend on every grid point, checked then timed.

Each (backend, point) becomes a :class:`BenchResult` whose status says what happened: ``ok``
(conforming result, timed), ``wrong`` (outside the conformance bound: never shown as a speed),
``error`` (the backend raised), ``timeout`` (the check and timing took longer than the time limit,
see :mod:`gemmzoo.plugins.watchdog`: the backend is then quarantined and its later points are ``timeout``
at once), or ``unsupported`` (the backend does not declare the dtype).
A result has device, host and caller time per call (see :mod:`gemmzoo.measure`) and where the
device is known its roofline (:mod:`gemmzoo.measure.roofline`). With ``rounds`` > 1 the backends are
measured in interleaved rounds (each round visits every point and, in a rotated order, every
backend) and each backend's samples of all rounds are merged, so a drift of the machine during
the run falls on every backend alike.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from gemmzoo.contract.accuracy import accuracy_of
from gemmzoo.measure import NOISE_TARGET, Measurement, WrongResultError, measure
from gemmzoo.measure.device import device_info, peak_tflops
from gemmzoo.measure.roofline import Roofline, roofline
from gemmzoo.plugins.inert import inert
from gemmzoo.plugins.watchdog import BackendTimeoutError, idle_workers_ended
from gemmzoo.plugins.watchdog import call as watched
from gemmzoo.problems.grids import GridPoint

OK, WRONG, ERROR, UNSUPPORTED, TIMEOUT = "ok", "wrong", "error", "unsupported", "timeout"
#: How far below the roofline floor a time may read (clock and datasheet rounding) before it is
#: flagged as impossible.
ROOFLINE_SLACK = 0.05


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
    #: The backend's accuracy class (:mod:`gemmzoo.contract.accuracy`), whose bound judged the result.
    accuracy: str = "componentwise"
    roof: Roofline | None = None

    @property
    def beyond_roofline(self) -> bool:
        """Whether the time is below the device's roofline floor by more than
        :data:`ROOFLINE_SLACK`: no GEMM can do that, so the work was not done or not timed."""
        roof = self.roof
        return bool(self.status == OK and roof is not None and roof.efficiency is not None
                    and roof.efficiency > 1 + ROOFLINE_SLACK)

    @property
    def caller_s(self) -> float | None:
        """The larger of device and host time per call; ``None`` unless the status is ``ok``."""
        return self.measurement.caller_s if self.status == OK and self.measurement else None

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
        """A flat, JSON-ready record: times in seconds per call (``median_s`` is device time)."""
        timing = self.measurement.timing if self.measurement else None
        host = self.measurement.host if self.measurement else None
        roof = self.roof
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
            "host_s": host.median_s if host else None,
            "host_q1_s": host.q1_s if host else None,
            "host_q3_s": host.q3_s if host else None,
            "caller_s": self.caller_s,
            "launch_bound": self.measurement.launch_bound if self.measurement else None,
            "tflops": self.tflops,
            "caller_tflops": self.measurement.caller_tflops if self.measurement else None,
            "gbps": roof.gbps if roof else None,
            "bandwidth_gbps": roof.bandwidth_gbps if roof else None,
            "roofline_bound": roof.bound if roof else None,
            "roofline_percent": roof.percent if roof else None,
            "peak_tflops": self.peak_tflops,
            "peak_percent": self.peak_percent,
            "error_ratio": self.measurement.error_ratio if self.measurement else None,
            **_trust_fields(self.measurement),
            "beyond_roofline": self.beyond_roofline,
            "rel_error": self.measurement.rel_error if self.measurement else None,
            "detail": self.detail,
        }


def _trust_fields(measured: Measurement | None) -> dict[str, Any]:
    """How far a result can be trusted: the median's noise and whether it met its target, the
    thread policy it was timed under, and the SM clock meanwhile (see docs/benchmarks.md)."""
    timing = measured.timing if measured else None
    threads = measured.threads.as_dict() if measured and measured.threads else {}
    clocks = measured.clocks.as_dict() if measured and measured.clocks else {}
    shared = measured.contention.as_dict() if measured and measured.contention else {}
    calibration = measured.calibration.as_dict() if measured and measured.calibration else {}
    return {
        "noise": timing.noise if timing and math.isfinite(timing.noise) else None,
        "noise_target": timing.target if timing else None,
        "converged": timing.converged if timing else None,
        "threads": threads.get("threads"), "thread_policy": threads.get("thread_policy"),
        "thread_pools": threads.get("thread_pools"),
        "sm_clock_mhz": clocks.get("sm_clock_mhz"),
        "default_sm_clock_mhz": clocks.get("default_sm_clock_mhz"),
        "throttled": clocks.get("throttled"),
        "cpu_share": shared.get("cpu_share"), "others_load": shared.get("others_load"),
        "contended": shared.get("contended"),
        **_finite_values(calibration),
    }


def _finite_values(fields: dict[str, Any]) -> dict[str, Any]:
    """``fields`` with a non-finite number (an unknown noise) as ``None``."""
    return {key: None if isinstance(value, float) and not math.isfinite(value) else value
            for key, value in fields.items()}


def bench_one(backend: Any, point: GridPoint, budget_s: float = 0.2, timer: str = "events",
              verify: bool = True, threads: int | None = None,
              noise_target: float = NOISE_TARGET, timeout: float | str | None = "default",
              calibrate: bool = True) -> BenchResult:
    """Check (unless ``verify`` is False) and time ``backend`` on ``point`` with ``timer`` (see
    :data:`gemmzoo.measure.TIMERS`) under the thread policy (``threads``, see
    :mod:`gemmzoo.measure.threads`), sampling until the median's noise is at most ``noise_target``
    or the budget is spent (0: the whole budget), within ``timeout`` seconds (``"default"``: the
    watchdog's, :func:`gemmzoo.plugins.watchdog.default_timeout`; ``None``: no limit); failures become a
    status, not an exception. A CPU timing records the machine's calibration beside its samples
    (``calibrate``, :mod:`gemmzoo.measure.calibration`), which ``gemmzoo compare`` judges against."""
    accuracy = str(accuracy_of(backend))
    if point.dtype not in backend.dtypes:
        return BenchResult(backend.name, backend.device, point, UNSUPPORTED,
                           detail=f"{backend.name} does not compute {point.dtype}", accuracy=accuracy)
    try:
        result = watched(backend, f"check and timing at {point.id}", measure, backend, point,
                         budget_s=budget_s, verify=verify, timer=timer, threads=threads,
                         noise_target=noise_target, calibrate=calibrate, timeout=timeout)
    except WrongResultError as error:
        return BenchResult(backend.name, backend.device, point, WRONG, detail=_text(error), accuracy=accuracy)
    except BackendTimeoutError as error:
        return BenchResult(backend.name, backend.device, point, TIMEOUT, detail=_text(error),
                           accuracy=accuracy)
    except Exception as error:  # a crashing backend must not end the whole run
        detail = f"{type(error).__name__}: {_text(error)}"
        return BenchResult(backend.name, backend.device, point, ERROR, detail=detail, accuracy=accuracy)
    return _ok(backend, point, result)


def _text(error: BaseException) -> str:
    """The error's message, its control characters written out (:mod:`gemmzoo.plugins.inert`)."""
    try:
        return inert(str(error), lines=True)
    except Exception:  # an exception whose own __str__ raises
        return "<unprintable>"


def _ok(backend: Any, point: GridPoint, result: Measurement) -> BenchResult:
    name = device_info(backend.device)["device_name"]
    roof = roofline(point, result.timing.median_s, backend.device, name)
    return BenchResult(backend.name, backend.device, point, OK, result,
                       peak_tflops=peak_tflops(name, point.dtype), roof=roof,
                       accuracy=str(accuracy_of(backend)))


class BenchInterrupted(KeyboardInterrupt):
    """Ctrl-C during :func:`run_bench`, with the results measured so far (each merged over the
    rounds it had), in the order the run would have returned them."""

    def __init__(self, results: list[BenchResult]) -> None:
        super().__init__()
        self.results = results


@idle_workers_ended()
def run_bench(backends: Sequence[Any], points: Sequence[GridPoint], budget_s: float = 0.2,
              on_result: Callable[[BenchResult], None] | None = None, timer: str = "events",
              rounds: int = 1, threads: int | None = None, noise_target: float = NOISE_TARGET,
              timeout: float | str | None = "default",
              verdict: Callable[[Any, str], tuple[str, str]] | None = None) -> list[BenchResult]:
    """Every backend on every point, point by point, in ``rounds`` interleaved rounds of
    ``budget_s / rounds`` each; ``on_result`` hears each result as its last round finishes.
    A backend is checked in the first round only; one that fails there is not timed again.
    Each backend's check and timing at a point has ``timeout`` seconds (see :func:`bench_one`).
    Ctrl-C raises :class:`BenchInterrupted` with the results so far.
    ``verdict(backend, dtype)`` (``(answer, why_not)``: :func:`gemmzoo.tuning.verdicts.passing`)
    is asked before a backend is first timed on a dtype: one without a pass is ``wrong`` at every
    point of that dtype (``timeout`` when its suite overran) and never timed."""
    rounds = max(1, rounds)
    final: dict[tuple[str, GridPoint], BenchResult] = {}
    try:
        _rounds(backends, points, budget_s, on_result, timer, rounds, threads, noise_target, timeout, final,
                verdict)
    except KeyboardInterrupt as stop:
        raise BenchInterrupted([final[(backend.name, point)] for point in points for backend in backends
                                if (backend.name, point) in final]) from stop
    return [final[(backend.name, point)] for point in points for backend in backends]


def _rounds(backends: Sequence[Any], points: Sequence[GridPoint], budget_s: float,
            on_result: Callable[[BenchResult], None] | None, timer: str, rounds: int, threads: int | None,
            noise_target: float, timeout: float | str | None,
            final: dict[tuple[str, GridPoint], BenchResult],
            verdict: Callable[[Any, str], tuple[str, str]] | None = None) -> None:
    """:func:`run_bench`'s rounds, each result (merged over its rounds so far) kept in ``final``."""
    verdicts: dict[tuple[str, str], tuple[str, str]] = {}
    for number in range(rounds):
        last = number == rounds - 1
        for point in points:
            shift = number % len(backends) if backends else 0
            for backend in [*backends[shift:], *backends[:shift]]:
                slot = (backend.name, point)
                earlier = final.get(slot)
                if earlier is not None and earlier.status != OK:
                    if last and on_result is not None:
                        on_result(earlier)
                    continue
                if earlier is None and verdict is not None and point.dtype in backend.dtypes:
                    asked = (backend.name, point.dtype)
                    if asked not in verdicts:
                        verdicts[asked] = verdict(backend, point.dtype)
                    answer, why_not = verdicts[asked]
                    if answer != "passed":
                        status = TIMEOUT if answer == "timed out" else WRONG
                        final[slot] = BenchResult(backend.name, backend.device, point, status,
                                                  detail=inert(why_not, lines=True),
                                                  accuracy=str(accuracy_of(backend)))
                        if last and on_result is not None:
                            on_result(final[slot])
                        continue
                result = bench_one(backend, point, budget_s / rounds, timer, verify=earlier is None,
                                   threads=threads, noise_target=noise_target, timeout=timeout)
                if earlier is not None and result.status == OK and earlier.measurement and result.measurement:
                    merged = earlier.measurement.merged(result.measurement)
                    result = _ok(backend, point, merged)
                elif earlier is not None and result.status == OK:
                    result = earlier
                final[slot] = result
                if last and on_result is not None:
                    on_result(result)


def environment(backends: Sequence[Any]) -> dict[str, Any]:
    """Device names, driver and library versions of the devices these backends use."""
    devices = sorted({backend.device for backend in backends})
    return {device: device_info(device) for device in devices}
