"""gemmzoo's bundled Triton plugin: ``triton-naive``, ``triton-tiled``, ``triton-grouped``, and
``triton-splitk`` and ``triton-decode`` for skinny products (:mod:`gemmzoo_triton.skinny`).

They run on CUDA GPUs, or on the CPU under Triton's interpreter (``TRITON_INTERPRET=1``). Importing
this package and building the backends imports neither triton nor torch.
"""

from __future__ import annotations

from collections.abc import Callable

from gemmzoo import hookimpl
from gemmzoo_triton.backends import TritonGroupedBackend, TritonNaiveBackend, TritonTiledBackend
from gemmzoo_triton.skinny import TritonDecodeBackend, TritonSplitKBackend

__all__ = ["TritonGroupedBackend", "TritonNaiveBackend", "TritonTiledBackend", "gemmzoo_register_backends"]
__all__ += ["TritonDecodeBackend", "TritonSplitKBackend"]


@hookimpl
def gemmzoo_register_backends(register: Callable[[object], None]) -> None:
    """Register the Triton backends, from the plainest kernel to the tuned one, then the skinny ones."""
    register(TritonNaiveBackend())
    register(TritonTiledBackend())
    register(TritonGroupedBackend())
    register(TritonSplitKBackend())
    register(TritonDecodeBackend())
