"""gemmzoo: compare GEMM backends side by side and pick the fastest for a problem.

Importing this package imports neither torch, cupy nor triton; plugins load on first use of the
registry. :class:`Session` (see :mod:`gemmzoo.session`) holds the configuration and every cache;
the functions here use the current one.
"""

from __future__ import annotations

from typing import Any

from gemmzoo.config import VERSION
from gemmzoo.contract.backend import Backend, TF32Array
from gemmzoo.contract.dtypes import DTYPES
from gemmzoo.errors import (
    BackendUnavailableError,
    GemmError,
    GemmInputError,
    PluginError,
    PluginWarning,
    UnknownBackendError,
)
from gemmzoo.hookspecs import hookimpl, hookspec
from gemmzoo.plugins.registry import get_registry  # noqa: F401 - the process's registry, for tools and tests

__version__ = VERSION

__all__ = [
    "DTYPES",
    "Backend",
    "BackendUnavailableError",
    "GemmError",
    "GemmInputError",
    "PluginError",
    "PluginWarning",
    "Session",
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
    """Every registered backend of the current session, available or not, in a stable order."""
    from gemmzoo.session import current

    return current().registry.backends()


def get_backend(name: str) -> Any:
    """The backend called ``name`` in the current session; an unknown name raises an error listing
    the known names."""
    from gemmzoo.session import current

    return current().registry.get(name)


def best_backend(shape: Any, dtype: str = "float32", device: str | None = None, **options: Any) -> Any:
    """The fastest conforming available backend for a problem on this machine.

    ``shape`` is ``(M, N, K)`` for a plain product (see :func:`gemmzoo.tuning.select.best_backend`
    for ``measure``, ``layout``, ``accuracy`` and ``by``), or the text form of a problem of another
    class (``"bmm:8x1024x1024x128"``, ``"scaled:rowwise:4096x4096x4096"``,
    ``"grouped:g8:4096x7168:m=512,0,..."``; docs/classes.md): the winner ``gemmzoo tune`` stored
    for it, else the first available candidate that passed the class's conformance cases."""
    if isinstance(shape, str):
        from gemmzoo.dispatch.classes import best_class_backend

        if options:
            raise TypeError(f"gemmzoo.best_backend: {sorted(options)} apply to (M, N, K) shapes only")
        return best_class_backend(shape, dtype, device)
    from gemmzoo.tuning.select import best_backend as best_gemm

    return best_gemm(shape, dtype, device, **options)


def __getattr__(name: str) -> Any:
    # matmul, scaled_mm, grouped_mm and Session load on first use, so `import gemmzoo`
    # opens no database.
    if name == "Session":
        from gemmzoo import session

        found = session.Session
    elif name == "matmul":
        from gemmzoo.dispatch.matmul import matmul as found
    elif name == "scaled_mm":
        from gemmzoo.dispatch.classes import scaled_mm as found
    elif name == "grouped_mm":
        from gemmzoo.dispatch.classes import grouped_mm as found
    else:
        raise AttributeError(f"module 'gemmzoo' has no attribute {name!r}")
    globals()[name] = found
    return found
