"""What the Hopper kernels (TMA and Gluon) need to know about a device: whether it has the tensor
memory accelerator, whether the Gluon kernels run there and with how much shared memory, its
SM count, and which tensor layouts a tensor descriptor covers."""

from __future__ import annotations

import functools
from typing import Any

from gemmzoo_triton.core.env import interpreter_mode, triton_version

#: The oldest Triton for the TMA kernels: host-side ``TensorDescriptor`` and
#: ``tl.range(..., flatten=True)``.
TMA_MIN_TRITON = (3, 4)

#: The oldest CUDA capability with the tensor memory accelerator (Hopper).
TMA_MIN_CAPABILITY = (9, 0)

#: The TMA kernels take only problems with more than this many multiply-adds (M·N·K): below it
#: their launch (descriptors and their tensor maps) costs as much host time as the GEMM takes,
#: so the GPU waits for the host, while above it they beat the pointer kernel
#: (docs/results/2026-11-21-h100-triton.md).
TMA_MIN_WORK = 2048**3

#: The capability the Gluon kernels are written for (Hopper's warpgroup MMA instructions).
GLUON_CAPABILITY = (9, 0)


def gluon_shared_memory(device: Any) -> int | None:
    """The shared memory a block may use on CUDA ``device`` where the Gluon kernels can run
    there (capability 9.0, Triton >= 3.6 with Gluon's Hopper API, not the interpreter), else
    None."""
    if interpreter_mode() or device.type != "cuda":
        return None
    return _gluon_shared_memory(device.index)


@functools.cache
def _gluon_shared_memory(device_index: int) -> int | None:
    import torch

    if torch.cuda.get_device_capability(device_index) != GLUON_CAPABILITY:
        return None
    try:
        import gemmzoo_triton.core.gluon_parts  # noqa: F401 - raises on a Triton without what they need
    except (ImportError, AttributeError):
        return None
    return getattr(torch.cuda.get_device_properties(device_index), "shared_memory_per_block_optin", 0)


@functools.cache
def _tma_capable(device: Any) -> bool:
    import torch

    capability = torch.cuda.get_device_capability(device)
    return capability >= TMA_MIN_CAPABILITY and triton_version() >= TMA_MIN_TRITON


def tma_device(device: Any) -> bool:
    """Whether triton-grouped's TMA kernels can run compiled on ``device`` (a ``torch.device``).

    True for a CUDA device of capability 9.0 or later (Hopper on) with Triton >= 3.4. False under
    the interpreter, where the backend stays on its pointer kernel (the TMA kernels run there
    too, but only when called directly, as the tests do).
    """
    return not interpreter_mode() and device.type == "cuda" and _tma_capable(device)


def column_major(tensor: Any) -> bool:
    """Whether a 2-D tensor is read through its transpose: not row-major (``stride(1) != 1``).

    For the operands a tensor descriptor covers (:func:`tma_layout`), this means column-major
    (``stride(0) == 1``), and the transpose is row-major.
    """
    return tensor.stride(1) != 1


def tma_layout(tensor: Any) -> bool:
    """Whether ``tensor``'s strides let a tensor descriptor cover it (or its transpose, when
    column-major): one dimension contiguous, the stride between rows a multiple of 16 bytes, no
    overlapping rows. Its start address is the other condition (see :func:`tma_readable`)."""
    if tensor.stride(1) == 1:
        row_stride, row_length = tensor.stride(0), tensor.shape[1]
    elif tensor.stride(0) == 1:
        row_stride, row_length = tensor.stride(1), tensor.shape[0]
    else:
        return False
    return (row_stride * tensor.element_size()) % 16 == 0 and row_stride >= row_length


def tma_readable(tensor: Any) -> bool:
    """Whether a tensor descriptor can cover ``tensor``: :func:`tma_layout`, and its start
    16-byte aligned. Rows that overlap (a broadcast view's stride 0, say) are left to the pointer
    kernel too: TMA is not relied on for them."""
    return tma_layout(tensor) and tensor.data_ptr() % 16 == 0


@functools.cache
def shared_memory_limit(device: Any) -> int | None:
    """The shared memory a block may opt in to on CUDA ``device`` (232,448 bytes on an H100), or
    None off CUDA (the interpreter has no limit of its own)."""
    if getattr(device, "type", None) != "cuda":
        return None
    return _shared_memory_limit(device.index if device.index is not None else 0)


@functools.cache
def _shared_memory_limit(device_index: int) -> int | None:
    import torch

    properties = torch.cuda.get_device_properties(device_index)
    return getattr(properties, "shared_memory_per_block_optin", None) or None


def num_sms(device: Any) -> int:
    """The number of SMs of a CUDA ``device``: a persistent kernel's program count."""
    import torch

    return torch.cuda.get_device_properties(device).multi_processor_count
