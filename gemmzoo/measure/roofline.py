"""Speed of light: how close a GEMM's time is to the device's floor for it.

The floor of a problem is ``max(flops / peak, bytes / bandwidth)``: the device cannot compute
faster than its datasheet peak for the dtype (:func:`gemmzoo.measure.device.peak_tflops`) nor move A, B
and C through memory faster than its copy bandwidth. The bandwidth is measured once per device
(a device-to-device copy, read and write counted) and stored in the tuning database, keyed by
the device fingerprint. Which term is the larger says which bound applies: ``"compute"`` or
``"memory"``. Efficiency is floor / measured time.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

from gemmzoo.measure.device import peak_tflops
from gemmzoo.problems.grids import GridPoint

#: Bytes per element of A and B, and of C, for each dtype.
ELEMENT_BYTES: dict[str, tuple[int, int]] = {
    "float16": (2, 2), "bfloat16": (2, 2), "float32": (4, 4), "tf32": (4, 4), "float64": (8, 8),
    "float8_e4m3fn": (1, 2),
}
COPY_BYTES = 1 << 30  # per buffer: far beyond any L2, so the copy runs from and to HBM


def bytes_moved(point: GridPoint) -> int:
    """Bytes a GEMM must read and write at least: A and B once, C once."""
    operand, result = ELEMENT_BYTES.get(point.dtype, (4, 4))
    return operand * (point.m * point.k + point.k * point.n) + result * point.m * point.n


@dataclass(frozen=True)
class Roofline:
    """One measured time against the device's floor; ``None`` fields where gemmzoo does not know
    the device's peak or bandwidth."""

    gbps: float | None
    peak_tflops: float | None
    bandwidth_gbps: float | None
    floor_s: float | None
    bound: str | None
    efficiency: float | None = None

    @property
    def percent(self) -> float | None:
        """Floor over measured time, in percent."""
        return None if self.efficiency is None else 100 * self.efficiency


def roofline(point: GridPoint, seconds: float, device: str, device_name: str,
             bandwidth_bytes_per_s: float | None = None) -> Roofline:
    """``seconds`` for ``point`` against the roofline of the device. The bandwidth is looked up
    (or measured once) with :func:`bandwidth` unless given."""
    moved = bytes_moved(point)
    gbps = moved / seconds / 1e9 if seconds > 0 else None
    peak = peak_tflops(device_name, point.dtype)
    if bandwidth_bytes_per_s is None and peak is not None:  # no roofline without a peak: skip the copy
        bandwidth_bytes_per_s = bandwidth(device)
    compute_s = point.flops / (peak * 1e12) if peak else None
    memory_s = moved / bandwidth_bytes_per_s if bandwidth_bytes_per_s else None
    if compute_s is None or memory_s is None or seconds <= 0:
        known = bandwidth_bytes_per_s / 1e9 if bandwidth_bytes_per_s else None
        return Roofline(gbps, peak, known, None, None)
    floor = max(compute_s, memory_s)
    return Roofline(gbps, peak, bandwidth_bytes_per_s / 1e9, floor,
                    "compute" if compute_s >= memory_s else "memory", floor / seconds)


def bandwidth(device: str) -> float | None:
    """The copy bandwidth of ``device`` in bytes per second: from the current session's tuning
    database, else measured now and stored; kept in the session's ``facts``. ``None`` for the CPU
    (no roofline is claimed there) and when no CUDA framework can measure it."""
    if device != "cuda":
        return None
    from gemmzoo.tuning.state import current

    facts = current().facts
    key = ("copy bandwidth", device)
    if key not in facts:
        facts[key] = _stored_or_measured(device)
    return facts[key]


def _stored_or_measured(device: str) -> float | None:
    from gemmzoo.tuning import state
    from gemmzoo.tuning.fingerprint import device_fingerprint

    fingerprint = device_fingerprint(device)
    store = state.store()
    stored = store.bandwidth(fingerprint)
    if stored is not None:
        return stored
    try:
        measured = measure_copy_bandwidth()
    except Exception:  # no usable GPU framework: no roofline, not an error
        return None
    store.add_bandwidth(fingerprint, measured)
    return measured


def measure_copy_bandwidth(repeats: int = 10, gpu: Any = None) -> float:
    """Bytes per second (read plus write) of a device-to-device copy of :data:`COPY_BYTES`,
    the median of ``repeats`` copies timed with CUDA events."""
    from gemmzoo.measure.gpu_stream import default_gpu, torch_cuda

    gpu = gpu or default_gpu()
    if torch_cuda():
        import torch

        source = torch.empty(COPY_BYTES, dtype=torch.uint8, device="cuda")
        target = torch.empty_like(source)

        def copy() -> None:
            target.copy_(source)
    else:
        import cupy

        source = cupy.empty(COPY_BYTES, dtype=cupy.uint8)
        target = cupy.empty_like(source)

        def copy() -> None:
            cupy.copyto(target, source)
    copy()
    pairs = []
    for _ in range(repeats):
        start, end = gpu.pair()
        start.record()
        copy()
        end.record()
        pairs.append((start, end))
    gpu.synchronize()
    seconds = statistics.median(gpu.elapsed_s(start, end) for start, end in pairs)
    return 2 * COPY_BYTES / seconds
