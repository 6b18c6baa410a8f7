#!/usr/bin/env python3
"""Time each config of triton-grouped's pointer kernel alone (no autotuner), beside the autotuner's pick.

    python benchmarks/grouped_configs.py OUT_DIR [--shapes 4096x4096x4096 ...] [--dtypes float16 ...]

For each problem: every config of the kernel's list plus EXTRA_CONFIGS, launched directly and
timed with ``triton.testing.do_bench`` (median, L2 flushed), each checked against torch; then the
kernel through the backend's launch path (autotuned; ``grouped_kernel.launch``, since the backend
itself takes its TMA kernels where it can) with the autotuner's pick and its timings; then the
host time of one backend call on a tiny problem. Writes OUT_DIR/grouped_configs.json. Used to
choose the configs in ``gemmzoo_triton.grouped_kernel``; not a pytest file.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

SHAPES = ["1024x1024x1024", "2048x2048x2048", "4096x4096x4096", "8192x8192x8192"]


def extra_configs() -> list[Any]:
    """Hopper candidates not (yet) in the kernel's list: BLOCK_K 64/128, deeper pipelines."""
    from gemmzoo_triton.grouped_kernel import _config

    return [
        _config(256, 128, 64, 4, 8), _config(128, 128, 64, 4, 8), _config(128, 128, 64, 5, 4),
        _config(128, 256, 32, 4, 8), _config(256, 128, 32, 4, 8), _config(128, 128, 128, 3, 8),
        _config(64, 256, 64, 5, 4), _config(128, 64, 64, 4, 4), _config(64, 128, 64, 4, 4),
    ]


def label(config: Any) -> str:
    kw = config.kwargs
    blocks = f"{kw['BLOCK_SIZE_M']}x{kw['BLOCK_SIZE_N']}x{kw['BLOCK_SIZE_K']}"
    return f"{blocks} s{config.num_stages} w{config.num_warps}"


def median_ms(fn: Any) -> float:
    import triton.testing

    median = triton.testing.do_bench(fn, warmup=25, rep=100, quantiles=[0.5])
    return float(median[0] if isinstance(median, (list, tuple)) else median)


def sweep(shape: str, dtype: str) -> dict[str, Any]:
    import torch
    import triton

    from gemmzoo_triton import grouped_kernel

    m, n, k = (int(v) for v in shape.split("x"))
    a = torch.randn(m, k, device="cuda").to(getattr(torch, dtype))
    b = torch.randn(k, n, device="cuda").to(getattr(torch, dtype))
    ref = a.float() @ b.float()
    c = torch.empty(m, n, device="cuda", dtype=a.dtype)
    jit = grouped_kernel.grouped_matmul_kernel.fn
    flops = 2.0 * m * n * k
    rows = []
    listed = grouped_kernel.grouped_matmul_kernel.configs
    configs = listed + [c for c in extra_configs() if label(c) not in {label(k) for k in listed}]
    for config in configs:
        bm, bn = config.kwargs["BLOCK_SIZE_M"], config.kwargs["BLOCK_SIZE_N"]
        grid = (triton.cdiv(m, bm) * triton.cdiv(n, bn),)

        def launch(config: Any = config, grid: tuple[int] = grid) -> None:
            jit[grid](a, b, c, m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                      c.stride(0), c.stride(1), PRECISION="tf32", ACTIVATION="", **config.kwargs,
                      num_warps=config.num_warps, num_stages=config.num_stages)

        try:
            c.fill_(float("nan"))
            launch()
            torch.cuda.synchronize()
            error = ((c.float() - ref).norm() / ref.norm()).item()
            ms = median_ms(launch)
            rows.append({"config": label(config), "ms": ms, "tflops": flops / ms / 1e9, "rel_error": error,
                         "extra": config not in listed})
        except Exception as failure:  # out of shared memory and the like
            rows.append({"config": label(config), "error": f"{type(failure).__name__}: {failure}"[:200]})
    picked = grouped_kernel.launch(a, b, c, "tf32")
    tuner = grouped_kernel.grouped_matmul_kernel
    timings = {label(cfg): t for cfg, t in getattr(tuner, "configs_timings", {}).items()}
    ms = median_ms(lambda: grouped_kernel.launch(a, b, c, "tf32"))
    cublas = median_ms(lambda: torch.matmul(a, b))
    result = {"shape": shape, "dtype": dtype, "configs": rows, "autotuned": label(picked),
              "autotuned_tflops": flops / ms / 1e9, "cublas_tflops": flops / cublas / 1e9,
              "autotuner_timings_ms": timings}
    best = max((r for r in rows if "tflops" in r), key=lambda r: r["tflops"])
    print(f"{shape} {dtype}: best {best['config']} {best['tflops']:.0f} | autotuned {result['autotuned']} "
          f"{result['autotuned_tflops']:.0f} | cuBLAS {result['cublas_tflops']:.0f}", flush=True)
    for r in sorted((r for r in rows if "tflops" in r), key=lambda r: -r["tflops"])[:6]:
        print(f"    {r['config']:>20} {r['tflops']:6.0f}{' (extra)' if r['extra'] else ''}")
    return result


