"""What a measurement ran on: device name, driver and library versions, and the device's peak rate.

Nothing here imports torch, cupy or triton unless the caller already uses a CUDA backend (then
torch or cupy is loaded anyway).
"""

from __future__ import annotations

import ctypes
import functools
import importlib.util
import os
import platform
import sys
from collections.abc import Sequence
from importlib import metadata
from typing import Any

# Datasheet dense peaks in TFLOPS (no sparsity), per gemmzoo dtype. The H200 is the H100 SXM chip
# with more and faster memory, so its compute peaks are the same.
_H100_SXM = {"float16": 989.0, "bfloat16": 989.0, "tf32": 495.0, "float32": 67.0, "float64": 67.0,
             "float8_e4m3fn": 1979.0}
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


def cpu_model() -> str:
    """The processor's model name from /proc/cpuinfo (x86 and Arm spellings), else what
    :mod:`platform` knows."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as info:
            for line in info:
                if line.lower().startswith(("model name", "hardware", "cpu model")):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def nvidia_driver() -> str | None:
    """The kernel driver version (``570.86.15``) from /proc, without any CUDA library."""
    try:
        with open("/proc/driver/nvidia/version", encoding="utf-8", errors="replace") as text:
            for word in text.readline().split():
                if word[:1].isdigit() and "." in word:
                    return word
    except OSError:
        pass
    return None


#: Where a GPU shows up on Linux before any library is loaded: NVIDIA's driver (its control device,
#: the first GPU, its /proc entry, Jetson's GPU host), AMD's ROCm (torch's ``cuda`` device on ROCm
#: builds) and WSL2's GPU paravirtualisation.
GPU_DEVICE_NODES = ("/dev/nvidiactl", "/dev/nvidia0", "/proc/driver/nvidia", "/dev/nvhost-ctrl-gpu",
                    "/dev/kfd", "/dev/dxg")


def no_gpu_reason(nodes: Sequence[str] = GPU_DEVICE_NODES) -> str | None:
    """Why no CUDA backend can run on this machine, told from the device nodes alone (no library
    loaded, no driver called), or ``None`` where a GPU may be there or the system does not say
    (outside Linux). ``nodes``: the paths looked for (default :data:`GPU_DEVICE_NODES`)."""
    if not sys.platform.startswith("linux"):
        return None
    if any(os.path.exists(node) for node in nodes):
        return None
    return "no GPU on this machine (no NVIDIA, ROCm or WSL GPU device node)"


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


def cuda_properties() -> dict[str, Any]:
    """Name, compute capability and SM count of the current CUDA device, from torch (when it sees
    a GPU) else CuPy; only a placeholder name when neither can tell."""
    if importlib.util.find_spec("torch") is not None:
        import torch

        if torch.cuda.is_available():
            props = torch.cuda.get_device_properties(torch.cuda.current_device())
            return {"name": props.name, "capability": f"{props.major}.{props.minor}",
                    "sms": props.multi_processor_count}
    if importlib.util.find_spec("cupy") is not None:
        try:
            import cupy

            props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
        except Exception:  # no usable device through CuPy either
            pass
        else:
            name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
            return {"name": name, "capability": f"{props['major']}.{props['minor']}",
                    "sms": props["multiProcessorCount"]}
    return {"name": "unknown CUDA device"}


@functools.lru_cache(maxsize=4)
def device_info(device: str) -> dict[str, Any]:
    """``{"device_name", "driver", "cuda_driver", "libraries"}`` for ``"cpu"`` or ``"cuda"``."""
    if device == "cuda":
        name = cuda_properties()["name"]
        driver, cuda = nvidia_driver(), _cuda_driver_api()
    else:
        name, driver, cuda = cpu_model(), None, None
    return {"device_name": name, "driver": driver, "cuda_driver": cuda, "libraries": library_versions()}
