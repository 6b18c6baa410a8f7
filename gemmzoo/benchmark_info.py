"""What one GEMM benchmark records in pytest-benchmark's ``extra_info``: the problem, device,
host and caller time per call, speed, share of the roofline, error, device and versions."""

from __future__ import annotations

from typing import Any

from gemmzoo.contract.accuracy import accuracy_of
from gemmzoo.measure import Measurement, Timing
from gemmzoo.measure.device import device_info
from gemmzoo.measure.roofline import roofline
from gemmzoo.problems.grids import GridPoint


def extra_info(backend: Any, point: GridPoint, error_ratio: float, rel_error: float,
               median_s: float | None, timing: str, host: Timing | None = None) -> dict[str, Any]:
    """The ``extra_info`` of one benchmark: problem, device, host and caller time, speed, share
    of the roofline, error, device, versions.

    ``host`` is the host time per call (``None``: the same as the median, as on the CPU).
    ``peak_percent``, ``peak_tflops`` and the roofline fields are ``None`` on devices gemmzoo has
    no figures for (see :mod:`gemmzoo.measure.device` and :mod:`gemmzoo.measure.roofline`).
    """
    info = device_info(backend.device)
    record: dict[str, Any] = {
        "backend": backend.name,
        "m": point.m, "n": point.n, "k": point.k, "dtype": point.dtype, "layout": point.layout,
        "accuracy": str(accuracy_of(backend)),
        "flops": point.flops,
    }
    if median_s:
        device = Timing.of([median_s], timing)
        measured = Measurement(backend.name, point, device, error_ratio, rel_error, host or device)
        record.update(speed_fields(measured, backend.device, info["device_name"]))
    record.update({
        "error_ratio": error_ratio,
        "rel_error": rel_error,
        "timing": timing,
        "device": backend.device,
        "device_name": info["device_name"],
        "driver": info["driver"],
        "cuda_driver": info["cuda_driver"],
        "libraries": info["libraries"],
    })
    return record


def speed_fields(measured: Measurement, device: str, device_name: str) -> dict[str, Any]:
    """Times, rates and roofline figures of one measurement, as flat fields."""
    roof = roofline(measured.point, measured.timing.median_s, device, device_name)
    tflops = measured.tflops
    return {
        "device_s": measured.timing.median_s,
        "host_s": measured.host_s,
        "caller_s": measured.caller_s,
        "launch_bound": measured.launch_bound,
        "tflops": tflops,
        "gflops": tflops * 1e3,
        "caller_tflops": measured.caller_tflops,
        "gbps": roof.gbps,
        "peak_tflops": roof.peak_tflops,
        "peak_percent": 100 * tflops / roof.peak_tflops if roof.peak_tflops else None,
        "bandwidth_gbps": roof.bandwidth_gbps,
        "roofline_bound": roof.bound,
        "roofline_percent": roof.percent,
    }
