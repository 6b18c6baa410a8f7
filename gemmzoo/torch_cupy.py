"""torch CUDA tensors through a CuPy backend's plan, with the crossing planned once.

``gemmzoo.matmul(a, b, backend="cupy")`` on torch tensors used to import both operands into CuPy
and C back into torch through DLPack on every call. Here the plan (:func:`bridged`) keeps:

- the CuPy view of each operand, made once per address: a CuPy array over the tensor's memory
  (not owning it) in the problem's shape, strides and dtype, which the problem's key fixes. A view
  is valid whenever a tensor of the problem lives at that address, whichever tensor it is, so the
  views hold no reference to any tensor; at most :data:`MAX_VIEWS` are kept per operand.
- CuPy's stream for torch's current stream: the product is launched on the stream torch is
  using (as DLPack's exchange ordered it), so it follows the kernels that wrote the operands and
  precedes those that read C, and it is captured with them in a CUDA graph capture.

C, which CuPy allocates, becomes a torch tensor through DLPack (it owns its memory).

:func:`bridged_or` makes that plan and checks it once against the DLPack exchange on the
problem's own operands (the same bits, or the exchange is kept).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gemmzoo.contract.backend import TF32Array

#: CuPy views kept per operand of a plan (distinct addresses met); past that they are made again.
MAX_VIEWS = 16


def _cupy_dtype(torch_dtype: Any) -> Any:
    import numpy as np
    import torch

    if torch_dtype == torch.bfloat16:
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(str(torch_dtype).removeprefix("torch."))


class CupyViews:
    """CuPy arrays over the memory of torch CUDA tensors like ``like`` (shape, strides, dtype,
    device), one per address, made on first use."""

    def __init__(self, like: Any) -> None:
        itemsize = like.element_size()
        self._shape = tuple(like.shape)
        self._strides = tuple(stride * itemsize for stride in like.stride())
        self._nbytes = (1 + sum((size - 1) * stride for size, stride in zip(like.shape, like.stride(),
                                                                              strict=True))) * itemsize
        self._dtype = _cupy_dtype(like.dtype)
        self._device = like.device.index
        self._views: dict[int, Any] = {}

    def __call__(self, tensor: Any) -> Any:
        address = tensor.data_ptr()
        try:
            return self._views[address]
        except KeyError:
            import cupy

            memory = cupy.cuda.UnownedMemory(address, self._nbytes, None, self._device)
            view = cupy.ndarray(self._shape, self._dtype, cupy.cuda.MemoryPointer(memory, 0), self._strides)
            if len(self._views) >= MAX_VIEWS:
                self._views.clear()
            self._views[address] = view
            return view


def _current_stream(device_index: int) -> Callable[[], Any]:
    """A function giving CuPy's stream object for torch's current stream on the device."""
    import cupy
    import torch

    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)  # a C call, where torch has it
    read = (lambda: raw(device_index)) if raw is not None else (
        lambda: torch.cuda.current_stream(device_index).cuda_stream)
    streams: dict[int, Any] = {}

    def current() -> Any:
        pointer = read()
        try:
            return streams[pointer]
        except KeyError:
            stream = streams[pointer] = cupy.cuda.ExternalStream(pointer, device_index)
            return stream

    return current


def bridged(run: Callable[[Any, Any], Any], a: Any, b: Any, tf32: bool) -> Callable[[Any, Any], Any]:
    """The plan of torch CUDA operands like ``a`` and ``b`` (not empty) for ``run``, a CuPy
    backend's plan: operands viewed as CuPy arrays, the product on torch's current stream, C
    handed to torch. With ``tf32`` the operands and the result are :class:`TF32Array` wrappers
    (of torch tensors outside, of CuPy arrays for ``run``)."""
    import torch

    view_a, view_b = CupyViews(a), CupyViews(b)
    current = _current_stream(a.device.index if a.device.index is not None else torch.cuda.current_device())
    to_torch = torch.from_dlpack

    if tf32:
        def plan_tf32(a: Any, b: Any) -> Any:
            x, y = view_a(a.data), view_b(b.data)
            with current():
                return TF32Array(to_torch(run(TF32Array(x), TF32Array(y)).data))

        return plan_tf32

    def plan(a: Any, b: Any) -> Any:
        x, y = view_a(a), view_b(b)
        with current():
            return to_torch(run(x, y))

    return plan


def bridged_or(fallback: Callable[[Any, Any], Any], run: Callable[[Any, Any], Any], a: Any, b: Any,
               tf32: bool) -> Callable[[Any, Any], Any]:
    """:func:`bridged`'s plan for operands like ``a`` and ``b`` (wrapped in :class:`TF32Array`
    when ``tf32``), when its product of ``a`` and ``b`` equals ``fallback``'s bit for bit (the plan
    that exchanges the arrays through DLPack on every call); ``fallback`` otherwise, and while a
    CUDA graph is being captured (where the check cannot compare on the host)."""
    import torch

    if torch.cuda.is_current_stream_capturing():
        return fallback
    try:
        plan = bridged(run, a.data if tf32 else a, b.data if tf32 else b, tf32)
        mine, theirs = plan(a, b), fallback(a, b)
        if tf32:
            mine, theirs = mine.data, theirs.data
        agree = bool(torch.equal(mine, theirs))
    except Exception:  # a CuPy without these entry points, or memory it cannot view: keep DLPack
        return fallback
    return plan if agree else fallback
