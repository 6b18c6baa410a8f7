"""Copies of operands into buffers whose rows are 16-byte aligned, for TMA.

A tensor descriptor needs every row to start on a 16-byte boundary; a float16 matrix with 4097
columns has rows 8194 bytes apart, and cuBLAS is slow on such operands too. A copy into a buffer
whose rows are padded to the next 16 bytes is a view of the original shape with aligned rows:
the padding is never read, because the descriptor's extent is the view's shape and TMA fills
loads past it with zeros. So the copy moves the values only, in one ``copy_``.
"""

from __future__ import annotations

from typing import Any


def padded(length: int, element_size: int) -> int:
    """``length`` elements rounded up to a whole number of 16-byte units."""
    per_unit = max(1, 16 // element_size)
    return -(-length // per_unit) * per_unit


def aligned_copy(tensor: Any) -> Any:
    """A copy of a 2-D ``tensor`` with 16-byte aligned rows (of the transpose, if column-major).

    A column-major tensor (``stride(0) == 1``, as a transposed view has) stays column-major, so
    that the copy does not transpose; any other layout becomes row-major.
    """
    import torch

    rows, cols = tensor.shape
    size = tensor.element_size()
    if tensor.stride(0) == 1 and tensor.stride(1) != 1:
        buffer = torch.empty((cols, padded(rows, size)), dtype=tensor.dtype, device=tensor.device)
        view = buffer[:, :rows].T
    else:
        buffer = torch.empty((rows, padded(cols, size)), dtype=tensor.dtype, device=tensor.device)
        view = buffer[:, :cols]
    view.copy_(tensor)
    return view
