"""gemmzoo's bundled torch plugin: ``torch-cpu`` and ``torch`` (cuBLAS)."""

from __future__ import annotations

from collections.abc import Callable

from gemmzoo import hookimpl
from gemmzoo_torch.backend import TorchBackend, TorchCpuBackend

__all__ = ["TorchBackend", "TorchCpuBackend", "gemmzoo_register_backends"]


@hookimpl
def gemmzoo_register_backends(register: Callable[[object], None]) -> None:
    """Register ``torch-cpu`` and ``torch``; neither imports torch until it is used."""
    register(TorchCpuBackend())
    register(TorchBackend())
