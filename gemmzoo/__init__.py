"""gemmzoo: compare GEMM backends side by side and pick the fastest for a problem.

Importing this package imports neither torch, cupy nor triton; plugins load on first use of the
registry.
"""

from __future__ import annotations

from typing import Any

from gemmzoo.backend import Backend, TF32Array
from gemmzoo.dtypes import DTYPES
from gemmzoo.errors import (
    BackendUnavailableError,
    GemmError,
    GemmInputError,
    PluginError,
    PluginWarning,
    UnknownBackendError,
)
from gemmzoo.hookspecs import hookimpl, hookspec
from gemmzoo.registry import get_registry

__version__ = "0.1.0"

__all__ = [
    "DTYPES",
    "Backend",
    "BackendUnavailableError",
    "GemmError",
    "GemmInputError",
    "PluginError",
    "PluginWarning",
    "TF32Array",
    "UnknownBackendError",
    "__version__",
    "backends",
    "best_backend",
    "get_backend",
    "grouped_mm",
    "hookimpl",
    "hookspec",
    "matmul",
    "scaled_mm",
]


def backends() -> list[Any]:
    """Every registered backend, available or not, in a stable order."""
    return get_registry().backends()


def get_backend(name: str) -> Any:
    """The backend called ``name``; an unknown name raises an error listing the known names."""
    return get_registry().get(name)


def __getattr__(name: str) -> Any:
    # best_backend, matmul, scaled_mm and grouped_mm load on first use, so `import gemmzoo` opens no database.
    if name == "best_backend":
        from gemmzoo.tuning.select import best_backend as found
    elif name == "matmul":
        from gemmzoo.dispatch import matmul as found
    elif name == "scaled_mm":
        from gemmzoo.class_api import scaled_mm as found
    elif name == "grouped_mm":
        from gemmzoo.class_api import grouped_mm as found
    else:
        raise AttributeError(f"module 'gemmzoo' has no attribute {name!r}")
    globals()[name] = found
    return found
