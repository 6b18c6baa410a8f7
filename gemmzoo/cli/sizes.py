"""Memory a run will need, checked before any work: a problem too large for this machine is
refused with its estimate instead of running until it fails.

The estimate of one point on one backend: on the host, the random operands (fp32), their float64
copies and absolute values and the two float64 reference products (``A·B`` and ``|A|·|B|``: see
:mod:`gemmzoo.measure`) and the result's host copy; where the backend computes (host or GPU), A,
B and C in the backend's dtype. It is a floor: libraries add workspaces of their own.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from gemmzoo.problems.grids import GridPoint

#: Bytes per element of each dtype mode as a backend stores it (tf32 is fp32 storage).
_ITEMSIZE = {"float16": 2, "bfloat16": 2, "float32": 4, "tf32": 4, "float64": 8, "float8_e4m3fn": 1}


@dataclass(frozen=True)
class Need:
    """Bytes one point on one backend needs on the host and on its device (0 for a CPU backend)."""

    host: int
    device: int


def need(point: GridPoint, device: str) -> Need:
    """The estimate of :mod:`this module <gemmzoo.cli.sizes>` for ``point`` on a ``device`` backend."""
    m, n, k = point.m, point.n, point.k
    operands, product = m * k + k * n, m * n
    item = _ITEMSIZE.get(point.dtype, 8)
    host = operands * (4 + 8 + 8) + product * (8 + 8 + 4)
    native = (operands + product) * item
    return Need(host + native, 0) if device == "cpu" else Need(host, native)


def host_free() -> int | None:
    """Bytes of memory available to a new allocation on this host, or ``None`` when unknown."""
    try:
        with open("/proc/meminfo") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def gpu_free() -> int | None:
    """Free bytes on the current CUDA device as torch sees them, or ``None`` without torch or GPU."""
    try:
        import torch

        if not torch.cuda.is_available():
            return None
        free, _total = torch.cuda.mem_get_info()
        return int(free)
    except Exception:  # no torch, or a driver that cannot answer: nothing to check against
        return None


def _gb(size: int) -> str:
    return f"{size / 1e9:.3g} GB"


def too_large(points: Sequence[GridPoint], backends: Sequence[Any]) -> str | None:
    """Why the largest point cannot run here (one line naming shape, backend, estimate and what is
    free), or ``None`` when every point fits."""
    host, gpu = host_free(), None
    devices = {b.device for b in backends}
    if "cuda" in devices:
        gpu = gpu_free()
    for point in sorted(points, key=lambda p: -(p.m * p.n + p.m * p.k + p.k * p.n)):
        for device in sorted(devices):
            estimate = need(point, device)
            if host is not None and estimate.host > host:
                where = "on the host" + (" (the backend's operands included)" if device == "cpu" else "")
                return (f"{point.m}x{point.n}x{point.k} {point.dtype} needs about {_gb(estimate.host)} "
                        f"{where}; {_gb(host)} is available: choose smaller shapes")
            if gpu is not None and estimate.device > gpu:
                return (f"{point.m}x{point.n}x{point.k} {point.dtype} needs about {_gb(estimate.device)} "
                        f"on the GPU; {_gb(gpu)} is free: choose smaller shapes")
    return None
