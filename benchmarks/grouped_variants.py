#!/usr/bin/env python3
"""Time triton-grouped's kernels (pointer, TMA tiles, TMA persistent) against cuBLAS on one CUDA GPU.

    python benchmarks/grouped_variants.py OUT_DIR [--shapes 4096x4096x4096 ...] [--dtypes float16 ...]
                                          [--layouts NN TN ...] [--variants ...] [--rounds 5]

Variants: ``torch`` (cuBLAS through ``torch.matmul``); ``pointer``, the tutorial's kernel
(``grouped_kernel.launch``); ``tma-tiles`` and ``tma-persistent``, the TMA kernels
(``grouped_tma_kernel.launch``). Each allocates its C per call, as the backend does, and the
Triton ones go through the backend's launch path (the autotuner's pick, then direct launches).

Per problem, each variant is first called once (compiling and autotuning), its result checked
against a float32 IEEE torch product (relative Frobenius error within
``triton_vs_cublas.MAX_REL_ERROR``) and the config it picked printed. A variant that fails there
(a compile error, say) is recorded and left out of the timing; the others go on. Then ``--rounds``
rounds time every variant in turn with ``triton.testing.do_bench(warmup=25, rep=100,
return_mode="median")`` (L2 flushed); the median round is reported, with the spread
(max - min) / median. Writes OUT_DIR/grouped_variants.json and .md after every problem.
Not a pytest file; run after ``python3 -m pip install --no-deps --no-build-isolation -e .``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from grouped_configs import label
from triton_vs_cublas import MAX_REL_ERROR, environment, relative_error, write_results

SHAPES = ["2048x2048x2048", "4096x4096x4096", "8192x8192x8192"]
DTYPES = ["float16", "bfloat16"]
VARIANTS = ["torch", "pointer", "tma-tiles", "tma-persistent"]
#: A then B: N as stored (row-major), T a column-major view of a stored transpose.
LAYOUTS = ["NN", "TN", "NT", "TT"]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", type=Path, help="directory for the JSON and markdown results")
    parser.add_argument("--shapes", nargs="+", default=SHAPES, help="MxNxK")
    parser.add_argument("--dtypes", nargs="+", default=DTYPES, choices=DTYPES)
    parser.add_argument("--layouts", nargs="+", default=["NN"], choices=LAYOUTS)
    parser.add_argument("--variants", nargs="+", default=VARIANTS, choices=VARIANTS)
    parser.add_argument("--rounds", type=int, default=5,
                        help="timings per variant, interleaved across variants; the median is reported")
    return parser.parse_args(argv)


def variant_call(name: str) -> Callable[[Any, Any], tuple[Any, Any]]:
    """``call(a, b) -> (c, config)`` for a variant: its product, and the Triton config that ran."""
    import torch

    if name == "torch":
        return lambda a, b: (torch.matmul(a, b), None)
    if name == "pointer":
        from gemmzoo_triton.grouped_kernel import launch
    else:
        from gemmzoo_triton.grouped_tma_kernel import launch
    options = {"variant": name.removeprefix("tma-")} if name.startswith("tma-") else {}

    def call(a: Any, b: Any) -> tuple[Any, Any]:
        c = torch.empty((a.shape[0], b.shape[1]), device=a.device, dtype=a.dtype)
        return c, launch(a, b, c, "tf32", None, **options)  # "tf32": the backend's precision for 16-bit

    return call


def operands(m: int, n: int, k: int, dtype: str, layout: str) -> tuple[Any, Any]:
    import torch

    torch.manual_seed(m + n + k)
    a = torch.randn(k, m, device="cuda").T if layout[0] == "T" else torch.randn(m, k, device="cuda")
    b = torch.randn(n, k, device="cuda").T if layout[1] == "T" else torch.randn(k, n, device="cuda")
    return a.to(getattr(torch, dtype)), b.to(getattr(torch, dtype))


def median_ms(fn: Callable[[], Any]) -> float:
    import triton.testing

    return float(triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median"))


def first_call(name: str, a: Any, b: Any, ref: Any, row: dict[str, Any]) -> Callable[[], Any] | None:
    """Compile, autotune and check one variant; the timed call, or None when it failed or cannot run."""
    import torch

    from gemmzoo_triton.common import tma_eligible

    dtype = row["dtype"]
    if name.startswith("tma-"):
        probe = torch.empty((a.shape[0], b.shape[1]), device=a.device, dtype=a.dtype)
        if not tma_eligible(a, b, probe, "tf32"):
            row["skipped"] = "not TMA-eligible here (GPU, Triton version or operand layout)"
            return None
    try:
        call = variant_call(name)
        started = time.perf_counter()
        c, config = call(a, b)
        torch.cuda.synchronize()
    except Exception as failure:  # a compile error, out of resources, ...: recorded, the run goes on
        row["error"] = f"{type(failure).__name__}: {failure}"[:1000]
        print(f"    {name}: FAILED {row['error'][:200]}", flush=True)
        return None
    row["first_call_s"] = round(time.perf_counter() - started, 2)
    row["rel_error"] = relative_error(c, ref)
    row["correct"] = bool(row["rel_error"] <= MAX_REL_ERROR[dtype] and torch.isfinite(c).all())
    if config is not None:
        row["config"] = label(config)
    return lambda: call(a, b)


def measure_problem(args: argparse.Namespace, shape: str, dtype: str, layout: str) -> list[dict[str, Any]]:
    import torch

    m, n, k = (int(v) for v in shape.split("x"))
    a, b = operands(m, n, k, dtype, layout)
    ref = a.float() @ b.float()
    rows, timed = [], []
    for name in args.variants:
        row = {"shape": shape, "m": m, "n": n, "k": k, "dtype": dtype, "layout": layout, "variant": name}
        rows.append(row)
        call = first_call(name, a, b, ref, row)
        if call is not None:
            row["round_ms"] = []
            timed.append((call, row))
    # Rounds interleave the variants, so that clock or thermal drift hits all alike.
    for _ in range(args.rounds):
        for call, row in timed:
            row["round_ms"].append(median_ms(call))
    flops = 2.0 * m * n * k
    for _, row in timed:
        row["ms"] = statistics.median(row["round_ms"])
        row["tflops"] = flops / (row["ms"] * 1e-3) / 1e12
        row["spread"] = (max(row["round_ms"]) - min(row["round_ms"])) / row["ms"]
    cublas = next((r for r in rows if r["variant"] == "torch" and "tflops" in r), None)
    for row in rows:
        if cublas and "tflops" in row:
            row["vs_cublas"] = row["tflops"] / cublas["tflops"]
        if "tflops" in row:
            mark = "" if row["correct"] else " WRONG"
            ratio = f" ({row['vs_cublas']:.3f}x cuBLAS)" if "vs_cublas" in row else ""
            print(f"{shape:>16} {dtype:>9} {layout} {row['variant']:>15} {row['tflops']:7.1f} TFLOPS{ratio} "
                  f"spread {row['spread']:.1%} err {row['rel_error']:.1e} {row.get('config', '')}{mark}",
                  flush=True)
    del a, b, ref
    torch.cuda.empty_cache()
    return rows


def _where(row: dict[str, Any]) -> str:
    return f"{row['shape']} {row['dtype']} {row['layout']} {row['variant']}"


def _cell(row: dict[str, Any] | None) -> str:
    """A variant's table cell: TFLOPS, its ratio to cuBLAS, the rounds' spread; or why none."""
    if row is None:
        return "-"
    if "tflops" not in row:
        return "failed" if "error" in row else "skipped"
    ratio = f" ({row['vs_cublas']:.3f}x)" if row["variant"] != "torch" and "vs_cublas" in row else ""
    return f"{row['tflops']:.0f}{ratio} ±{row['spread']:.0%}" + ("" if row["correct"] else " WRONG")


def markdown(rows: list[dict[str, Any]], env: dict[str, Any], names: list[str]) -> str:
    lines = [
        "# triton-grouped's kernels vs cuBLAS", "",
        f"{env['device']} ({env['sms']} SMs), driver {env['driver']}; torch {env['torch']} "
        f"(CUDA {env['cuda']}), Triton {env['triton']}, Python {env['python']}; {env['date']}.", "",
        f"Command: `{env['command']}`", "",
        "TFLOPS = 2·M·N·K / time; time = median over rounds (interleaved across variants) of "
        "`triton.testing.do_bench(warmup=25, rep=100, return_mode=\"median\")` (L2 flushed); "
        "(x) = ratio to cuBLAS (`torch`) on the same problem; "
        "±: the rounds' spread, (max - min) / median.", "",
        "| MxNxK | dtype | layout | " + " | ".join(names) + " |",
        "|---|---|---|" + "---|" * len(names),
    ]
    by_problem: dict[tuple[str, str, str], dict[str, dict[str, Any]]] = {}
    for row in rows:
        by_problem.setdefault((row["shape"], row["dtype"], row["layout"]), {})[row["variant"]] = row
    for problem, variants in by_problem.items():
        cells = [_cell(variants.get(name)) for name in names]
        lines.append(f"| {' | '.join(problem)} | " + " | ".join(cells) + " |")
    lines += ["", "Configs the autotuner picked:", ""]
    lines += [f"- {_where(r)}: {r['config']}" for r in rows if "config" in r]
    failed = [r for r in rows if "error" in r]
    if failed:
        lines += ["", "Failed:", ""] + [f"- {_where(r)}: `{r['error'][:300]}`" for r in failed]
    skipped = [r for r in rows if "skipped" in r]
    if skipped:
        lines += ["", "Skipped:", ""] + [f"- {_where(r)}: {r['skipped']}" for r in skipped]
    wrong = [r for r in rows if "correct" in r and not r["correct"]]
    lines += ["", f"Every result was checked against a float32 IEEE torch product (relative Frobenius "
              f"error); {len(wrong)} failed the check."]
    return "\n".join(lines) + "\n"


def save(args: argparse.Namespace, env: dict[str, Any], rows: list[dict[str, Any]]) -> str:
    """Write the JSON and markdown results."""
    return write_results(args.out_dir, "grouped_variants", env, rows, markdown(rows, env, args.variants))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print("needs a CUDA GPU", file=sys.stderr)
        return 2
    torch.backends.cuda.matmul.allow_tf32 = False  # the reference is IEEE fp32
    env = environment()
    try:
        from gemmzoo_triton import grouped_tma_kernel

        env["tma_default_variant"] = grouped_tma_kernel.VARIANT
    except Exception as failure:  # an old Triton, say: the TMA variants then fail one by one
        env["tma_import_error"] = f"{type(failure).__name__}: {failure}"
    rows: list[dict[str, Any]] = []
    for shape in args.shapes:
        for dtype in args.dtypes:
            for layout in args.layouts:
                rows += measure_problem(args, shape, dtype, layout)
                save(args, env, rows)
    print(save(args, env, rows))
    bad = [r for r in rows if "error" in r or ("correct" in r and not r["correct"])]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
