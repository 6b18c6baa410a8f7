#!/usr/bin/env python3
"""float8_e4m3fn on one CUDA GPU: triton-fp8 and torch._scaled_mm against torch's bf16 cuBLAS.

    python benchmarks/fp8.py OUT_DIR [--shapes 4096x4096x4096 8192x8192x8192] [--layouts NT NN]
                             [--variants-conformance]

Each figure is the median of ``triton.testing.do_bench`` (CUDA events, L2 flushed before every
call) on random normal values rounded to E4M3 (to bfloat16 for the baseline), after a first call
that compiles and autotunes. Every result is first judged against the float64 product with
gemmzoo's float8_e4m3fn bound (``error_ratio``: the largest |error|/bound, at most 1 to conform).
Layouts are BLAS-style: "NT" stores B column-major, the layout ``torch._scaled_mm`` takes as is.

What is timed per shape and layout:

- ``bf16``: ``torch.matmul`` on bfloat16 tensors (cuBLAS) in the same layout;
- ``scaled_mm``: ``torch._scaled_mm`` on operands already in its layout (A row-major, B
  column-major), ``use_fast_accum=False``; ``scaled_mm-fast``: the same with fast accumulation;
- ``torch``: gemmzoo's torch backend on operands in the layout (its copies included), through its
  plan (``Backend.prepare``, the call ``gemmzoo.matmul`` makes), as every gemmzoo variant below;
- ``triton-fp8``: gemmzoo's triton-fp8 backend (on Hopper its Gluon kernel, or its Triton TMA
  kernel, where the problem allows; promotion once per K tile); ``triton-fp8-tma``: the same kept
  off the Gluon kernel (``gluon=False``); ``triton-fp8-pointer``: the same kept to its pointer kernel
  (``tma=False``); ``-tma-fast``, ``-fast`` (pointer) and ``-32`` (pointer): promoting never
  (Triton's default on Hopper) and after every 32-deep MMA instruction, each autotuned for itself.

Prints the table and the target ratios (triton-fp8 / scaled_mm and scaled_mm / bf16) and writes
OUT_DIR/fp8.json and fp8.md. With ``--variants-conformance``, also runs the conformance suite's
float8_e4m3fn cases, with two beyond the TMA kernel's size threshold, on triton-fp8 and the
variants that are not bundled (triton-fp8-tma, triton-fp8-pointer, scaled_mm-fast, triton-fp8-fast,
triton-fp8-32),
reports which conform, and for every path the block-sum roundoff its errors imply (the largest
(|C - R| - u_out·|R| - 4·sqrt(K)·u_acc·|A||B|) / |A||B|, against the bound's 2**-13) over a range
of K. Not a pytest file.
"""

from __future__ import annotations

import argparse
import functools
import math
import sys
from pathlib import Path
from typing import Any

from gpu_results import environment, median_ms, write_results

SHAPES = ["4096x4096x4096", "8192x8192x8192"]
LAYOUTS = ["NT", "NN"]
VARIANTS = ["bf16", "scaled_mm", "scaled_mm-fast", "torch", "triton-fp8", "triton-fp8-tma",
            "triton-fp8-pointer", "triton-fp8-fast", "triton-fp8-tma-fast", "triton-fp8-32"]
DEFAULT_VARIANTS = ["bf16", "scaled_mm", "scaled_mm-fast", "torch", "triton-fp8", "triton-fp8-tma",
                    "triton-fp8-pointer"]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", type=Path, help="directory for the JSON and markdown results")
    parser.add_argument("--shapes", nargs="+", default=SHAPES, help="MxNxK")
    parser.add_argument("--layouts", nargs="+", default=LAYOUTS, choices=["NN", "NT", "TN", "TT"])
    parser.add_argument("--variants", nargs="+", default=DEFAULT_VARIANTS, choices=VARIANTS)
    parser.add_argument("--variants-conformance", action="store_true",
                        help="run the suite's fp8 cases on the variants that are not bundled")
    return parser.parse_args(argv)


# Operands and the judge ------------------------------------------------------------------------


def operands(m: int, n: int, k: int, layout: str, seed: int) -> tuple[Any, Any, Any, Any]:
    """fp8 A and B on the GPU in ``layout``, and their bfloat16 copies in the same layout."""
    import torch

    generator = torch.Generator(device="cuda").manual_seed(seed)

    def make(rows: int, cols: int, transposed: bool) -> tuple[Any, Any]:
        shape = (cols, rows) if transposed else (rows, cols)
        values = torch.randn(shape, device="cuda", generator=generator)
        # E4M3 through gemmzoo's host rounding would cost seconds at 8192^2; torch's cast rounds to
        # nearest even too, and these normal values stay far inside E4M3's range.
        fp8 = values.to(torch.float8_e4m3fn)
        bf16 = fp8.to(torch.bfloat16)  # exactly the E4M3 values
        return (fp8.t(), bf16.t()) if transposed else (fp8, bf16)

    a, a16 = make(m, k, layout[0] == "T")
    b, b16 = make(k, n, layout[1] == "T")
    return a, b, a16, b16


