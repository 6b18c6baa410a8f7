"""Copies of operands into buffers whose rows are 16-byte aligned, for TMA.

A tensor descriptor needs every row to start on a 16-byte boundary; a float16 matrix with 4097
columns has rows 8194 bytes apart, and cuBLAS is slow on such operands too. A copy into a buffer
whose rows are padded to the next 16 bytes is a view of the original shape with aligned rows:
the padding is never read, because the descriptor's extent is the view's shape and TMA fills
loads past it with zeros. So the copy moves the values only, in one ``copy_``.
"""

from __future__ import annotations

from typing import Any

from gemmzoo_triton.core.padding import padded, units, zero
from gemmzoo_triton.core.stream_buffers import REUSED_BUFFER_BYTES


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
    the buffer's shape and the copy's launch are decided once. A call copies into a new buffer;
    :meth:`views` and :meth:`write` let a plan copy into a buffer it keeps instead
    (:class:`KeptCopies`).

    ``zero_padded``: the copy is ``zero_padded`` elements wide instead (K of A and of Bᵀ rounded up
    for kernels that take whole 16-byte rows), its columns past the tensor's written as zeros on
    every copy. ``padded_rows``: likewise, the copy has that many rows (of what is copied: the
    transpose's, for a column-major copy), those past the tensor's written as zeros."""

    def __init__(self, like: Any, column_major: bool | None = None, zero_padded: int | None = None,
                 padded_rows: int | None = None) -> None:
        rows, cols = like.shape
        size = like.element_size()
        if column_major is None:
            column_major = like.stride(0) == 1 and like.stride(1) != 1
        self.column_major = column_major
        self.rows, self.cols = (cols, rows) if column_major else (rows, cols)  # of what is copied
        self.width = self.cols if zero_padded is None else zero_padded  # of what is written
        self.height = self.rows if padded_rows is None else padded_rows  # rows written
        if self.width < self.cols or self.height < self.rows:
            raise ValueError(f"a copy of {self.rows}x{self.cols} cannot be zero-padded to "
                             f"{self.height}x{self.width}")
        self.row_stride = padded(self.width, size)
        #: The elements of the buffer the copy writes: whole padded rows, so a buffer of two
        #: copies starts the second one 16-byte aligned.
        self.numel = self.height * self.row_stride
        self.dtype, self.device = like.dtype, like.device
        strides = like.stride()[::-1] if column_major else like.stride()
        #: The copy kernel's (see :mod:`~gemmzoo_triton.core.copy_kernel`) sizes after its two
        #: pointers, or None where the copy transposes (torch's ``copy_`` makes it).
        self.sizes: tuple[int, ...] | None = None
        self.launch: Any = None
        if like.numel() > 0 and strides[1] <= strides[0]:
            from gemmzoo_triton.core import copy_kernel
            from gemmzoo_triton.core.launch import BoundLaunch

            self.launch = BoundLaunch(copy_kernel.copy_kernel, (copy_kernel.blocks(self.height, self.width),),
                                      copy_kernel.constexprs(units(size)), pointers=(0, 1),
                                      device=like.device)
            self.sizes = (self.rows, self.cols, self.height, self.width, strides[0], strides[1],
                          self.row_stride)

    def source(self, tensor: Any) -> Any:
        """What the copy reads: ``tensor``, or its transpose for a column-major copy."""
        return tensor.T if self.column_major else tensor

    def views(self, flat: Any) -> tuple[Any, Any]:
        """What the copy writes in a 1-D buffer of at least :attr:`numel` elements (rows
        :attr:`row_stride` apart), and the aligned operand it is."""
        written = flat[: self.numel].view(self.height, self.row_stride)[:, : self.width]
        return written, (written.T if self.column_major else written)

    def write(self, tensor: Any, written: Any) -> None:
        """Copy ``tensor`` into ``written`` (from :meth:`views`), zeros past its columns."""
        source = self.source(tensor)
        if self.launch is not None:
            self.launch(source, written, *self.sizes)
            return
        written[: self.rows, : self.cols].copy_(source)
        if self.width > self.cols:
            zero(written[:, self.cols :])
        if self.height > self.rows:
            zero(written[self.rows :, : self.cols])

    def __call__(self, tensor: Any) -> Any:
        import torch

        written, operand = self.views(torch.empty(self.numel, dtype=self.dtype, device=self.device))
        self.write(tensor, written)
        return operand


class KeptCopies:
    """The aligned copies of A and B (``copy_x`` and ``copy_y``, either None where that operand
    is not copied) in one buffer kept per thread and CUDA stream
    (:class:`~gemmzoo_triton.core.stream_buffers.StreamBuffers`), made by one launch of the
    two-copy kernel where both copies are the kernel's.

    ``describe(operand_x, operand_y)`` (None for an operand not copied) is called once per
    buffer; its result comes back with the operands on every call, so that a plan makes the
    TMA descriptors of its kept operands once. ``reused_buffer_bytes``: the largest buffer kept
    (default :data:`~gemmzoo_triton.core.stream_buffers.REUSED_BUFFER_BYTES`).
    """

    __slots__ = ("_blocks_x", "_buffers", "_copy_x", "_copy_y", "_describe", "_pair")

    def __init__(self, copy_x: AlignedCopy | None, copy_y: AlignedCopy | None,
                 describe: Any, reused_buffer_bytes: int = REUSED_BUFFER_BYTES) -> None:
        from gemmzoo_triton.core.stream_buffers import StreamBuffers

        self._copy_x, self._copy_y, self._describe = copy_x, copy_y, describe
        first = copy_x if copy_x is not None else copy_y
        if first is None:
            raise ValueError("KeptCopies needs at least one copy")
        numel = (copy_x.numel if copy_x is not None else 0) + (copy_y.numel if copy_y is not None else 0)
        self._buffers = StreamBuffers(numel, first.dtype, first.device, self._make, reused_buffer_bytes)
        self._pair = None
        kernels = copy_x is not None and copy_y is not None and None not in (copy_x.launch, copy_y.launch)
        if kernels:
            from gemmzoo_triton.core import copy_kernel
            from gemmzoo_triton.core.launch import BoundLaunch

            self._blocks_x = copy_kernel.blocks(copy_x.height, copy_x.width)
            grid = (self._blocks_x + copy_kernel.blocks(copy_y.height, copy_y.width),)
            constexprs = copy_kernel.constexprs(units(first.dtype.itemsize))
            self._pair = BoundLaunch(copy_kernel.copy_pair_kernel, grid, constexprs, pointers=(0, 1, 9, 10),
                                     device=first.device)

    def _make(self, flat: Any) -> tuple[Any, Any, Any, Any, Any]:
        """(written x, written y, operand x, operand y, what ``describe`` made) for a new buffer."""
        written_x = operand_x = written_y = operand_y = None
        if self._copy_x is not None:
            written_x, operand_x = self._copy_x.views(flat)
        if self._copy_y is not None:
            offset = self._copy_x.numel if self._copy_x is not None else 0
            written_y, operand_y = self._copy_y.views(flat[offset:])
        return written_x, written_y, operand_x, operand_y, self._describe(operand_x, operand_y)

    def __call__(self, x: Any, y: Any) -> tuple[Any, Any, Any]:
        """Copy ``x`` and ``y`` (those of them copied); return the operands (``x`` or ``y`` itself
        where not copied) and what ``describe`` made for this buffer."""
        written_x, written_y, operand_x, operand_y, described = self._buffers.get()
        copy_x, copy_y = self._copy_x, self._copy_y
        if self._pair is not None:
            self._pair(copy_x.source(x), written_x, *copy_x.sizes, copy_y.source(y), written_y, *copy_y.sizes,
                       self._blocks_x)
            return operand_x, operand_y, described
        if copy_x is not None:
            copy_x.write(x, written_x)
            x = operand_x
        if copy_y is not None:
            copy_y.write(y, written_y)
            y = operand_y
        return x, y, described
