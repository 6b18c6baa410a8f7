"""gemmzoo's bundled NumPy backend plugin."""

from __future__ import annotations

from collections.abc import Callable

from gemmzoo import hookimpl
from gemmzoo_numpy.backend import NumpyBackend

__all__ = ["NumpyBackend", "gemmzoo_register_backends"]


@hookimpl
def gemmzoo_register_backends(register: Callable[[object], None]) -> None:
    """Register the ``numpy`` backend."""
    register(NumpyBackend())