def error_ratio(c: Any, a16: Any, b16: Any) -> tuple[float, float]:
    """The largest |C - R| / bound over the elements, with gemmzoo's float8_e4m3fn bound
    (:func:`gemmzoo.conformance.error_bound`'s formula, on the GPU), and the accumulation roundoff
    the error implies if it were all fp32's: the largest (|C - R| - u_out·|R|) / (4·sqrt(K)·|A||B|),
    to set against fp32's 2**-24 (6e-8)."""
    from gemmzoo.dtypes import dtype_info

    info = dtype_info("float8_e4m3fn")
    a64, b64 = a16.double(), b16.double()
    ref = a64 @ b64
    magnitude = a64.abs() @ b64.abs()
    k = a16.shape[1]
    accumulation = (info.block_sum_roundoff + 4 * math.sqrt(k) * info.accumulate_roundoff) * magnitude
    bound = info.unit_roundoff * ref.abs() + (1 + info.unit_roundoff) * accumulation + info.smallest_subnormal
    error = (c.double() - ref).abs()
    ratio = (error / bound).max().item()
    beyond_rounding = (error - info.unit_roundoff * ref.abs()).clamp(min=0)
    implied = (beyond_rounding / (4 * math.sqrt(k) * magnitude)).max().item()
    return ratio, implied


# The variants ----------------------------------------------------------------------------------


def scaled_mm_layout(a: Any, b: Any) -> tuple[Any, Any]:
    """A row-major and B column-major, made once outside the timed calls."""
    return a.contiguous(), b.t().contiguous().t()


def triton_fp8(promote: int | None = None, name: str = "triton-fp8", tma: bool = True,
               gluon: bool = True) -> Any:
    """The triton-fp8 backend, or a variant of it promoting partial sums as ``promote`` says and
    taking its TMA kernels or not, its Gluon kernel or not."""
    from gemmzoo_triton import TritonFp8Backend

    backend = TritonFp8Backend()
    backend.promote, backend.name, backend.tma, backend.gluon = promote, name, tma, gluon
    return backend


def picked_config(m: int, n: int, k: int) -> str:
    """The kernel and config the triton-fp8 backend ran on this problem (the Gluon kernel's where
    it takes the problem, else the autotuned TMA or pointer kernel's)."""
    import torch

    from gemmzoo_triton.common import gluon_shared_memory
    from gemmzoo_triton.fp8_backend import GLUON_MIN_MN
    from gemmzoo_triton.grouped_kernel import PICKED

    shared = gluon_shared_memory(torch.device("cuda", torch.cuda.current_device()))
    if shared is not None and min(m, n) >= GLUON_MIN_MN and k % 16 == 0:
        from gemmzoo_triton import fp8_gluon_kernel

        return f"fp8_gluon_kernel: {fp8_gluon_kernel.config_for(shared)}"

    for kernel in ("fp8_tma_matmul_kernel", "fp8_matmul_kernel"):
        for key, config in PICKED.items():
            if key[0] == kernel and key[1:4] == (m, n, k) and key[4] == 0:
                return f"{key[0]}: {config}"
    return "?"


def calls_for(a: Any, b: Any, a16: Any, b16: Any, variants: list[str]) -> dict[str, Any]:
    """One zero-argument call per variant, on these operands."""
    import torch

    import gemmzoo

    one = torch.ones((), dtype=torch.float32, device="cuda")
    torch_backend, triton_backend = gemmzoo.get_backend("torch"), gemmzoo.get_backend("triton-fp8")
    extra = {
        "triton-fp8-tma": triton_fp8(None, "triton-fp8-tma", gluon=False),
        "triton-fp8-pointer": triton_fp8(None, "triton-fp8-pointer", tma=False),
        "triton-fp8-fast": triton_fp8(-1, "triton-fp8-fast", tma=False),
        "triton-fp8-tma-fast": triton_fp8(-1, "triton-fp8-tma-fast"),
        "triton-fp8-32": triton_fp8(32, "triton-fp8-32", tma=False),
    }
    sa, sb = scaled_mm_layout(a, b)
    calls = {
        "bf16": lambda: torch.matmul(a16, b16),
        "scaled_mm": lambda: torch._scaled_mm(sa, sb, one, one, out_dtype=torch.bfloat16),
        "scaled_mm-fast": lambda: torch._scaled_mm(sa, sb, one, one, out_dtype=torch.bfloat16,
                                                   use_fast_accum=True),
        # gemmzoo's backends through their plans, the call gemmzoo.matmul makes
        "torch": functools.partial(torch_backend.prepare(a, b), a, b),
        "triton-fp8": functools.partial(triton_backend.prepare(a, b), a, b),
        **{name: functools.partial(backend.prepare(a, b), a, b) for name, backend in extra.items()},
    }
    return {name: calls[name] for name in variants if name in calls}


