"""Build the Gluon kernels for sm_90a without a GPU and report what the compiler made of them.

Run as a script, in a process of its own (``python tests/gluon_build.py``): Triton's interpreter,
which the rest of the test suite runs kernels under, patches ``triton.language`` while it
interprets, and a compile in the same process afterwards can trip over what it left behind.
Prints one JSON object: for each kernel variant, its shared memory and the PTX facts the tests
check. The driver here only names the target (compiling needs no device; nothing is launched).
"""

from __future__ import annotations

import json
import os
import re
import sys
from typing import Any


def _hopper_driver() -> None:
    from triton.backends.compiler import GPUTarget
    from triton.runtime import driver

    class HopperWithoutGpu:
        def get_current_target(self) -> GPUTarget:
            return GPUTarget("cuda", 90, 32)

        def get_current_device(self) -> int:
            return 0

        def get_current_stream(self, device: int | None = None) -> int:
            return 0

    driver.set_active(HopperWithoutGpu())


def _facts(compiled: Any) -> dict[str, Any]:
    ptx = compiled.asm["ptx"]
    return {
        "shared": compiled.metadata.shared,
        "setmaxnreg": sorted(set(re.findall(r"setmaxnreg\.(inc|dec)\.sync\.aligned\.u32\s+(\d+)", ptx))),
        "mma": sorted(set(re.findall(r"wgmma\.mma_async\.sync\.aligned\.(\w+)\.f32\.(\w+)\.\w+", ptx))),
        "wait_groups": sorted(set(re.findall(r"wgmma\.wait_group\.sync\.aligned (\d+)", ptx))),
        "atomics": sorted(set(re.findall(r"atom\.global\.([\w.]+)\.[bsu]32", ptx))),
    }


def build_fp8(m: int, n: int, k: int) -> dict[str, Any]:
    import torch

    from gemmzoo_triton.core.gluon_parts import descriptors
    from gemmzoo_triton.fp8 import gluon_kernel as kernel

    config = kernel.DEFAULT_CONFIG
    x = torch.empty(m, k, dtype=torch.float8_e4m3fn)
    y = torch.empty(n, k, dtype=torch.float8_e4m3fn).T  # column-major, as the backend passes B
    c = torch.empty(m, n, dtype=torch.bfloat16)
    compiled = kernel.fp8_gluon_kernel.warmup(
        *descriptors(x, y, c, False, True, config), m, n, k, config.stages, config.group_m,
        num_warps=config.num_warps, grid=(132,))
    return _facts(compiled)


def build_grouped(m: int, n: int, k: int, dtype: str, layout: str, block_n: int,
                  sk_tiles: int = 0, split: int = 1) -> dict[str, Any]:
    import torch

    from gemmzoo_triton.core.gluon_parts import descriptors
    from gemmzoo_triton.grouped import gluon_kernel as kernel

    config = next(c for c in (kernel.WIDE, kernel.SQUARE, kernel.NARROW) if c.block_n == block_n)
    torch_dtype = getattr(torch, dtype)
    a_t, b_t = layout[0] == "T", layout[1] == "T"
    x = torch.empty(k, m, dtype=torch_dtype).T if a_t else torch.empty(m, k, dtype=torch_dtype)
    y = torch.empty(n, k, dtype=torch_dtype).T if b_t else torch.empty(k, n, dtype=torch_dtype)
    c = torch.empty(m, n, dtype=torch_dtype)
    partials = torch.empty(132 * config.block_m * config.block_n, dtype=torch.float32)
    flags = torch.zeros(132, dtype=torch.int32)
    compiled = kernel.grouped_gluon_kernel.warmup(
        *descriptors(x, y, c, a_t, b_t, config), m, n, k, partials, flags, sk_tiles, split,
        config.stages, config.group_m, a_t, b_t, split > 1, num_warps=config.num_warps, grid=(132,))
    return _facts(compiled)


def build_tf32(m: int, n: int, k: int, b_t: bool) -> dict[str, Any]:
    import torch

    from gemmzoo_triton.grouped import tf32_kernel as kernel

    config = kernel.CONFIG
    x = torch.empty(m, k)
    y = torch.empty(n, k).T if b_t else torch.empty(k, n)
    c = torch.empty(m, n)
    compiled = kernel.grouped_tf32_kernel.warmup(
        *kernel.descriptors(x, y, b_t), c, c.stride(0), m, n, k, config.stages, config.group_m, b_t,
        num_warps=config.num_warps, grid=(132,))
    facts = _facts(compiled)
    ptx = compiled.asm["ptx"]
    # the registers each MMA reads as its left operand: one set per MMA instruction in the code
    facts["left_operands"] = sorted(set(re.findall(r"wgmma\.mma_async[^{]*\{[^}]*\},\s*\{([^}]*)\}", ptx)))
    facts["mma_instructions"] = len(re.findall(r"wgmma\.mma_async", ptx))
    return facts


def main() -> int:
    os.environ.pop("TRITON_INTERPRET", None)
    _hopper_driver()
    facts = {
        "fp8 4096x4096x4096": build_fp8(4096, 4096, 4096),
        "fp8 1000x1040x2064": build_fp8(1000, 1040, 2064),
    }
    for layout in ("NN", "NT", "TN", "TT"):
        facts[f"float16 {layout} 256"] = build_grouped(1000, 2056, 1032, "float16", layout, 256)
    facts["bfloat16 NN 128"] = build_grouped(4096, 4096, 4096, "bfloat16", "NN", 128)
    facts["float16 TN 64"] = build_grouped(1000, 1000, 2040, "float16", "TN", 64)
    for layout in ("NN", "TT"):
        facts[f"float16 {layout} 128 split"] = build_grouped(2176, 2176, 2176, "float16", layout, 128, 25, 4)
    facts["tf32 NN"] = build_tf32(3000, 2000, 1000, False)
    facts["tf32 NT"] = build_tf32(3000, 2000, 1000, True)
    json.dump(facts, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
