"""float8_e4m3fn products through ``torch._scaled_mm`` (cuBLASLt on CUDA), for any shape and layout.

``torch._scaled_mm`` takes fp8 operands only in cuBLASLt's "TN" form on Hopper and Ada: A row-major
and B column-major, K and N multiples of 16, 16-byte aligned data, and float32 scale tensors. It
returns C in the dtype asked for (bfloat16 here) and, with ``use_fast_accum=False`` (what
:func:`scaled_matmul` passes), promotes the tensor cores' partial sums to fp32 as it goes; the fast
accumulation it offers otherwise keeps fewer bits and is not what gemmzoo's ``float8_e4m3fn``
promises (see docs/plugins.md).

Operands that do not meet those rules are copied once per call into buffers that do:

- A (M×K) that is not row-major with K a multiple of 16 and aligned: into a row-major M×K16
  buffer (K16 = K rounded up to 16), the extra columns zero: M·K bytes read, M·K16 written.
- B (K×N) that is not column-major with K and N multiples of 16 and aligned: into a column-major
  K16×N16 buffer, its padding zero. A row-major B (the usual ``x @ w`` layout) always takes this
  copy, a transpose of K·N bytes, small against the GEMM's time on large problems.
- When N was padded, C comes back as the first N columns of the M×N16 product, copied into a new
  contiguous M×N tensor (M·N·2 bytes more each way).

Zero padding leaves every element of C exact: the padded products are 0·0 and 0·b, and a NaN of A
or B stays in the columns and rows that C keeps. ``docs/results/2026-11-23-fp8.md`` has the measured
cost of the B copy. Problems with an empty dimension or K = 0 launch nothing.

:func:`scaled_plan` is the plan of one problem (what ``gemmzoo.matmul`` and the benchmarks call):
which operand may need a copy, into what, the unit scales and whether C is cut are decided once;
per call only the operands' addresses are checked (an unaligned one is copied). Its copies are
torch-padded's (:class:`~gemmzoo_torch.padded.PaddedCopy`): Triton's copy kernel, which writes the
zeros of the padding too, into buffers kept from call to call
(:mod:`gemmzoo_triton.core.stream_buffers`), both operands by one launch where both are copied, so
a copy is one launch and no allocation. :func:`class_scaled_plan` makes the same copies
for the ``scaled`` class (tensor-wise and row-wise scales, C in the dtype asked for), and returns
C as the M×N view of a product whose N was padded.

Nothing here imports torch at module import.
"""

from __future__ import annotations

import functools
import sys
from typing import Any

#: The oldest CUDA capability with fp8 tensor cores (Ada); Hopper is 9.0.
FP8_MIN_CAPABILITY = (8, 9)

#: ``torch._scaled_mm``'s rule for K and N, and cuBLASLt's alignment for fp8 data (bytes).
ALIGN = 16


def fp8_device_ready() -> bool | None:
    """Whether torch's current CUDA device has fp8 tensor cores and torch has ``_scaled_mm``;
    ``None`` while torch is not loaded yet.

    Never imports torch: backends are registered (and their ``dtypes`` read) before anything may
    load it. :attr:`TorchBackend.dtypes <gemmzoo_torch.backend.TorchBackend.dtypes>` declares fp8
    until the answer is known; asking the backend whether it is available loads torch, and from
    then on the answer is the device's, which every user of a backend asks first.
    """
    return _probe() if "torch" in sys.modules else None


@functools.cache
def _probe() -> bool:
    import torch

    if not (hasattr(torch, "_scaled_mm") and hasattr(torch, "float8_e4m3fn")):
        return False
    if not torch.cuda.is_available():
        return False
    return torch.cuda.get_device_capability() >= FP8_MIN_CAPABILITY


def is_fp8(x: Any) -> bool:
    """Whether ``x`` is a torch tensor of ``float8_e4m3fn``."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(x, torch.Tensor) and x.dtype == torch.float8_e4m3fn


def _round_up(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def _aligned(x: Any) -> bool:
    return x.data_ptr() % ALIGN == 0


def _a_operand(a: Any) -> Any:
    """A as ``_scaled_mm`` takes it: row-major, K a multiple of 16, aligned (copied if not)."""
    m, k = a.shape
    if a.is_contiguous() and k % ALIGN == 0 and _aligned(a):
        return a
    buffer = a.new_empty((m, _round_up(k)))
    buffer[:, :k].copy_(a)
    buffer.view(_bytes_dtype())[:, k:].zero_()  # zeroed as bytes: fp8 fills are not everywhere
    return buffer


def _b_operand(b: Any) -> Any:
    """B as ``_scaled_mm`` takes it: column-major, K and N multiples of 16, aligned (copied if not)."""
    k, n = b.shape
    if b.t().is_contiguous() and k % ALIGN == 0 and n % ALIGN == 0 and _aligned(b):
        return b
    buffer = b.new_empty((_round_up(n), _round_up(k)))  # B's transpose, row-major
    buffer[:n, :k].copy_(b.t())
    raw = buffer.view(_bytes_dtype())
    raw[n:, :].zero_()
    raw[:n, k:].zero_()
    return buffer.t()


def _bytes_dtype() -> Any:
    import torch

    return torch.uint8


@functools.cache
def _unit_scale(device: Any) -> Any:
    """A float32 scalar tensor holding 1.0 on ``device``: the contract's per-tensor scale."""
    import torch

    return torch.ones((), dtype=torch.float32, device=device)


