"""What a measurement ran on: device name, driver and library versions, and the device's peak rate.

Nothing here imports torch, cupy or triton unless the caller already uses a CUDA backend (then
torch or cupy is loaded anyway).
"""

from __future__ import annotations

import ctypes
import functools
import platform
from importlib import metadata
from typing import Any

# Datasheet dense peaks in TFLOPS (no sparsity), per gemmzoo dtype. The H200 is the H100 SXM chip
# with more and faster memory, so its compute peaks are the same.
_H100_SXM = {"float16": 989.0, "bfloat16": 989.0, "tf32": 495.0, "float32": 67.0, "float64": 67.0}
PEAK_TFLOPS: dict[str, dict[str, float]] = {
    "H100 SXM": _H100_SXM,
    "H200": _H100_SXM,
}

_LIBRARIES = ("numpy", "torch", "triton", "cupy-cuda12x", "cupy-cuda13x", "cupy")


def peak_key(device_name: str) -> str | None:
    """The :data:`PEAK_TFLOPS` entry for a device name, or ``None`` when gemmzoo has no table for it.

    ``NVIDIA H100 80GB HBM3`` is the SXM part; the PCIe and NVL parts have other peaks and no
    entry (so no percentage is claimed for them).
    """
    name = device_name.upper()
    if "H200" in name:
        return "H200"
    if "H100" in name and ("SXM" in name or "HBM3" in name) and "PCIE" not in name and "NVL" not in name:
        return "H100 SXM"
    return None


def peak_tflops(device_name: str, dtype: str) -> float | None:
    """The datasheet dense peak of ``device_name`` for ``dtype``; ``None`` for unknown devices."""
    key = peak_key(device_name)
    return PEAK_TFLOPS[key].get(dtype) if key else None


def library_versions() -> dict[str, str]:
    """Installed versions of the array and kernel libraries gemmzoo's bundled backends use."""
    found = {}
    for name in _LIBRARIES:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    found["python"] = platform.python_version()
    return found


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "cpu"


def _nvidia_driver() -> str | None:
    """The kernel driver version (``570.86.15``) from /proc, without any CUDA library."""
    try:
        with open("/proc/driver/nvidia/version") as text:
            for word in text.readline().split():
                if word[:1].isdigit() and "." in word:
                    return word
    except OSError:
        pass
    return None


def _cuda_driver_api() -> str | None:
    """The CUDA version the driver supports (``12.8``), asked of libcuda directly."""
    try:
        lib = ctypes.CDLL("libcuda.so.1")
        version = ctypes.c_int()
        if lib.cuDriverGetVersion(ctypes.byref(version)) != 0:
            return None
    except (OSError, AttributeError):
        return None
    return f"{version.value // 1000}.{(version.value % 1000) // 10}"


def _cuda_device_name() -> str:
    """The current CUDA device's name from torch (if loaded or installed), else CuPy."""
    try:
        import torch

        if torch.cuda.is_available():
            return str(torch.cuda.get_device_name())
    except ImportError:
        pass
    try:
        import cupy

        props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
        name = props["name"]
        return name.decode() if isinstance(name, bytes) else str(name)
    except Exception:  # no CuPy, or no device it can see
        return "unknown CUDA device"


@functools.lru_cache(maxsize=4)
def device_info(device: str) -> dict[str, Any]:
    """``{"device_name", "driver", "cuda_driver", "libraries"}`` for ``"cpu"`` or ``"cuda"``."""
    if device == "cuda":
        name = _cuda_device_name()
        driver, cuda = _nvidia_driver(), _cuda_driver_api()
    else:
        name, driver, cuda = _cpu_name(), None, None
    return {"device_name": name, "driver": driver, "cuda_driver": cuda, "libraries": library_versions()}
