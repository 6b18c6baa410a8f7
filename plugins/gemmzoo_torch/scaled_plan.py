"""The ``torch`` backend's scaled product for one problem, decided once: ``torch._scaled_mm``
tensor-wise or row-wise on operands it can take.

``torch._scaled_mm`` takes A row-major and B column-major, with K and N multiples of 16. A plan
(:func:`scaled_plan`) decides from the first call's operands which of them to copy, and into what:
buffers with K (and, for B, N) padded by zeros, kept per thread and CUDA stream
(:class:`~gemmzoo_triton.core.stream_buffers.StreamBuffers`) with their padding zeroed once, and
for row-wise scales a scale of B widened to the padded N (ones past N, which meet only zero
columns). A call then copies the operands' values in, launches, and returns C as the M×N view of
the padded product. So the copies are the only work past the aligned problem's, and there is no
allocation but C's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gemmzoo_triton.core.stream_buffers import StreamBuffers

ALIGN = 16


def _round_up(size: int) -> int:
    return -(-size // ALIGN) * ALIGN


def _row_major_aligned(x: Any) -> bool:
    """Whether ``x`` is as ``_scaled_mm`` takes its A: row-major, rows and start 16-byte aligned."""
    return x.stride(1) == 1 and x.stride(0) % ALIGN == 0 and x.data_ptr() % ALIGN == 0


def needs_copy(a: Any, b: Any) -> tuple[bool, bool]:
    """Whether A and whether B must be copied for ``_scaled_mm``: A unless row-major with K a
    multiple of 16, B unless column-major with K and N multiples of 16 (starts and rows 16-byte
    aligned in both)."""
    (_, k), n = a.shape, b.shape[1]
    return (k % ALIGN != 0 or not _row_major_aligned(a),
            k % ALIGN != 0 or n % ALIGN != 0 or not _row_major_aligned(b.t()))


def scaled_plan(op: Any, a: Any, b: Any, scaling: str, out: Any) -> Callable[[Any, Any, Any, Any], Any]:
    """``run(a, b, scale_a, scale_b)``: ``op`` (``torch._scaled_mm``) on this problem's operands,
    copied where :func:`needs_copy` says, C in ``out``; ``scaling`` ``"tensorwise"`` (scalar
    scales) or ``"rowwise"`` (``scale_a`` M×1, ``scale_b`` 1×N). Later calls must have the
    first call's shapes, strides and device."""
    import torch

    (m, k), n = a.shape, b.shape[1]
    copy_a, copy_b = needs_copy(a, b)
    k16, n16 = _round_up(k), (_round_up(n) if copy_b else n)
    rowwise = scaling == "rowwise"
    widen = rowwise and n16 != n
    a_numel = m * k16 if copy_a else 0

    def carve(buffer: Any) -> tuple[Any, Any]:
        buffer.view(torch.uint8).zero_()  # once per kept buffer: the padding stays zero
        x = buffer[:a_numel].view(m, k16) if copy_a else None
        yt = buffer[a_numel:].view(n16, k16) if copy_b else None
        return x, yt

    operands = StreamBuffers(a_numel + (n16 * k16 if copy_b else 0), a.dtype, a.device, carve) \
        if copy_a or copy_b else None
    ones = StreamBuffers(n16, torch.float32, a.device, lambda buffer: buffer.fill_(1.0).view(1, n16)) \
        if widen else None

    def run(a: Any, b: Any, scale_a: Any, scale_b: Any) -> Any:
        x, y = a, b
        if operands is not None:
            xa, yt = operands.get()
            if xa is not None:
                xa[:, :k].copy_(a)
                x = xa
            if yt is not None:
                yt[:n, :k].copy_(b.t())
                y = yt.t()
        if rowwise:
            scale_a = scale_a.reshape(m, 1).contiguous()
            if ones is not None:
                wide = ones.get()
                wide[:, :n].copy_(scale_b.reshape(1, n))
                scale_b = wide
            else:
                scale_b = scale_b.reshape(1, n).contiguous()
        else:
            scale_a, scale_b = scale_a.reshape(()), scale_b.reshape(())
        c = op(x, y, scale_a=scale_a, scale_b=scale_b, out_dtype=out, use_fast_accum=False)
        return c if n16 == n else c[:, :n]

    return run
