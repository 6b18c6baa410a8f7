"""Scratch buffers a plan keeps from call to call, one per thread and CUDA stream.

A plan that copies its operands before the product (triton-grouped's aligned route) would
otherwise allocate, view and describe new copies on every call. One thread's calls on one CUDA
stream run in order on the GPU, so a call's copy never overwrites a buffer that the previous
call's product is still reading: each (thread, stream) pair can keep one buffer, with whatever a
plan derives from it once (views, TMA descriptors). Not kept, and made afresh each call:
buffers of more than :data:`REUSED_BUFFER_BYTES` (a :class:`StreamBuffers`'
``reused_buffer_bytes``; their copies take long enough that the allocation does not show, and a
plan does not hold that much memory), and those of a call made while a CUDA graph is being
captured (the graph keeps its own, and a kept buffer would be shared between the graph's replays
and eager calls).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

#: The largest buffer (bytes) a plan keeps from call to call.
REUSED_BUFFER_BYTES = 64 << 20

#: Buffers kept per plan (threads x streams) before they are all let go.
MAX_KEPT = 8


def _stream_reader(device: Any) -> Callable[[], Any]:
    """A function giving the current CUDA stream of ``device`` (a handle), or None on a CPU."""
    from gemmzoo_triton.core.triton_internals import stream_reader_of

    return stream_reader_of(device) or (lambda: None)


def _capture_reader(device: Any) -> Callable[[], bool]:
    """A function saying whether a CUDA graph is being captured on the current stream."""
    if device.type != "cuda":
        return lambda: False
    import torch

    # torch.cuda.is_current_stream_capturing's own call, without its Python wrapper (a plan asks on
    # every call)
    return getattr(torch._C, "_cuda_isCurrentStreamCapturing", torch.cuda.is_current_stream_capturing)


class StreamBuffers:
    """``get()``: what ``make`` derived from a buffer of ``numel`` elements of ``dtype`` on
    ``device``, one kept per thread and CUDA stream (see the module's docstring), where the
    buffer has at most ``reused_buffer_bytes`` (default :data:`REUSED_BUFFER_BYTES`)."""

    __slots__ = ("_capturing", "_device", "_dtype", "_kept", "_make", "_numel", "_reuse", "_stream")

    def __init__(self, numel: int, dtype: Any, device: Any, make: Callable[[Any], Any],
                 reused_buffer_bytes: int = REUSED_BUFFER_BYTES) -> None:
        self._numel, self._dtype, self._device, self._make = numel, dtype, device, make
        self._kept: dict[tuple[int, Any], Any] = {}
        self._reuse = numel * dtype.itemsize <= reused_buffer_bytes
        self._stream = _stream_reader(device)
        self._capturing = _capture_reader(device)

    def fresh(self) -> Any:
        """``make`` on a new buffer, kept nowhere."""
        import torch

        return self._make(torch.empty(self._numel, dtype=self._dtype, device=self._device))

    def get(self) -> Any:
        """The kept entry of the calling thread's current stream (made on its first use), or a
        fresh one where none is kept (see the module's docstring)."""
        return self._entry(self._stream())

    def get_on(self) -> tuple[Any, Any]:
        """``(get(), the current stream's handle)``, for a caller that launches on it."""
        stream = self._stream()
        return self._entry(stream), stream

    def _entry(self, stream: Any) -> Any:
        if not self._reuse or self._capturing():
            return self.fresh()
        key = threading.get_ident(), stream
        kept = self._kept.get(key)
        if kept is None:
            if len(self._kept) >= MAX_KEPT:
                self._kept.clear()
            kept = self._kept[key] = self.fresh()
        return kept

    def kept(self) -> int:
        """How many entries are kept now."""
        return len(self._kept)
