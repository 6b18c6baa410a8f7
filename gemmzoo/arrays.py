"""What gemmzoo knows of the array libraries it takes: which library an array type belongs to,
a gemmzoo dtype name of an array, its device, and which library a backend computes on.

Each answer is learned once per type (or backend and dtype) and kept for the process: these are
facts of the loaded libraries and registered backends, which are the process's.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from gemmzoo.contract.backend import TF32Array
from gemmzoo.contract.dtypes import DTYPES
from gemmzoo.plugins.registry import probe_timeout
from gemmzoo.plugins.watchdog import call as watched

_KINDS: dict[type, str] = {}
_DTYPE_NAMES: dict[Any, str | None] = {}
_NATIVE: dict[tuple[int, str], str | None] = {}
_LIBRARIES = ("numpy", "torch", "cupy")


def array_kind(array_type: type) -> str | None:
    """``"numpy"``, ``"torch"`` or ``"cupy"`` for those libraries' array types, else ``None``."""
    try:
        return _KINDS[array_type]
    except KeyError:
        root = array_type.__module__.partition(".")[0]
        kind = root if root in _LIBRARIES and hasattr(array_type, "__dlpack__") else None
        if kind == "torch" and not _is_tensor_type(array_type):
            kind = None
        _KINDS[array_type] = kind  # type: ignore[assignment]
        return kind


def _is_tensor_type(array_type: type) -> bool:
    import torch

    return issubclass(array_type, torch.Tensor)


def dtype_of(array: Any) -> str | None:
    """The gemmzoo dtype name of a NumPy, CuPy or torch array, or ``None`` if it is not one."""
    key = array.dtype
    try:
        return _DTYPE_NAMES[key]
    except KeyError:
        name = str(key).removeprefix("torch.")
        found = name if name in DTYPES and name != "tf32" else None
        _DTYPE_NAMES[key] = found  # type: ignore[assignment]
        return found


def device_of(array: Any, kind: str) -> str:
    """``"cpu"`` or ``"cuda"``."""
    if kind == "numpy":
        return "cpu"
    if kind == "cupy":
        return "cuda"
    return "cuda" if array.is_cuda else "cpu"


def native_kind(backend: Any, dtype: str) -> str | None:
    """Which library's arrays ``backend`` computes on for ``dtype`` (learned once from a 1x1
    ``from_numpy``), or ``None`` when they are none of NumPy, torch and CuPy, or when the probe
    raises or overruns the watchdog's limit (:mod:`gemmzoo.plugins.watchdog`; a backend of another
    distribution only)."""
    key = (id(backend), dtype)
    try:
        return _NATIVE[key]
    except KeyError:
        try:
            probe = watched(backend, "from_numpy(1x1)", backend.from_numpy, np.ones((1, 1), dtype=np.float32),
                            dtype, timeout=probe_timeout(backend))
        except Exception:  # a broken backend computes on nothing gemmzoo can hand it directly
            probe = None
        if isinstance(probe, TF32Array):
            probe = probe.data
        kind = _NATIVE[key] = array_kind(type(probe))
        return kind
