#!/usr/bin/env python3
"""Does Triton's automatic warp specialization apply to a promoted fp8 kernel on this GPU?

    python benchmarks/fp8_warp_specialize_probe.py OUT_DIR

triton-fp8's kernel promotes each 128-deep K tile's tensor-core sum into an fp32 accumulator
(cuBLAS's ``use_fast_accum=False`` numerics), and with one program of a 128x256 tile per SM the
tensor cores wait while a program adds (docs/results/2026-11-23-h100-fp8-tma.md). cuBLAS hides
that add with warp-specialised consumers; Triton offers ``tl.range(..., warp_specialize=True)``.
This compiles a plain one-tile-per-program fp8 TMA kernel with and without it, for several tiles
and warp counts, reports whether the compiled kernel holds a ``ttg.warp_specialize`` region, its
registers and spills, how many elements differ from ``torch._scaled_mm`` and its speed against
``_scaled_mm`` (``do_bench`` median) at 4096^3 and 8192^3. Writes OUT_DIR/fp8_ws_probe.json. Not a
pytest file.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from gpu_results import environment, write_results

#: (BLOCK_M, BLOCK_N, warps, stages, warp_specialize, promote)
VARIANTS = [
    (128, 128, 8, 3, False, True), (128, 128, 8, 3, True, True),
    (128, 256, 8, 3, False, True), (128, 256, 8, 3, True, True), (128, 256, 8, 3, True, False),
    (128, 128, 4, 3, True, True), (256, 128, 8, 3, True, True), (128, 256, 8, 4, True, True),
]


def _kernel() -> Any:
    import triton
    import triton.language as tl

    from gemmzoo_triton.grouped_kernel import tile_position

    @triton.jit
    def fp8_ws_kernel(a_desc, b_desc, c_desc, M, N, K,  # noqa: N803
                      BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,  # noqa: N803
                      WS: tl.constexpr, PROMOTE: tl.constexpr, GROUP: tl.constexpr):  # noqa: N803
        pid_m, pid_n = tile_position(tl.program_id(0), tl.cdiv(M, BM), tl.cdiv(N, BN), GROUP)
        off_m, off_n = pid_m * BM, pid_n * BN
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for off_k in tl.range(0, K, BK, warp_specialize=WS):
            a = a_desc.load([off_m, off_k])
            b = b_desc.load([off_n, off_k]).T
            if PROMOTE:
                acc = acc + tl.dot(a, b)
            else:
                acc = tl.dot(a, b, acc)
        c_desc.store([off_m, off_n], acc.to(tl.bfloat16))

    return fp8_ws_kernel


def main(argv: list[str]) -> int:
    import torch
    import triton
    import triton.testing
    from triton.tools.tensor_descriptor import TensorDescriptor

    out_dir = Path(argv[1])
    kernel = _kernel()
    env = environment()
    rows: list[dict[str, Any]] = []

    def descriptor(t: Any, block: list[int]) -> Any:
        return TensorDescriptor(t, list(t.shape), list(t.stride()), block)

    for size in (4096, 8192):
        torch.manual_seed(size)
        a = torch.randn(size, size, device="cuda").to(torch.float8_e4m3fn)
        bt = torch.randn(size, size, device="cuda").to(torch.float8_e4m3fn)  # Bᵀ row-major: B column-major
        one = torch.ones((), device="cuda")
        ref = torch._scaled_mm(a, bt.T, one, one, out_dtype=torch.bfloat16)
        ms_ref = triton.testing.do_bench(lambda a=a, bt=bt, one=one: torch._scaled_mm(
            a, bt.T, one, one, out_dtype=torch.bfloat16), rep=200, return_mode="median")
        flops = 2 * size**3
        rows.append({"size": size, "variant": "scaled_mm", "ms": ms_ref, "tflops": flops / ms_ref / 1e9})
        for bm, bn, warps, stages, ws, promote in VARIANTS:
            name = f"{bm}x{bn} w{warps} s{stages} ws={ws} promote={promote}"
            row: dict[str, Any] = {"size": size, "variant": name}
            c = torch.empty(size, size, device="cuda", dtype=torch.bfloat16)
            args = (descriptor(a, [bm, 128]), descriptor(bt, [bn, 128]), descriptor(c, [bm, bn]),
                    size, size, size)
            grid = (triton.cdiv(size, bm) * triton.cdiv(size, bn),)

            def call(args: tuple = args, grid: tuple = grid, bm: int = bm, bn: int = bn, ws: bool = ws,
                     promote: bool = promote, warps: int = warps, stages: int = stages) -> Any:
                return kernel[grid](*args, BM=bm, BN=bn, BK=128, WS=ws, PROMOTE=promote, GROUP=8,
                                    num_warps=warps, num_stages=stages)

            try:
                compiled = call()
                torch.cuda.synchronize()
                row.update(specialized=compiled.asm["ttgir"].count("ttg.warp_specialize"),
                           n_regs=compiled.n_regs, n_spills=compiled.n_spills,
                           shared=compiled.metadata.shared,
                           differ_from_scaled_mm=int((c != ref).sum().item()))
                ms = triton.testing.do_bench(call, rep=200, return_mode="median")
                row.update(ms=ms, tflops=flops / ms / 1e9, vs_scaled_mm=ms_ref / ms)
            except Exception as error:  # a compiler failure is a finding here, not a crash
                row["error"] = f"{type(error).__name__}: {str(error)[-300:]}"
            rows.append(row)
            print(row, flush=True)
            write_results(out_dir, "fp8_ws_probe", env, rows, "")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