def measure(args: argparse.Namespace, env: dict[str, Any], rows: list[dict[str, Any]]) -> None:
    import torch

    for shape in args.shapes:
        m, n, k = (int(v) for v in shape.split("x"))
        for layout in args.layouts:
            a, b, a16, b16 = operands(m, n, k, layout, seed=m + n + k)
            try:
                calls = calls_for(a, b, a16, b16, args.variants)
            except Exception as error:
                rows.append({"shape": shape, "layout": layout, "variant": "setup",
                             "error": f"{type(error).__name__}: {error}"})
                print(format_row(rows[-1]), flush=True)
                continue
            for name, call in calls.items():
                row: dict[str, Any] = {"shape": shape, "layout": layout, "variant": name}
                try:
                    c = call()
                    torch.cuda.synchronize()
                    if name != "bf16":
                        row["error_ratio"], row["implied_acc_roundoff"] = error_ratio(c, a16, b16)
                    del c
                    row["ms"] = median_ms(call)
                    row["tflops"] = 2 * m * n * k / row["ms"] / 1e9
                except Exception as error:  # a failing variant must not end the run
                    row["error"] = f"{type(error).__name__}: {error}"
                if name == "triton-fp8" and "error" not in row:
                    row["config"] = picked_config(m, n, k)
                rows.append(row)
                print(format_row(row), flush=True)
                write_results(args.out_dir, "fp8", env, rows, markdown(rows, env))


# Conformance of the variants -------------------------------------------------------------------


def scaled_mm_fast() -> Any:
    """The torch backend with ``use_fast_accum=True``: not a conforming fp8 path; here to be judged."""
    import torch

    from gemmzoo_torch import TorchBackend, fp8

    class ScaledMmFast(TorchBackend):
        name = "scaled-mm-fast"

        def matmul(self, a: Any, b: Any) -> Any:
            self.check_operands(a, b)
            m, k = a.shape
            n = b.shape[1]
            if min(m, n, k) == 0:
                return fp8.scaled_matmul(a, b)
            x, y = fp8._a_operand(a), fp8._b_operand(b)
            one = fp8._unit_scale(a.device)
            c = torch._scaled_mm(x, y, one, one, out_dtype=torch.bfloat16, use_fast_accum=True)
            return c if c.shape[1] == n else c[:, :n].contiguous()

    return ScaledMmFast()


def implied_block_roundoff(backend: Any, k: int, seed: int) -> tuple[float, float]:
    """(error/bound, implied block-sum roundoff) of ``backend`` on a 256x256xK product (NT)."""
    from gemmzoo.dtypes import dtype_info

    a, b, a16, b16 = operands(256, 256, k, "NT", seed)
    c = backend.matmul(a, b).double()
    info = dtype_info("float8_e4m3fn")
    ref = a16.double() @ b16.double()
    magnitude = a16.double().abs() @ b16.double().abs()
    error = (c - ref).abs()
    fp32_part = 4 * math.sqrt(k) * info.accumulate_roundoff * magnitude
    beyond = (error - info.unit_roundoff * ref.abs() - fp32_part).clamp(min=0) / magnitude
    ratio, _ = error_ratio(c, a16, b16)
    return ratio, beyond.max().item()


