"""gemmzoo-blocked: a cache-blocked pure-NumPy GEMM backend, registered as a gemmzoo plugin."""

from __future__ import annotations

from collections.abc import Callable

from gemmzoo import hookimpl
from gemmzoo_blocked.backend import BlockedBackend

__all__ = ["BlockedBackend", "gemmzoo_register_backends"]


@hookimpl
def gemmzoo_register_backends(register: Callable[[object], None]) -> None:
    """Register the ``numpy-blocked`` backend with gemmzoo."""
    register(BlockedBackend())
