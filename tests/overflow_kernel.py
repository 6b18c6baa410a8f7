"""A Triton kernel whose int32 product overflows, for ``test_triton.py``'s check of the premise of
``conftest.skip_dead_overflow_work``: the interpreter's overflow check never fires without debug."""

import triton
import triton.language as tl


@triton.jit
def times_kernel(x_ptr, out_ptr, factor, size: tl.constexpr):
    """out = x * factor in int32, wrapping where it overflows."""
    offsets = tl.arange(0, size)
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets) * factor)
