"""Shapes whose K or N is not a whole number of 16 bytes: torch-padded and triton-grouped against
cuBLAS, timed in the same run.

For each shape and dtype: cuBLAS (``torch.matmul`` with torch's default switches) on the
operands, cuBLAS on the shape padded to 16-byte multiples (the "aligned speed" the target
compares with: cuBLAS below half of it is where the ≥ 2× target applies), the same padded product
with the switches gemmzoo's cuBLAS backends hold (fp32 reductions), then the prepared plans of the
backends named. Every result is checked against an fp32 IEEE product first.
Device time: median of ``triton.testing.do_bench`` (L2 flushed before every call); TFLOPS count
the shape's own 2·M·N·K.

    python3 benchmarks/misaligned.py OUT_DIR [--shapes 4097x4097x4097 ...] [--dtypes float16 bfloat16]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from gpu_results import MAX_REL_ERROR, MISALIGNED, environment, median_ms, relative_error, write_results

#: (shape, dtypes): the shared list of misaligned shapes, and one aligned shape, where
#: torch-padded must be cuBLAS itself.
SHAPES = [*MISALIGNED, ((4096, 4096, 4096), ("float16",))]


def parse_shape(text: str) -> tuple[int, int, int]:
    m, n, k = (int(part) for part in text.lower().split("x"))
    return m, n, k


def measure(shape: tuple[int, int, int], dtype_name: str, backends: list[str]) -> dict[str, Any]:
    import torch

    import gemmzoo
    from gemmzoo_triton.aligned import padded as padded_length

    m, n, k = shape
    dtype = getattr(torch, dtype_name)
    generator = torch.Generator(device="cuda").manual_seed(m * 7 + n * 3 + k)
    a = torch.randn(m, k, device="cuda", dtype=dtype, generator=generator)
    b = torch.randn(k, n, device="cuda", dtype=dtype, generator=generator)
    previous = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    reference = a.float() @ b.float()
    torch.backends.cuda.matmul.allow_tf32 = previous

    def tflops(ms: float) -> float:
        return 2 * m * n * k / (ms * 1e-3) / 1e12

    row: dict[str, Any] = {"shape": f"{m}x{n}x{k}", "dtype": dtype_name}
    row["cublas"] = tflops(median_ms(lambda: torch.matmul(a, b)))
    kp, np_ = padded_length(k, a.element_size()), padded_length(n, a.element_size())
    padded = torch.nn.functional.pad(a, (0, kp - k)), torch.nn.functional.pad(b, (0, np_ - n, 0, kp - k))
    row["cublas_aligned"] = tflops(median_ms(lambda: torch.matmul(*padded)))
    # the padded product as gemmzoo's cuBLAS backends launch it: fp32 reductions (no split-K
    # partial sums in the 16-bit type), the switch torch.matmul leaves on by default
    launch = gemmzoo.get_backend("torch").prepare(*padded)
    row["cublas_aligned_fp32_reduction"] = tflops(median_ms(lambda: launch(*padded)))
    for name in backends:
        run = gemmzoo.get_backend(name).prepare(a, b)
        c = run(a, b)
        row[f"{name}_rel_error"] = relative_error(c, reference)
        if row[f"{name}_rel_error"] > MAX_REL_ERROR[dtype_name]:
            row[name] = None  # wrong: not timed
            continue
        row[name] = tflops(median_ms(lambda run=run: run(a, b)))
        row[f"{name}_ratio"] = row[name] / row["cublas"]
    return row


def table(rows: list[dict[str, Any]], backends: list[str]) -> str:
    head = ["shape", "dtype", "cuBLAS", "cuBLAS padded", "padded, fp32 reductions", *backends]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        cells = [row["shape"], row["dtype"], f"{row['cublas']:.0f}",
                 f"{row['cublas_aligned']:.0f} ({row['cublas'] / row['cublas_aligned']:.2f})",
                 f"{row['cublas_aligned_fp32_reduction']:.0f}"]
        for name in backends:
            value = row.get(name)
            cells.append("wrong" if value is None else f"{value:.0f} ({row[name + '_ratio']:.2f}×)")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--shapes", nargs="+", type=parse_shape, help="instead of the default list")
    parser.add_argument("--dtypes", nargs="+", help="with --shapes (default float16)")
    parser.add_argument("--backends", nargs="+", default=["torch-padded", "triton-grouped"])
    args = parser.parse_args(argv)
    shapes = SHAPES if not args.shapes else [(s, tuple(args.dtypes or ["float16"])) for s in args.shapes]
    env, rows = environment(), []
    for shape, dtypes in shapes:
        for dtype_name in dtypes:
            rows.append(measure(shape, dtype_name, args.backends))
            text = write_results(args.out_dir, "misaligned", env, rows, table(rows, args.backends))
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
