"""gemmzoo's bundled torch plugin: ``torch-cpu``, ``torch`` (cuBLAS) and ``torch-padded`` (cuBLAS
on zero-padded copies, for shapes whose rows are not 16-byte aligned)."""

from __future__ import annotations

from collections.abc import Callable

from gemmzoo import hookimpl
from gemmzoo_torch.backend import TorchBackend, TorchCpuBackend
from gemmzoo_torch.padded import TorchPaddedBackend

__all__ = ["TorchBackend", "TorchCpuBackend", "TorchPaddedBackend", "gemmzoo_register_backends"]


@hookimpl
def gemmzoo_register_backends(register: Callable[[object], None]) -> None:
    """Register ``torch-cpu``, ``torch`` and ``torch-padded``; none imports torch until it is used."""
    register(TorchCpuBackend())
    register(TorchBackend())
    register(TorchPaddedBackend())
