"""gemmzoo's bundled torch plugin: ``torch-cpu``, ``torch`` (cuBLAS), ``torch-padded`` (cuBLAS
on zero-padded copies, for shapes whose rows are not 16-byte aligned), and ``torch-compile`` /
``torch-compile-cuda`` (TorchInductor max-autotune, compiled per problem), and ``nvmath-cublaslt``
(cuBLASLt through nvmath-python, its algorithms autotuned per problem)."""

from __future__ import annotations

from collections.abc import Callable

from gemmzoo import hookimpl
from gemmzoo_torch.backend import TorchBackend, TorchCpuBackend
from gemmzoo_torch.compiled import TorchCompileBackend, TorchCompileCudaBackend
from gemmzoo_torch.nvmath_cublaslt import NvmathCublasLtBackend
from gemmzoo_torch.padded import TorchPaddedBackend

__all__ = [
    "NvmathCublasLtBackend",
    "TorchBackend",
    "TorchCompileBackend",
    "TorchCompileCudaBackend",
    "TorchCpuBackend",
    "TorchPaddedBackend",
    "gemmzoo_register_backends",
]


@hookimpl
def gemmzoo_register_backends(register: Callable[[object], None]) -> None:
    """Register the torch backends; none imports torch until it is used."""
    register(TorchCpuBackend())
    register(TorchBackend())
    register(TorchPaddedBackend())
    register(TorchCompileBackend())
    register(TorchCompileCudaBackend())
    register(NvmathCublasLtBackend())