def _scale(value: Any, device: Any) -> Any:
    import torch

    if value is None:
        return _unit_scale(device)
    if isinstance(value, torch.Tensor):
        return value.to(device=device, dtype=torch.float32).reshape(())
    return torch.tensor(float(value), dtype=torch.float32, device=device)


def scaled_matmul(a: Any, b: Any, scale_a: Any = None, scale_b: Any = None) -> Any:
    """``C = (scale_a · A) · (scale_b · B)`` in bfloat16 for float8_e4m3fn tensors A (M×K), B (K×N).

    The caller has checked the operands (2-D, same dtype, K agrees). ``scale_a`` and ``scale_b``
    are per-tensor scales (floats or one-element float32 tensors; 1 when not given). Any layout and
    shape is taken: see the module docstring for the copies that makes and what they cost.
    """
    import torch

    m, k = a.shape
    n = b.shape[1]
    if m == 0 or n == 0:
        return torch.empty((m, n), dtype=torch.bfloat16, device=a.device)
    if k == 0:
        return torch.zeros((m, n), dtype=torch.bfloat16, device=a.device)
    x, y = _a_operand(a), _b_operand(b)
    c = torch._scaled_mm(
        x, y, _scale(scale_a, a.device), _scale(scale_b, a.device),
        out_dtype=torch.bfloat16, use_fast_accum=False,
    )
    return c if c.shape[1] == n else c[:, :n].contiguous()


def _operands_plan(a: Any, b: Any) -> tuple[Any, bool]:
    """``operands(a, b)`` for fp8 operands like ``a`` (M×K, K > 0) and ``b`` (K×N): the two as
    ``_scaled_mm`` takes them, copied with their padding zeroed into kept buffers
    (:class:`~gemmzoo_torch.padded.PaddedCopy`; both by one launch where both always are) where
    their layout, sizes or (checked per call) address need it; and whether C then has N padded."""
    from gemmzoo_torch.padded import PaddedCopy, PaddedPair

    m, k = a.shape
    n = b.shape[1]
    a_ready = a.is_contiguous() and k % ALIGN == 0  # then only its address can need the copy
    b_ready = b.t().is_contiguous() and k % ALIGN == 0 and n % ALIGN == 0
    copy_a = PaddedCopy(a, m, _round_up(k), column_major=False)
    copy_b = PaddedCopy(b, _round_up(k), _round_up(n), column_major=True)
    cut = n % ALIGN != 0
    if not (a_ready or b_ready) and copy_a.by_kernel and copy_b.by_kernel:
        return PaddedPair(copy_a, copy_b), cut

    def operands(a: Any, b: Any) -> tuple[Any, Any]:
        x = a if a_ready and a.data_ptr() % ALIGN == 0 else copy_a(a)
        y = b if b_ready and b.data_ptr() % ALIGN == 0 else copy_b(b)
        return x, y

    return operands, cut


def scaled_plan(a: Any, b: Any) -> Any:
    """The plan of float8_e4m3fn operands like ``a`` (M×K) and ``b`` (K×N): what
    :func:`scaled_matmul` does with unit scales, decided once for their shapes and strides (the
    caller has checked them)."""
    import torch

    m, k = a.shape
    n = b.shape[1]
    if m == 0 or n == 0 or k == 0:
        return scaled_matmul
    scaled_mm, bf16, one = torch._scaled_mm, torch.bfloat16, _unit_scale(a.device)
    operands, cut = _operands_plan(a, b)

    def run(a: Any, b: Any) -> Any:
        x, y = operands(a, b)
        c = scaled_mm(x, y, one, one, out_dtype=bf16, use_fast_accum=False)
        return c[:, :n].contiguous() if cut else c

    return run


def class_scaled_plan(op: Any, a: Any, b: Any, scaling: str, out: Any) -> Any:
    """``run(a, b, scale_a, scale_b)``: the ``scaled`` class's product through ``op``
    (``torch._scaled_mm``) for operands like ``a`` (M×K, K > 0) and ``b`` (K×N), C in ``out``;
    ``scaling`` ``"tensorwise"`` (scalar scales) or ``"rowwise"`` (M×1 and 1×N). Decided once:
    the operands' copies of :func:`scaled_plan`; where N is padded, B's row-wise scale widened
    into a kept buffer (ones past N, which meet only zero columns) and C the M×N view of the
    padded product."""
    import torch

    from gemmzoo_triton.core.stream_buffers import StreamBuffers

    m, n = a.shape[0], b.shape[1]
    operands, cut = _operands_plan(a, b)
    rowwise = scaling == "rowwise"
    n16 = _round_up(n)
    ones = StreamBuffers(n16, torch.float32, a.device, lambda flat: flat.fill_(1.0).view(1, n16)) \
        if rowwise and cut else None

    def run(a: Any, b: Any, scale_a: Any, scale_b: Any) -> Any:
        x, y = operands(a, b)
        if not rowwise:
            scale_a, scale_b = scale_a.reshape(()), scale_b.reshape(())
        elif ones is None:
            scale_a, scale_b = scale_a.reshape(m, 1).contiguous(), scale_b.reshape(1, n).contiguous()
        else:
            wide = ones.get()
            wide[:, :n].copy_(scale_b.reshape(1, n))
            scale_a, scale_b = scale_a.reshape(m, 1).contiguous(), wide
        c = op(x, y, scale_a=scale_a, scale_b=scale_b, out_dtype=out, use_fast_accum=False)
        return c[:, :n] if cut else c

    return run
