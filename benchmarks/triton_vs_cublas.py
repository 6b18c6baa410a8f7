#!/usr/bin/env python3
"""Time the Triton backends against cuBLAS (the ``torch`` backend) on one CUDA GPU.

    python benchmarks/triton_vs_cublas.py OUT_DIR [--dtypes float16 bfloat16] [--shapes 4096x4096x4096 ...]

Each figure is the median of ``triton.testing.do_bench`` (CUDA events, L2 flushed before every
call) on random normal inputs, after a first call that compiles and autotunes, and each result
is checked against a float32 IEEE torch product first. Prints a table (TFLOPS and the ratio to
cuBLAS) and writes OUT_DIR/triton_vs_cublas.json and .md. Not a pytest file.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

SHAPES = ["1024x1024x1024", "2048x2048x2048", "4096x4096x4096", "8192x8192x8192",
          "4097x4097x4097", "1000x1000x1000", "16x4096x4096", "128x11008x4096"]
BACKENDS = ["triton-grouped", "triton-tiled", "triton-naive", "torch"]
#: triton-naive is skipped above this many flops (8192^3 would take seconds per call).
NAIVE_MAX_FLOPS = 2 * 4096**3
#: The relative error (Frobenius) a 16-bit product with fp32 accumulation stays far under.
MAX_REL_ERROR = {"float16": 2e-3, "bfloat16": 1e-2, "float32": 1e-5, "tf32": 2e-3}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", type=Path, help="directory for the JSON and markdown results")
    parser.add_argument("--dtypes", nargs="+", default=["float16", "bfloat16"])
    parser.add_argument("--shapes", nargs="+", default=SHAPES, help="MxNxK")
    parser.add_argument("--backends", nargs="+", default=BACKENDS)
    parser.add_argument("--naive-max-flops", type=float, default=NAIVE_MAX_FLOPS)
    parser.add_argument("--rounds", type=int, default=3,
                        help="timings per backend, interleaved across backends; the median is reported")
    return parser.parse_args(argv)


def environment() -> dict[str, Any]:
    import torch
    import triton

    try:
        driver = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        driver = "unknown"
    props = torch.cuda.get_device_properties(0)
    return {
        "device": torch.cuda.get_device_name(0), "sms": props.multi_processor_count, "driver": driver,
        "torch": torch.__version__, "cuda": torch.version.cuda, "triton": triton.__version__,
        "python": platform.python_version(), "command": " ".join([sys.executable, *sys.argv]),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }


def median_ms(fn: Any) -> float:
    import triton.testing

    median = triton.testing.do_bench(fn, warmup=25, rep=100, quantiles=[0.5])
    return float(median[0] if isinstance(median, (list, tuple)) else median)


def relative_error(c: Any, ref: Any) -> float:
    diff = (c.float() - ref).norm().item()
    return diff / max(ref.norm().item(), 1e-30)


def grouped_config(m: int, n: int, k: int, dtype: str) -> str:
    """The kernel and config triton-grouped ran on this problem: its pointer kernel's, or a TMA
    kernel's where the backend took that path."""
    from gemmzoo_triton import grouped_kernel

    for key, config in grouped_kernel.PICKED.items():  # keys: (kernel, M, N, K, precision, dtype, ...)
        if key[1:4] == (m, n, k) and key[5] == f"torch.{dtype}":
            kw = config.kwargs
            return (f"{key[0]} {kw['BLOCK_SIZE_M']}x{kw['BLOCK_SIZE_N']}x{kw['BLOCK_SIZE_K']} "
                    f"s{config.num_stages} w{config.num_warps}")
    return "?"


def add_ratios(rows: list[dict[str, Any]]) -> None:
    """Each measured row's TFLOPS over cuBLAS's on the same problem, as ``vs_cublas``."""
    for row in rows:
        cublas = next((r for r in rows if r["backend"] == "torch" and r["shape"] == row["shape"]
                       and r["dtype"] == row["dtype"] and "tflops" in r), None)
        if cublas and "tflops" in row:
            row["vs_cublas"] = row["tflops"] / cublas["tflops"]


def write_results(out_dir: Path, name: str, env: dict[str, Any], rows: list[dict[str, Any]],
                  text: str) -> str:
    """Write OUT_DIR/NAME.json (environment and rows) and OUT_DIR/NAME.md (``text``); return ``text``.

    Called after every problem, so that a cut-off run keeps what it measured."""
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / f"{name}.json").write_text(json.dumps({"environment": env, "rows": rows}, indent=1))
    (out_dir / f"{name}.md").write_text(text)
    return text


def save(args: argparse.Namespace, env: dict[str, Any], rows: list[dict[str, Any]]) -> str:
    """Write the JSON and markdown results."""
    add_ratios(rows)
    return write_results(args.out_dir, "triton_vs_cublas", env, rows, markdown(rows, env, args.backends))


