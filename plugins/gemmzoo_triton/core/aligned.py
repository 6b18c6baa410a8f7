"""Copies of operands into buffers whose rows are 16-byte aligned, for TMA.

A tensor descriptor needs every row to start on a 16-byte boundary; a float16 matrix with 4097
columns has rows 8194 bytes apart, and cuBLAS is slow on such operands too. A copy into a buffer
whose rows are padded to the next 16 bytes is a view of the original shape with aligned rows:
the padding is never read, because the descriptor's extent is the view's shape and TMA fills
loads past it with zeros. So the copy moves the values only, in one ``copy_``.
"""

from __future__ import annotations

from typing import Any

from gemmzoo_triton.core.padding import padded, units


def aligned_copy(tensor: Any, column_major: bool | None = None) -> Any:
    """A copy of a 2-D ``tensor`` with 16-byte aligned rows (of the transpose, if column-major).

    ``column_major`` chooses the copy's layout; by default a column-major tensor
    (``stride(0) == 1``, as a transposed view has) stays column-major, so that the copy does not
    transpose, and any other layout becomes row-major.
    """
    import torch

    rows, cols = tensor.shape
    size = tensor.element_size()
    if column_major is None:
        column_major = tensor.stride(0) == 1 and tensor.stride(1) != 1
    if column_major:
        buffer = torch.empty((cols, padded(rows, size)), dtype=tensor.dtype, device=tensor.device)
        view, target, source = buffer[:, :rows].T, buffer[:, :rows], tensor.T
    else:
        buffer = torch.empty((rows, padded(cols, size)), dtype=tensor.dtype, device=tensor.device)
        view = target = buffer[:, :cols]
        source = tensor
    # copy_kernel walks the source along its rows; a transposing copy is torch's.
    if source.numel() > 0 and source.stride(1) <= source.stride(0):
        from gemmzoo_triton.core import copy_kernel

        copy_kernel.copy(source, target)
    else:
        target.copy_(source)
    return view


class AlignedCopy:
    """:func:`aligned_copy` bound for every tensor like ``like`` (shape, strides, dtype, device):
    the buffer's shape and the copy's launch are decided once."""

    def __init__(self, like: Any, column_major: bool | None = None) -> None:
        rows, cols = like.shape
        size = like.element_size()
        if column_major is None:
            column_major = like.stride(0) == 1 and like.stride(1) != 1
        self._column_major = column_major
        self._rows, self._cols = (cols, rows) if column_major else (rows, cols)  # of what is copied
        self._buffer_shape = (self._rows, padded(self._cols, size))
        self._dtype, self._device = like.dtype, like.device
        strides = like.stride()[::-1] if column_major else like.stride()
        self._launch = None
        if like.numel() > 0 and strides[1] <= strides[0]:
            from gemmzoo_triton.core import copy_kernel
            from gemmzoo_triton.core.launch import BoundLaunch

            self._launch = BoundLaunch(copy_kernel.copy_kernel, (copy_kernel.blocks(self._rows, self._cols),),
                                       copy_kernel.constexprs(units(size)), pointers=(0, 1))
            self._sizes = (self._rows, self._cols, self._rows, self._cols, strides[0], strides[1],
                           self._buffer_shape[1])

    def __call__(self, tensor: Any) -> Any:
        import torch

        buffer = torch.empty(self._buffer_shape, dtype=self._dtype, device=self._device)
        target = buffer[:, : self._cols]
        source = tensor.T if self._column_major else tensor
        if self._launch is not None:
            self._launch(source, target, *self._sizes)
        else:
            target.copy_(source)
        return target.T if self._column_major else target


def aligned_empty(rows: int, cols: int, like: Any) -> Any:
    """An uninitialised rows x cols tensor of ``like``'s dtype and device, a view of a buffer
    whose rows are padded to 16 bytes: C for the aligned route, which TMA can store whole."""
    import torch

    buffer = torch.empty((rows, padded(cols, like.element_size())), dtype=like.dtype, device=like.device)
    return buffer[:, :cols]
