#!/usr/bin/env python3
"""Skinny products against cuBLAS at the memory roofline: decode shapes (M <= 64) and long K.

    python benchmarks/skinny.py OUT_DIR [--dtypes float16 bfloat16] [--set decode longk] [--rounds 3]

For each problem: cuBLAS (``torch.matmul``) and the plans of ``triton-splitk`` and
``triton-decode`` (``backend.prepare``), each checked against a float32 IEEE torch product first,
then timed in interleaved rounds with ``triton.testing.do_bench`` (CUDA events, L2 flushed before
every call; the median). Bandwidth counts the fewest bytes a product must move: A and B read once,
C written once. The copy bandwidth is measured in the same run: a 1 GiB device-to-device copy,
bytes read plus bytes written. Prints one line per problem and backend (device time, TB/s,
fraction of the copy bandwidth, ratio of cuBLAS's time to the backend's) and writes
OUT_DIR/skinny.json and OUT_DIR/skinny.md. Not a pytest file.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path
from typing import Any

from gpu_results import MAX_REL_ERROR, environment, relative_error, write_results

#: LLM projections: (N, K) of Llama-style attention, MLP up/gate and MLP down weights.
PROJECTIONS = ((4096, 4096), (14336, 4096), (4096, 14336), (11008, 4096))
DECODE = [(m, n, k, "row") for m in (1, 8, 16, 32, 64) for n, k in PROJECTIONS]
#: B as an ``nn.Linear`` weight's transpose (column-major), as inference code passes it.
DECODE_COLUMN_MAJOR = [(m, n, k, "col") for m in (1, 16, 64) for n, k in PROJECTIONS[:2]]
LONG_K = [(s, s, k, "row") for s in (16, 64, 128, 256, 512) for k in (16384, 65536)]
SETS = {"decode": DECODE + DECODE_COLUMN_MAJOR, "longk": LONG_K}
BACKENDS = ("torch", "triton-splitk", "triton-decode")
COPY_BYTES = 1 << 30


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", type=Path, help="directory for skinny.json and skinny.md")
    parser.add_argument("--dtypes", nargs="+", default=["float16", "bfloat16"])
    parser.add_argument("--set", nargs="+", default=list(SETS), choices=list(SETS), dest="sets")
    parser.add_argument("--rep", type=int, default=50, help="do_bench's rep (ms) for each timing")
    parser.add_argument("--rounds", type=int, default=3,
                        help="interleaved timings per backend; the median counts")
    return parser.parse_args(argv)


def median_ms(fn: Any, rep_ms: int = 100) -> float:
    """The median of ``triton.testing.do_bench`` (L2 flushed before every call), in ms."""
    import triton.testing

    return float(triton.testing.do_bench(fn, warmup=max(5, rep_ms // 4), rep=rep_ms, return_mode="median"))


class CleanL2Timer:
    """Device time of one call with the L2 cache full of clean lines of unrelated data.

    ``do_bench`` empties L2 by writing a 256 MB buffer, which leaves L2 full of dirty lines: the
    timed kernel's reads then evict them, and their write-back to memory shares the bandwidth
    the kernel is measured by (a streaming kernel that reads 32 MB evicts about as many dirty
    bytes). This timer reads a 512 MB buffer before every call instead, as a decoding step finds
    L2 after the previous layer's weights were read; CUDA events around each call, the median.
    """

    def __init__(self, flush_bytes: int = 512 << 20) -> None:
        import torch

        self.buffer = torch.randn(flush_bytes // 4, device="cuda")

    def flush(self) -> None:
        self.buffer.sum()

    def warm(self, count: int = 30) -> None:
        """Keep the GPU busy for a few milliseconds, so that its clocks are up before timing."""
        for _ in range(count):
            self.flush()

    def median_ms(self, fn: Any, reps: int = 40) -> float:
        import torch

        fn()
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                  for _ in range(reps)]
        for start, end in events:
            self.flush()
            start.record()
            fn()
            end.record()
        torch.cuda.synchronize()
        return statistics.median(start.elapsed_time(end) for start, end in events)


def copy_bandwidth() -> float:
    """Bytes per second of a large device-to-device copy, counting reads and writes."""
    import torch

    source = torch.randn(COPY_BYTES // 4, device="cuda")
    target = torch.empty_like(source)
    seconds = median_ms(lambda: target.copy_(source)) * 1e-3
    return 2 * COPY_BYTES / seconds


def operands(m: int, n: int, k: int, dtype: str, layout: str) -> tuple[Any, Any]:
    import torch

    torch.manual_seed(m * 7 + n * 3 + k)
    a = torch.randn(m, k, device="cuda").to(getattr(torch, dtype))
    if layout == "col":
        b = torch.randn(n, k, device="cuda").to(getattr(torch, dtype)).T
    else:
        b = torch.randn(k, n, device="cuda").to(getattr(torch, dtype))
    return a, b


def measure_problem(m: int, n: int, k: int, layout: str, dtype: str, copy_bw: float, args: argparse.Namespace,
                    backends: list[Any], timer: CleanL2Timer) -> list[dict[str, Any]]:
    import torch

    a, b = operands(m, n, k, dtype, layout)
    ref = a.float() @ b.float()
    moved = (m * k + k * n + m * n) * a.element_size()
    rows, calls = [], []
    for backend in backends:
        run = torch.matmul if backend.name == "torch" else backend.prepare(a, b)
        c = run(a, b)
        torch.cuda.synchronize()
        error = relative_error(c, ref)
        again = run(a, b)
        row = {"shape": f"{m}x{n}x{k}", "m": m, "n": n, "k": k, "b_layout": layout, "dtype": dtype,
               "backend": backend.name, "rel_error": error, "bytes": moved,
               "correct": bool(error <= MAX_REL_ERROR[dtype] and torch.isfinite(c).all()),
               "repeatable": bool(torch.equal(c, again)), "round_ms": [], "round_ms_dobench": []}
        if backend.name != "torch":
            row["config"] = backend.config(m, n, k, a, "tf32", b).label
        rows.append(row)
        calls.append((run, row))
    timer.warm()
    for _ in range(args.rounds):  # interleaved, so that drift hits every backend alike
        for run, row in calls:
            row["round_ms"].append(timer.median_ms(lambda run=run: run(a, b)))
            row["round_ms_dobench"].append(median_ms(lambda run=run: run(a, b), args.rep))
    for suffix in ("", "_dobench"):
        cublas_ms = statistics.median(rows[0]["round_ms" + suffix])
        for row in rows:
            ms = statistics.median(row["round_ms" + suffix])
            row["ms" + suffix] = ms
            row["tb_s" + suffix] = moved / (ms * 1e-3) / 1e12
            row["of_copy" + suffix] = row["tb_s" + suffix] * 1e12 / copy_bw
            row["vs_cublas" + suffix] = cublas_ms / ms
            row["spread" + suffix] = (max(row["round_ms" + suffix]) - min(row["round_ms" + suffix])) / ms
    for row in rows:
        flag = " WRONG" if not row["correct"] else "" if row["repeatable"] else " NOT-REPEATABLE"
        print(f"{row['shape']:>15} B {layout} {dtype:>8} {row['backend']:>13} {row['ms'] * 1e3:7.1f} us "
              f"{row['tb_s']:5.2f} TB/s {row['of_copy']:4.0%} {row['vs_cublas']:5.2f}x | do_bench "
              f"{row['ms_dobench'] * 1e3:7.1f} us {row['tb_s_dobench']:5.2f} TB/s "
              f"{row['vs_cublas_dobench']:5.2f}x (spread {row['spread']:.0%}/{row['spread_dobench']:.0%}) "
              f"{row.get('config', '')}{flag}", flush=True)
    return rows


def markdown(rows: list[dict[str, Any]], env: dict[str, Any]) -> str:
    lines = [
        "# Skinny products against cuBLAS", "",
        f"{env['device']} ({env['sms']} SMs), driver {env['driver']}; torch {env['torch']} "
        f"(CUDA {env['cuda']}), Triton {env['triton']}, Python {env['python']}; {env['date']}.", "",
        f"Command: `{env['command']}`", "",
        f"Copy bandwidth (1 GiB device-to-device copy, read + write), same run: "
        f"{env['copy_tb_s']:.2f} TB/s.", "",
        "Clean L2: L2 filled with clean lines (a 512 MB read) before each call, CUDA events, median; "
        "do_bench: `triton.testing.do_bench` (L2 emptied by a 256 MB write, so the timed call also "
        "pays the write-back of the dirty lines it evicts), median. Each: median over interleaved "
        "rounds. TB/s: (M·K + K·N + M·N) · element size / time. Clean-L2 cells: µs, TB/s, fraction "
        "of the copy bandwidth, cuBLAS time / backend time; do_bench cells: TB/s, ratio.", "",
        "| M×N×K | B | dtype | " + " | ".join(BACKENDS) + " | do_bench: " + " | ".join(BACKENDS)
        + " | configs (splitk; decode) |",
        "|---|---|---|" + "---|" * (2 * len(BACKENDS)) + "---|",
    ]
    keys = list(dict.fromkeys((r["shape"], r["b_layout"], r["dtype"]) for r in rows))
    for shape, layout, dtype in keys:
        group = {r["backend"]: r for r in rows
                 if (r["shape"], r["b_layout"], r["dtype"]) == (shape, layout, dtype)}
        clean, dirty = [], []
        for name in BACKENDS:
            r = group.get(name)
            if r is None or "ms" not in r:
                clean.append("-")
                dirty.append("-")
                continue
            mark = "" if r["correct"] and r["repeatable"] else " **WRONG**"
            clean.append(f"{r['ms'] * 1e3:.1f} µs, {r['tb_s']:.2f}, {r['of_copy']:.0%}, "
                         f"{r['vs_cublas']:.2f}×{mark}")
            dirty.append(f"{r['tb_s_dobench']:.2f}, {r['vs_cublas_dobench']:.2f}×")
        configs = "; ".join(group[n]["config"] for n in BACKENDS[1:] if n in group and "config" in group[n])
        lines.append(f"| {shape} | {layout} | {dtype} | " + " | ".join(clean) + " | " + " | ".join(dirty)
                     + f" | {configs} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import torch

    import gemmzoo

    torch.backends.cuda.matmul.allow_tf32 = False
    env = environment()
    env["copy_tb_s"] = copy_bandwidth() / 1e12
    print(f"copy bandwidth {env['copy_tb_s']:.2f} TB/s (read + write)", flush=True)
    backends = [gemmzoo.get_backend(name) for name in BACKENDS]
    timer = CleanL2Timer()
    rows: list[dict[str, Any]] = []
    for set_name in args.sets:
        for m, n, k, layout in SETS[set_name]:
            for dtype in args.dtypes:
                copy_bw = env["copy_tb_s"] * 1e12
                rows += measure_problem(m, n, k, layout, dtype, copy_bw, args, backends, timer)
                write_results(args.out_dir, "skinny", env, rows, markdown(rows, env))
    bad = [r for r in rows if not (r["correct"] and r["repeatable"])]
    print(f"{len(rows)} rows; {len(bad)} wrong or not repeatable", flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