def measure(args: argparse.Namespace, env: dict[str, Any]) -> list[dict[str, Any]]:
    import torch

    import gemmzoo

    torch.backends.cuda.matmul.allow_tf32 = False  # the reference is IEEE fp32
    backends = [gemmzoo.get_backend(name) for name in args.backends]
    rows = []
    for shape in args.shapes:
        m, n, k = (int(v) for v in shape.split("x"))
        flops = 2.0 * m * n * k
        for dtype in args.dtypes:
            torch.manual_seed(m + n + k)
            a = torch.randn(m, k, device="cuda").to(getattr(torch, dtype))
            b = torch.randn(k, n, device="cuda").to(getattr(torch, dtype))
            ref = a.float() @ b.float()
            measured = []
            for backend in backends:
                row = {"shape": shape, "m": m, "n": n, "k": k, "dtype": dtype, "backend": backend.name}
                rows.append(row)
                if backend.name == "triton-naive" and flops > args.naive_max_flops:
                    row["skipped"] = "too slow (naive kernel above --naive-max-flops)"
                    continue
                started = time.perf_counter()
                c = backend.matmul(a, b)  # compiles, and autotunes triton-grouped
                torch.cuda.synchronize()
                row["first_call_s"] = round(time.perf_counter() - started, 2)
                row["rel_error"] = relative_error(c, ref)
                row["correct"] = bool(row["rel_error"] <= MAX_REL_ERROR[dtype] and torch.isfinite(c).all())
                if backend.name == "triton-grouped":
                    row["config"] = grouped_config(m, n, k, dtype)
                row["round_ms"] = []
                measured.append((backend, row))
            # Rounds interleave the backends, so that clock or thermal drift hits all alike.
            for _ in range(args.rounds):
                for backend, row in measured:
                    row["round_ms"].append(median_ms(lambda backend=backend, a=a, b=b: backend.matmul(a, b)))
            for backend, row in measured:
                row["ms"] = statistics.median(row["round_ms"])
                row["tflops"] = flops / (row["ms"] * 1e-3) / 1e12
                spread = (max(row["round_ms"]) - min(row["round_ms"])) / row["ms"]
                print(f"{shape:>16} {dtype:>9} {backend.name:>15} {row['tflops']:8.1f} TFLOPS "
                      f"(spread {spread:.0%}) err {row['rel_error']:.1e} {row.get('config', '')}", flush=True)
            del a, b, ref
            save(args, env, rows)
    return rows


def markdown(rows: list[dict[str, Any]], env: dict[str, Any], names: list[str]) -> str:
    lines = [
        "# Triton backends vs cuBLAS", "",
        f"{env['device']} ({env['sms']} SMs), driver {env['driver']}; "
        f"torch {env['torch']} (CUDA {env['cuda']}), "
        f"Triton {env['triton']}, Python {env['python']}; {env['date']}.", "",
        f"Command: `{env['command']}`", "",
        "TFLOPS = 2·M·N·K / time; time = median over rounds (interleaved across backends) of the "
        "median of `triton.testing.do_bench` (L2 flushed); "
        "(x) = ratio to cuBLAS (`torch`) on the same problem.", "",
        "| MxNxK | dtype | " + " | ".join(names) + " | grouped config |",
        "|---|---|" + "---|" * len(names) + "---|",
    ]
    keys = list(dict.fromkeys((r["shape"], r["dtype"]) for r in rows))
    for shape, dtype in keys:
        cells, config = [], ""
        for name in names:
            row = next((r for r in rows if (r["shape"], r["dtype"], r["backend"]) == (shape, dtype, name)),
                       None)
            if row is None or "skipped" in row:
                cells.append("skipped" if row else "-")
                continue
            mark = "" if row["correct"] else " WRONG"
            ratio = f" ({row['vs_cublas']:.2f}x)" if "vs_cublas" in row and name != "torch" else ""
            cells.append(f"{row['tflops']:.0f}{ratio}{mark}")
            config = row.get("config", config)
        lines.append(f"| {shape} | {dtype} | " + " | ".join(cells) + f" | {config} |")
    skipped = sorted({(r["backend"], r["shape"]) for r in rows if "skipped" in r})
    if skipped:
        lines += ["", "Skipped: " + "; ".join(f"{b} at {s} (too slow)" for b, s in skipped) + "."]
    wrong = [r for r in rows if "correct" in r and not r["correct"]]
    lines += ["", f"Every measured result was checked against a float32 IEEE torch product "
              f"(relative Frobenius error); {len(wrong)} failed."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print("needs a CUDA GPU", file=sys.stderr)
        return 2
    env = environment()
    rows = measure(args, env)
    print(save(args, env, rows))
    return 0 if all(r.get("correct", True) for r in rows) and not any(
        math.isnan(r.get("tflops", 0.0)) for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
