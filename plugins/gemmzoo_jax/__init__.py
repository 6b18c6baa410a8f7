"""gemmzoo's bundled JAX plugin: ``jax`` (XLA on the host CPU) and ``jax-cuda`` (XLA on a GPU)."""

from __future__ import annotations

from collections.abc import Callable

from gemmzoo import hookimpl
from gemmzoo_jax.backend import JaxBackend, JaxCudaBackend

__all__ = ["JaxBackend", "JaxCudaBackend", "gemmzoo_register_backends"]


@hookimpl
def gemmzoo_register_backends(register: Callable[[object], None]) -> None:
    """Register ``jax`` and ``jax-cuda``; neither imports jax until it is used."""
    register(JaxBackend())
    register(JaxCudaBackend())
