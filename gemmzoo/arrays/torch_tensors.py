"""``from_numpy``/``to_numpy`` for backends whose native arrays are torch tensors.

A mixin for :class:`gemmzoo.Backend` subclasses: tensors live on ``self.device`` ("cpu" or
"cuda"), the ``tf32`` mode wraps float32 tensors in :class:`gemmzoo.TF32Array`, and 16-bit and fp8
results come back to the host as float32. ``float8_e4m3fn`` tensors are rounded on the device by
:func:`e4m3_tensor`, to the bytes :func:`gemmzoo.contract.fp8.to_e4m3` gives on the host (nearest
even, ±448 for finite values out of range, NaN for ±Inf), so every torch-based backend rounds
exactly as the numpy backend does. torch is imported inside the
methods only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from gemmzoo.contract.backend import TF32Array

_TORCH_DTYPES = {
    "float16": "float16",
    "bfloat16": "bfloat16",
    "float32": "float32",
    "tf32": "float32",
    "float64": "float64",
}


class TorchTensors:
    """Conversions between NumPy arrays and torch tensors on the backend's device, and the
    plans of the problems ``matmul`` met last (:meth:`remembered_plan`)."""

    device: str
    check_dtype: Any  # provided by gemmzoo.Backend
    prepare: Any  # provided by gemmzoo.Backend

    #: How many plans :meth:`remembered_plan` keeps (the most recent problems).
    REMEMBERED_PLANS = 32
    #: The plans kept, by problem; a backend that calls :meth:`remembered_plan` sets it to ``{}``.
    _plans: dict[tuple[Any, ...], Callable[[Any, Any], Any]]

    @staticmethod
    def problem_key(a: Any, b: Any) -> tuple[Any, ...]:
        """What tells one problem of torch tensors from another: the operands' types, and the
        shapes, strides, dtypes and devices of the tensors (those a :class:`TF32Array` wraps).
        Raises ``AttributeError`` for operands that are not tensors."""
        x, y = (a.data, b.data) if isinstance(a, TF32Array) else (a, b)
        return (type(a), type(b), x.shape, y.shape, x.stride(), y.stride(), x.dtype, y.dtype, x.device,
                y.device)

    def remembered_plan(self, a: Any, b: Any) -> Callable[[Any, Any], Any]:
        """``prepare(a, b)``, remembered for the problem (:meth:`problem_key`), so that ``matmul``
        on a problem it has seen calls its plan straight away. Bad input is never remembered: it
        raises in ``prepare``."""
        try:
            key = self.problem_key(a, b)
        except AttributeError:  # not tensors: prepare says what is wrong
            return self.prepare(a, b)
        return self.kept("_plans", key, lambda: self.prepare(a, b), self.REMEMBERED_PLANS)

    def kept(self, table: str, key: Any, make: Callable[[], Any], limit: int) -> Any:
        """``make()``, kept by ``key`` in this backend's table named ``table`` (made on first use),
        which holds the last ``limit`` keys met: when full, it is emptied before a new entry. A
        ``make()`` that raises keeps nothing and empties nothing."""
        kept = self.__dict__.setdefault(table, {})
        found = kept.get(key)
        if found is None:
            found = make()
            if len(kept) >= limit:
                kept.clear()
            kept[key] = found
        return found

    def from_numpy(self, x: np.ndarray, dtype: str) -> Any:
        """``x`` as a tensor of ``dtype`` on ``self.device`` (a :class:`TF32Array` for tf32)."""
        import torch

        self.check_dtype(dtype, np.shape(x))
        if dtype == "float8_e4m3fn":
            from gemmzoo.contract.fp8 import rounding_input

            values = rounding_input(x)
            if not values.flags.writeable:  # torch wraps no read-only array
                values = values.copy()
            return e4m3_tensor(torch.from_numpy(values).to(device=self.device))
        # A copy to another device is the tensor's own; a CPU tensor must not share the caller's
        # array, nor wrap one it may not write to.
        values = np.asarray(x)
        shared = self.device != "cpu" and values.flags.writeable and values.flags.c_contiguous
        host = torch.from_numpy(values if shared else np.array(values, copy=True))
        tensor = host.to(device=self.device, dtype=getattr(torch, _TORCH_DTYPES[dtype]))
        return TF32Array(tensor) if dtype == "tf32" else tensor

    def to_numpy(self, y: Any) -> np.ndarray:
        """A host copy of ``y``; float16, bfloat16 and float8_e4m3fn come back as float32."""
        import torch

        tensor = (y.data if isinstance(y, TF32Array) else y).detach()
        converted = tensor.dtype in (torch.float16, torch.bfloat16, getattr(torch, "float8_e4m3fn", None))
        if converted:
            tensor = tensor.float()
        host = tensor.cpu()
        # a new host tensor already (converted, or copied from a device): copied again only to
        # put it in C order, as a copy of the caller's own CPU tensor always is
        fresh = converted or host.data_ptr() != tensor.data_ptr()
        return np.ascontiguousarray(host.numpy()) if fresh else host.numpy().copy()


def e4m3_tensor(values: Any) -> Any:
    """A float32 or float64 tensor rounded to ``torch.float8_e4m3fn`` on its own device, value for
    value as :func:`gemmzoo.contract.fp8.to_e4m3` rounds on the host: nearest even, finite values
    out of range saturating to ±448, ±Inf to NaN, a NaN keeping its sign. Rounding where the
    tensor lives spares the host a pass over every operand a backend is given."""
    import torch

    from gemmzoo.contract.fp8 import E4M3_MAX

    if values.dtype == torch.float64:
        values = _float32_rounded_to_odd(values)
    clipped = torch.where(torch.isinf(values), float("nan"), values.clamp(-E4M3_MAX, E4M3_MAX))
    return torch.copysign(clipped, values).to(torch.float8_e4m3fn)


def _float32_rounded_to_odd(values: Any) -> Any:
    """A float64 tensor in float32, rounded to odd: the one rounding to E4M3 that follows is then
    correct (see :func:`gemmzoo.contract.fp8._round_to_odd_float32`, the host's own)."""
    import torch

    single = values.to(torch.float32)
    back = single.to(torch.float64)
    finite = torch.isfinite(values)
    inexact = finite & (back != values)
    rounded_up = finite & (back.abs() > values.abs())
    truncated = torch.where(rounded_up, torch.nextafter(single, torch.zeros_like(single)), single)
    return (truncated.view(torch.int32) | inexact.to(torch.int32)).view(torch.float32)
