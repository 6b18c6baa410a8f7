"""gemmzoo's bundled CuPy backend plugin."""

from __future__ import annotations

from collections.abc import Callable

from gemmzoo import hookimpl
from gemmzoo_cupy.backend import CupyBackend

__all__ = ["CupyBackend", "gemmzoo_register_backends"]


@hookimpl
def gemmzoo_register_backends(register: Callable[[object], None]) -> None:
    """Register the ``cupy`` backend; cupy is imported only when it is used."""
    register(CupyBackend())
