"""The stream-hold kernel in Triton, for machines with torch and Triton but no CuPy.

Imported only by :mod:`gemmzoo.measure.gpu_stream` when a hold is first needed (Triton compiles from
this file's source).
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def hold_kernel(flag_ptr):
    """Spin until the flag at ``flag_ptr`` (pinned host memory) is non-zero."""
    flag = tl.load(flag_ptr, volatile=True)
    while flag == 0:
        flag = tl.load(flag_ptr, volatile=True)
