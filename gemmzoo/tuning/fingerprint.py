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

from gemmzoo.measure.device import cpu_model, cuda_properties, nvidia_driver

# Frameworks whose upgrade can change any backend's speed or results. Every installed one is part
# of every backend's versions: a third-party backend may use any of them, and discarding a valid
# row is cheap while trusting a stale one is wrong.
FRAMEWORKS = ("numpy", "torch", "triton", "jax", "jaxlib")
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
    """Installed versions of numpy, torch, triton, jax and cupy (found without importing them)."""
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
    """Canonical JSON of what a measurement of ``backend_name`` depends on: gemmzoo, the
    distribution that provides the backend, every installed framework, and the digest of the
    backend's code (:mod:`gemmzoo.plugins.code_digest`: an edit of an editable install is a new backend)."""
    from gemmzoo.config import VERSION

    versions = {"gemmzoo": VERSION, **framework_versions()}
    try:
        provider = registry.provider(backend_name)
    except Exception:  # a backend not from the registry: gemmzoo and the frameworks only
        provider = None
    if provider is not None:
        versions["plugin"] = f"{provider.distribution or provider.name} {provider.version or '?'}"
        try:
            versions["code"] = registry.code_digest(backend_name)
        except Exception:  # no readable code: the key says so, and never matches a readable one
            versions["code"] = "unknown"
    return canonical(versions)


def _driver() -> str:
    """The kernel driver version, else CuPy's driver API number, else ``unknown``."""
    found = nvidia_driver()
    if found is not None:
        return found
    if importlib.util.find_spec("cupy") is not None:
        try:
            import cupy

            return str(cupy.cuda.runtime.driverGetVersion())
        except Exception:
            pass
    return "unknown"


@functools.lru_cache(maxsize=4)
def device_fingerprint(device: str) -> str:
    """Canonical JSON describing the ``"cpu"`` (model, cores) or current ``"cuda"`` device
    (name, compute capability, SM count, driver)."""
    if device == "cpu":
        return canonical({"kind": "cpu", "model": cpu_model(), "cores": os.cpu_count() or 0,
                          "machine": platform.machine()})
    if device == "cuda":
        return canonical({"kind": "cuda", **cuda_properties(), "driver": _driver()})
    raise ValueError(f"unknown device {device!r}; known: cpu, cuda")
