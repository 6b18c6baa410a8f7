"""Build the Hopper kernels (the Gluon ones, and the ``tl`` TMA kernels of the grouped and scaled
classes) for sm_90a without a GPU and report what the compiler made of them.

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


def build_fp8_scaled(m: int, n: int, k: int, scaling: str, out: str) -> dict[str, Any]:
    import torch

    from gemmzoo.problems.classes import scale_shapes
    from gemmzoo_triton.fp8 import gluon_scaled_kernel as kernel

    c = torch.empty(m, n, dtype=getattr(torch, out))
    config = kernel.config_for(232448, c.element_size(), scaling)
    x = torch.empty(m, k, dtype=torch.float8_e4m3fn)
    y = torch.empty(n, k, dtype=torch.float8_e4m3fn).T
    sa_shape, sb_shape = scale_shapes(scaling, m, n, k)
    compiled = kernel.fp8_scaled_gluon_kernel.warmup(
        *kernel.arguments(x, y, torch.empty(sa_shape), torch.empty(sb_shape), scaling, c, config),
        SCALING={"tensorwise": 0, "rowwise": 1, "blockwise": 2}[scaling], STAGES=config.stages,
        GROUP_M=config.group_m, num_warps=config.num_warps, grid=(132,))
    facts = _facts(compiled)
    facts["stages"] = config.stages
    facts["tma_loads"] = len(re.findall(r"cp\.async\.bulk\.tensor", compiled.asm["ptx"]))
    facts["ptxas"] = _ptxas_report(compiled.asm["ptx"])
    return facts


def _ptxas_report(ptx: str) -> dict[str, Any]:
    """What Triton's own ptxas says of ``ptx`` for sm_90a: the bytes it spills and whether it
    serialises the MMAs (warnings C7514/C7515), or None where no ptxas can be run here."""
    import subprocess
    import tempfile

    import triton

    bin_dir = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin")
    ptxas = next((os.path.join(bin_dir, name) for name in ("ptxas-blackwell", "ptxas")
                  if os.path.exists(os.path.join(bin_dir, name))), None)
    if ptxas is None:
        return {"ran": False}
    with tempfile.TemporaryDirectory() as folder:
        source = os.path.join(folder, "kernel.ptx")
        with open(source, "w") as handle:
            handle.write(ptx)
        done = subprocess.run([ptxas, "-v", "--gpu-name=sm_90a", source, "-o", os.devnull],
                              capture_output=True, text=True, timeout=300)
    if done.returncode != 0:  # a ptxas older than the PTX Triton wrote: nothing to say
        return {"ran": False}
    spills = [int(n) for n in re.findall(r"(\d+) bytes spill stores", done.stderr)]
    return {"ran": True, "spill_bytes": sum(spills), "serialised": bool(re.search(r"C751[45]", done.stderr))}


def build_grouped_tma(dtype: str, config_text: str) -> dict[str, Any]:
    """The grouped class's Hopper kernel (a ``tl`` kernel: the interpreter runs it, but only a
    compile finds what the compiler refuses) on 8 groups of N=4096, K=7168."""
    import torch
    from triton.tools.tensor_descriptor import TensorDescriptor

    from gemmzoo_triton.core import grouped_mm_tma as kernel

    config = kernel.parse_config(config_text)
    m, n, k, g = 4096, 4096, 7168, 8
    torch_dtype = getattr(torch, dtype)
    fp8 = dtype == "float8_e4m3fn"
    a = torch.empty(m, k, dtype=torch_dtype)
    b_t = torch.empty(g, n, k, dtype=torch_dtype)  # fp8: each B[g] column-major; 16-bit: row-major
    a_desc = TensorDescriptor(a, [m, k], [k, 1], [config.block_m // config.split_m, config.block_k])
    if fp8:
        b_desc = TensorDescriptor(b_t, [g, n, k], [n * k, k, 1], [1, config.block_n, config.block_k])
    else:
        block = [1, config.block_k, config.block_n]
        b_desc = TensorDescriptor(b_t.view(g, k, n), [g, k, n], [n * k, n, 1], block)
    c = torch.empty(m, n, dtype=torch.bfloat16 if fp8 else torch_dtype)
    compiled = kernel.grouped_mm_tma_kernel.warmup(
        a_desc, b_desc, c, torch.empty(g, dtype=torch.int32), g, n, k, c.stride(0), B_T=fp8, PRECISION=None,
        FP8=fp8, BLOCK_SIZE_M=config.block_m, BLOCK_SIZE_N=config.block_n, BLOCK_SIZE_K=config.block_k,
        GROUP_SIZE_M=config.group_m, SPLIT_M=config.split_m, num_stages=config.stages, num_warps=config.warps,
        grid=(132,))
    return _tl_facts(compiled)


def build_scaled_tma(scaling: int) -> dict[str, Any]:
    """triton-fp8's scaled TMA kernel (``tl``) in each of its Hopper configs at 4096x7168x16384."""
    import torch
    from triton.tools.tensor_descriptor import TensorDescriptor

    from gemmzoo_triton.core import triton_internals
    from gemmzoo_triton.fp8 import scaled_tma_kernel as kernel

    m, n, k = 4096, 7168, 16384
    facts = {}
    for config in kernel.HOPPER_CONFIGS:
        kw = config.all_kwargs()
        part_m, bn, bk = kw["BLOCK_SIZE_M"] // kw["SPLIT_M"], kw["BLOCK_SIZE_N"], kw["BLOCK_SIZE_K"]
        x, y = torch.empty(m, k, dtype=torch.float8_e4m3fn), torch.empty(n, k, dtype=torch.float8_e4m3fn)
        c = torch.empty(m, n, dtype=torch.bfloat16)
        sa, sb = torch.empty(k // 128, m), torch.empty(k // 128, n // 128)
        compiled = triton_internals.jit_function(kernel.scaled_tma_kernel).warmup(
            TensorDescriptor(x, [m, k], [k, 1], [part_m, bk]), TensorDescriptor(y, [n, k], [k, 1], [bn, bk]),
            TensorDescriptor(c, [m, n], [n, 1], [part_m, bn]), sa, sb, m, n, k, 1, m, n // 128, 1,
            SCALING=scaling, DTYPE="torch.float8_e4m3fn", grid=(132,), **kw)
        facts[kernel.config_text(config)] = _tl_facts(compiled)
    return facts


def _tl_facts(compiled: Any) -> dict[str, Any]:
    ptx = compiled.asm["ptx"]
    facts = _facts(compiled)
    facts["tma_loads"] = len(re.findall(r"cp\.async\.bulk\.tensor", ptx))
    facts["ptxas"] = _ptxas_report(ptx)
    return facts


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
    from gemmzoo_triton.core import grouped_mm_tma
    facts = {
        "fp8 4096x4096x4096": build_fp8(4096, 4096, 4096),
        "fp8 1000x1040x2064": build_fp8(1000, 1040, 2064),
    }
    for scaling, out in (("tensorwise", "bfloat16"), ("rowwise", "bfloat16"), ("blockwise", "bfloat16"),
                         ("blockwise", "float32")):
        facts[f"fp8 scaled {scaling} {out}"] = build_fp8_scaled(4096, 2112, 7168, scaling, out)
    for dtype in ("bfloat16", "float8_e4m3fn"):
        size = 1 if dtype == "float8_e4m3fn" else 2
        for name, configs in (("default", "HOPPER_CONFIGS"), ("narrow", "NARROW_CONFIGS")):
            text = getattr(grouped_mm_tma, configs)[size].text()
            facts[f"grouped tma {dtype} {name}"] = build_grouped_tma(dtype, text)
    facts["scaled tma rowwise"] = build_scaled_tma(1)
    facts["scaled tma blockwise"] = build_scaled_tma(2)
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
