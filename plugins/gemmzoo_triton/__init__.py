"""gemmzoo's bundled Triton plugin: ``triton-naive``, ``triton-tiled``, ``triton-grouped``,
``triton-splitk`` and ``triton-decode`` for skinny products, ``triton-fp8`` for float8_e4m3fn, and
``triton-grouped-tma``, a variant of ``triton-grouped`` for comparisons. One folder per kernel
family (``basic``, ``grouped``, ``splitk``, ``fp8``) and one for what they share (``core``); see
docs/architecture.md.

They run on CUDA GPUs, or on the CPU under Triton's interpreter (``TRITON_INTERPRET=1``). Importing
this package and building the backends imports neither triton nor torch.
"""

from __future__ import annotations

from collections.abc import Callable

from gemmzoo import hookimpl
from gemmzoo_triton.basic.backends import TritonNaiveBackend, TritonTiledBackend
from gemmzoo_triton.fp8.backend import TritonFp8Backend
from gemmzoo_triton.grouped.backend import TritonGroupedBackend, TritonGroupedTmaBackend
from gemmzoo_triton.splitk.backends import TritonDecodeBackend, TritonSplitKBackend

__all__ = ["TritonGroupedBackend", "TritonNaiveBackend", "TritonTiledBackend", "gemmzoo_register_backends"]
__all__ += ["TritonDecodeBackend", "TritonSplitKBackend"]
__all__ += ["TritonFp8Backend", "TritonGroupedTmaBackend"]


@hookimpl
def gemmzoo_register_backends(register: Callable[[object], None]) -> None:
    """Register the Triton backends, from the plainest kernel to the tuned one, then the skinny
    ones, then fp8's."""
    register(TritonNaiveBackend())
    register(TritonTiledBackend())
    register(TritonGroupedBackend())
    register(TritonGroupedTmaBackend())
    register(TritonSplitKBackend())
    register(TritonDecodeBackend())
    register(TritonFp8Backend())
