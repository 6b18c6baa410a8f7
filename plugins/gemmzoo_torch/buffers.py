"""Buffers a plan keeps from call to call for the copies it makes (torch-padded, fp8).

One thread's calls on one CUDA stream run in order, so a call's copy never overwrites a buffer
that the previous call's product is still reading: a buffer is kept per thread and stream. A plan
made for a large problem keeps none (its copies take long enough that allocating does not matter,
and it does not hold on to that much memory), and neither does a call made while a CUDA graph is
being captured (the graph keeps its own memory). torch is imported when a buffer set is made.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

#: The largest buffer (bytes) a plan keeps from call to call; larger ones are allocated per call.
REUSED_BUFFER_BYTES = 64 << 20


class KeptBuffers:
    """A buffer of ``numel`` elements that a plan's copies write, kept per thread and CUDA stream:
    ``get()`` gives what ``make`` derived from it when it was allocated (views, say, or padding
    zeroed once). Buffers over :data:`REUSED_BUFFER_BYTES`, and those asked for while a CUDA graph
    is captured, are made afresh on every ``get()``."""

    #: Buffers kept per plan (threads x streams) before the oldest are let go.
    MAX_KEPT = 8

    def __init__(self, numel: int, dtype: Any, device: Any, make: Callable[[Any], Any]) -> None:
        import threading

        import torch

        self._numel, self._dtype, self._device, self._make = numel, dtype, device, make
        self._kept: dict[Any, Any] = {}
        self._reuse = numel * dtype.itemsize <= REUSED_BUFFER_BYTES
        self._thread = threading.get_ident
        self._stream: Callable[[], Any] = lambda: None
        self._capturing: Callable[[], bool] = lambda: False
        if device.type == "cuda":
            index = device.index if device.index is not None else torch.cuda.current_device()
            # torch's own accessor of the raw current stream where it has one (a C call), else the
            # handle of the public Stream object
            raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
            if raw is not None:
                self._stream = lambda: raw(index)
            else:
                self._stream = lambda: torch.cuda.current_stream(index).cuda_stream
            self._capturing = torch.cuda.is_current_stream_capturing

    def _fresh(self) -> Any:
        import torch

        return self._make(torch.empty(self._numel, dtype=self._dtype, device=self._device))

    def get(self) -> Any:
        if not self._reuse or self._capturing():
            return self._fresh()
        key = self._thread(), self._stream()
        try:
            return self._kept[key]
        except KeyError:
            if len(self._kept) >= self.MAX_KEPT:
                self._kept.clear()
            kept = self._kept[key] = self._fresh()
            return kept