def host_overhead(profile_to: Path | None = None) -> dict[str, float]:
    """Microseconds of host time per call on a 64^3 fp16 problem (no sync between calls): the
    backends, and the grouped kernel through the autotuner without gemmzoo's wrapper."""
    import cProfile
    import pstats

    import torch
    import triton

    import gemmzoo
    from gemmzoo_triton import grouped_kernel

    a = torch.randn(64, 64, device="cuda", dtype=torch.float16)
    c = torch.empty_like(a)

    def via_autotuner() -> None:
        grouped_kernel.grouped_matmul_kernel[lambda meta: (triton.cdiv(64, meta["BLOCK_SIZE_M"]) ** 2,)](
            a, a, c, 64, 64, 64, 64, 1, 64, 1, 64, 1, PRECISION="tf32", ACTIVATION="")

    backends = {name: gemmzoo.get_backend(name) for name in ("triton-grouped", "triton-tiled", "torch")}
    calls = {name: (lambda b=backend: b.matmul(a, a)) for name, backend in backends.items()}
    calls["grouped kernel via triton.autotune"] = via_autotuner
    via_autotuner()
    best = grouped_kernel.grouped_matmul_kernel.best_config.all_kwargs()
    direct_grid = (triton.cdiv(64, best["BLOCK_SIZE_M"]) * triton.cdiv(64, best["BLOCK_SIZE_N"]),)
    calls["grouped kernel direct"] = lambda: grouped_kernel.grouped_matmul_kernel.fn[direct_grid](
        a, a, c, 64, 64, 64, 64, 1, 64, 1, 64, 1, PRECISION="tf32", ACTIVATION="", **best)
    from gemmzoo_triton import tiled_kernel

    calls["tiled kernel direct"] = lambda: tiled_kernel.tiled_matmul_kernel[(1, 1)](
        a, a, c, 64, 64, 64, 64, 1, 64, 1, 64, 1, PRECISION="tf32", TILE_M=64, TILE_N=64, TILE_K=32)
    out = {}
    for name, call in calls.items():
        call()
        torch.cuda.synchronize()
        started = time.perf_counter()
        for _ in range(2000):
            call()
        out[name] = (time.perf_counter() - started) / 2000 * 1e6
        torch.cuda.synchronize()
    print("host us per call:", {k: round(v, 1) for k, v in out.items()}, flush=True)
    if profile_to is not None:
        profiler = cProfile.Profile()
        profiler.runcall(lambda: [via_autotuner() for _ in range(2000)])
        torch.cuda.synchronize()
        with profile_to.open("w") as stream:
            pstats.Stats(profiler, stream=stream).sort_stats("tottime").print_stats(25)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--shapes", nargs="+", default=SHAPES)
    parser.add_argument("--dtypes", nargs="+", default=["float16", "bfloat16"])
    parser.add_argument("--host-only", action="store_true", help="only the host time per call")
    args = parser.parse_args(argv)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    host_us = host_overhead(args.out_dir / "autotuner_profile.txt")
    record: dict[str, Any] = {"host_us": host_us, "problems": []}
    if args.host_only:
        (args.out_dir / "grouped_configs.json").write_text(json.dumps(record, indent=1))
        return 0
    for shape in args.shapes:
        for dtype in args.dtypes:
            record["problems"].append(sweep(shape, dtype))
            (args.out_dir / "grouped_configs.json").write_text(json.dumps(record, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
