"""What a stored measurement is only valid for: the device it ran on and the library versions.

Both are canonical JSON strings (sorted keys, no spaces), so the database compares them with
plain equality. A row whose device or versions differ from the current ones is never an answer.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import platform
from importlib import metadata
from typing import Any

# Frameworks whose upgrade can change any backend's speed or results. Every installed one is part
# of every backend's versions: a third-party backend may use any of them, and discarding a valid
# row is cheap while trusting a stale one is wrong.
FRAMEWORKS = ("numpy", "torch", "triton")
_CUPY_DISTRIBUTIONS = ("cupy", "cupy-cuda13x", "cupy-cuda12x", "cupy-cuda11x", "cupy-rocm-5-0")


def canonical(data: dict[str, Any]) -> str:
    """``data`` as compact JSON with sorted keys: equal dicts give equal strings."""
    return json.dumps(data, sort_keys=True, separators=(",", ":"))


def _version(distribution: str) -> str | None:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


@functools.lru_cache(maxsize=1)
def framework_versions() -> dict[str, str]:
    """Installed versions of numpy, torch, triton and cupy (found without importing them)."""
    found = {name: v for name in FRAMEWORKS if (v := _version(name)) is not None}
    for dist in _CUPY_DISTRIBUTIONS:
        if (v := _version(dist)) is not None:
            found["cupy"] = f"{dist} {v}"
            break
    else:
        if importlib.util.find_spec("cupy") is not None:  # an unusual wheel name: ask the metadata
            dists = metadata.packages_distributions().get("cupy", [])
            if dists and (v := _version(dists[0])) is not None:
                found["cupy"] = f"{dists[0]} {v}"
    return found


def library_versions(backend_name: str, registry: Any) -> str:
    """Canonical JSON of the versions a measurement of ``backend_name`` depends on: gemmzoo, the
    distribution that provides the backend, and every installed framework."""
    from gemmzoo import __version__

    versions = {"gemmzoo": __version__, **framework_versions()}
    try:
        provider = registry.provider(backend_name)
    except Exception:  # a backend not from the registry: gemmzoo and the frameworks only
        provider = None
    if provider is not None:
        versions["plugin"] = f"{provider.distribution or provider.name} {provider.version or '?'}"
    return canonical(versions)


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as info:
            for line in info:
                if line.lower().startswith(("model name", "hardware", "cpu model")):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def _nvidia_driver() -> str:
    """The kernel driver version from /proc, else CuPy's driver API number, else ``unknown``."""
    try:
        with open("/proc/driver/nvidia/version", encoding="utf-8", errors="replace") as info:
            words = info.readline().split()
        for word in words:
            if word[:1].isdigit() and "." in word:
                return word
    except OSError:
        pass
    if importlib.util.find_spec("cupy") is not None:
        try:
            import cupy

            return str(cupy.cuda.runtime.driverGetVersion())
        except Exception:
            pass
    return "unknown"


def _cuda_properties() -> dict[str, Any]:
    """Name, compute capability and SM count of the current CUDA device, from torch or CuPy."""
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
    # A third-party CUDA backend without torch or CuPy: the driver still tells machines apart.
    return {"name": "unknown CUDA device"}


@functools.lru_cache(maxsize=4)
def device_fingerprint(device: str) -> str:
    """Canonical JSON describing the ``"cpu"`` (model, cores) or current ``"cuda"`` device
    (name, compute capability, SM count, driver)."""
    if device == "cpu":
        return canonical({"kind": "cpu", "model": _cpu_model(), "cores": os.cpu_count() or 0,
                          "machine": platform.machine()})
    if device == "cuda":
        return canonical({"kind": "cuda", **_cuda_properties(), "driver": _nvidia_driver()})
    raise ValueError(f"unknown device {device!r}; known: cpu, cuda")
