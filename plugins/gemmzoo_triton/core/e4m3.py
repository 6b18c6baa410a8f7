"""E4M3 decoding shared by the kernels that read FP8 operands (imports triton: loaded only by
kernel modules, which load when a backend is first used)."""

import triton
import triton.language as tl


@triton.jit
def e4m3_to_f16_keeping_nan(x):
    """E4M3 values in float16, with the NaN bytes (0x7F, 0xFF) as NaN: Triton's interpreter decodes
    them as ±480 (its converter knows no E4M3 NaN), in its dot and in ``.to`` alike."""
    bits = x.to(tl.uint8, bitcast=True)
    return tl.where((bits & 0x7F) == 0x7F, float("nan"), x.to(tl.float32)).to(tl.float16)