def variants_conformance(out: list[str]) -> None:
    """The suite's float8_e4m3fn cases (CPU shapes, one long-K GPU shape, two past the TMA
    kernel's threshold) on triton-fp8 and the variants, and the block-sum roundoff every path's errors
    imply over K from 32 to 8192."""
    import gemmzoo
    from gemmzoo.conformance import Case, conformance_cases, run_case

    big = (2112, 2080, 2064, "float8_e4m3fn")  # past TMA_MIN_WORK: the TMA kernel, tails included
    cases = [*conformance_cases("float8_e4m3fn", "cpu"), Case("random", 64, 2048, 8192, "float8_e4m3fn"),
             Case("random", *big), Case("random", *big, "TT")]
    variants = [triton_fp8(None, "triton-fp8-tma", gluon=False),
                triton_fp8(None, "triton-fp8-pointer", tma=False), scaled_mm_fast(),
                triton_fp8(-1, "triton-fp8-fast", tma=False), triton_fp8(32, "triton-fp8-32", tma=False)]
    for backend in [gemmzoo.get_backend("triton-fp8"), *variants]:
        results = [run_case(backend, case) for case in cases]
        failed = [r for r in results if not r.passed]
        line = f"{backend.name}: {len(results) - len(failed)} of {len(results)} cases conform"
        if failed:
            line += "; failed: " + ", ".join(r.check for r in failed[:6])
            line += f"; first: {failed[0].detail[:160]}"
        out.append(line)
        print(line, flush=True)
    paths = [gemmzoo.get_backend("torch"), gemmzoo.get_backend("triton-fp8"), *variants]
    for backend in paths:
        figures = []
        for k in (32, 64, 128, 512, 4096, 8192):
            ratio, implied = implied_block_roundoff(backend, k, seed=k)
            figures.append(f"K={k}: {ratio:.2f} of the bound, u_blk {implied:.2g}"
                           + (f" (2**{math.log2(implied):.1f})" if implied > 0 else ""))
        line = f"{backend.name}: " + "; ".join(figures)
        out.append(line)
        print(line, flush=True)


# Output ----------------------------------------------------------------------------------------


def format_row(row: dict[str, Any]) -> str:
    if "error" in row:
        return f"{row['shape']:>16} {row['layout']} {row['variant']:<17} error: {row['error'][:200]}"
    ratio = row.get("error_ratio")
    judged = "-" if ratio is None else f"{ratio:.3g}"
    implied = row.get("implied_acc_roundoff")
    return (f"{row['shape']:>16} {row['layout']} {row['variant']:<17} {row['ms']:8.4f} ms "
            f"{row['tflops']:7.0f} TFLOPS  error/bound {judged}"
            + ("" if implied is None else f"  implied u_acc {implied:.2g}"))


def ratio_lines(rows: list[dict[str, Any]]) -> list[str]:
    """The targets: triton-fp8 / scaled_mm (>= 0.9) and scaled_mm / bf16 (>= 1.5), per shape and layout."""
    lines = []
    keys = dict.fromkeys((r["shape"], r["layout"]) for r in rows)
    for shape, layout in keys:
        found = {r["variant"]: r for r in rows
                 if (r["shape"], r["layout"]) == (shape, layout) and "tflops" in r}
        parts = []
        for top, bottom in (("triton-fp8", "scaled_mm"), ("triton-fp8-pointer", "scaled_mm"),
                            ("scaled_mm", "bf16"), ("torch", "scaled_mm"),
                            ("triton-fp8-tma-fast", "scaled_mm-fast"), ("triton-fp8-32", "scaled_mm")):
            if top in found and bottom in found:
                parts.append(f"{top}/{bottom} = {found[top]['tflops'] / found[bottom]['tflops']:.2f}")
        lines.append(f"{shape} {layout}: " + "; ".join(parts))
    return lines


def markdown(rows: list[dict[str, Any]], env: dict[str, Any], conformance: list[str] | None = None) -> str:
    lines = [f"# fp8 on {env['device']}", "",
             f"torch {env['torch']} (CUDA {env['cuda']}), Triton {env['triton']}, driver {env['driver']}, "
             f"{env['date']}; `{env['command']}`", "",
             "| shape | layout | variant | ms | TFLOPS | error/bound | config |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        if "error" in r:
            error = r["error"][:120].replace("|", "/")
            lines.append(f"| {r['shape']} | {r['layout']} | {r['variant']} | error | {error} | | |")
            continue
        ratio = r.get("error_ratio")
        lines.append(f"| {r['shape']} | {r['layout']} | {r['variant']} | {r['ms']:.4f} | {r['tflops']:.0f} | "
                     f"{'-' if ratio is None else f'{ratio:.3g}'} | {r.get('config', '')} |")
    lines += ["", "Ratios (TFLOPS over TFLOPS, same run):", ""] + [f"- {line}" for line in ratio_lines(rows)]
    if conformance:
        lines += ["", "Conformance of the variants:", ""] + [f"- {line}" for line in conformance]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print("needs a CUDA GPU", file=sys.stderr)
        return 2
    env = environment()
    rows: list[dict[str, Any]] = []
    measure(args, env, rows)
    conformance: list[str] = []
    if args.variants_conformance:
        variants_conformance(conformance)
    text = write_results(args.out_dir, "fp8", env, rows, markdown(rows, env, conformance))
    print(text)
    return 0 if not any("error" in r for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
