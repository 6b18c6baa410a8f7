#!/usr/bin/env python3
"""triton-fp8's TMA kernel on a Hopper GPU: each candidate config checked, then timed against cuBLAS.

    python benchmarks/fp8_tma_sweep.py OUT_DIR [--shapes 4096x4096x4096 8192x8192x8192]
                                       [--only NAME ...] [--budget-s 200]

Every candidate (:data:`CANDIDATES`: tile, stages, warps, the split of N, persistence, the
register cap, the promotion) is launched directly, without the autotuner, on fp8 operands in
``torch._scaled_mm``'s layout (A row-major, B column-major):

1. on problems with edges (M and N not multiples of the tile, a K tail, K under one tile, fewer
   tiles than programs), each element of C, written over NaN, is judged against the float64
   product of the E4M3 values with gemmzoo's float8_e4m3fn bound (``error/bound`` at most 1);
2. at each of ``--shapes``: the same judgement, the count of elements that differ from
   ``torch._scaled_mm`` (``use_fast_accum=False``), and the median time by
   ``triton.testing.do_bench``, with ``_scaled_mm`` (and its fast accumulation) timed in the
   same run on the same operands.

Prints one line per result and, last, a table of TFLOPS and ratios to ``_scaled_mm``; writes
OUT_DIR/fp8_tma_sweep.json and .md. The compiled kernel's registers, spills and shared memory
are recorded, with the programs per SM they allow. Stops starting candidates once ``--budget-s``
seconds have passed. Not a pytest file.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from fp8 import error_ratio, operands
from gpu_results import environment, median_ms, write_results

#: Registers and shared memory of one Hopper SM, for the programs-per-SM estimate.
SM_REGISTERS = 65536
SM_SHARED = 233472
#: Shared memory the driver keeps per program.
PROGRAM_RESERVED_SHARED = 1024


@dataclass(frozen=True)
class Candidate:
    """One way to run the TMA kernel: its config and launch."""

    name: str
    bm: int
    bn: int
    stages: int
    warps: int
    split: int = 1
    split_m: int = 1
    flatten: bool = True
    #: programs per SM (0: one program per tile of C)
    per_sm: int = 1
    maxnreg: int | None = None
    promote: int = 0
    bk: int = 128


CANDIDATES = [
    Candidate("128-msplit-w4-2cta-flat", 128, 128, 3, 4, split_m=2, per_sm=2),
    Candidate("128-msplit-w4-2cta-loop", 128, 128, 3, 4, split_m=2, per_sm=2, flatten=False),
    Candidate("64x128-w4-2cta-flat", 64, 128, 4, 4, per_sm=2),
    Candidate("128w-split-2cta-flat", 128, 128, 3, 8, split=2, per_sm=2, maxnreg=128),
    Candidate("256w-split-flat", 128, 256, 3, 8, split=2),
    Candidate("256x128-msplit-flat", 256, 128, 3, 8, split_m=2),
    Candidate("128-msplit-w4-2cta-flat-FAST", 128, 128, 3, 4, split_m=2, per_sm=2, promote=-1),
    Candidate("128w-1cta-flat-FAST", 128, 128, 4, 8, promote=-1),
    Candidate("256w-flat-FAST", 128, 256, 3, 8, promote=-1),
]

#: Problems with edges, all dimensions multiples of 16 (the kernel compiles once for them and the
#: timed shapes): partial tiles in M and N, a K tail of 32, K under one tile, fewer tiles than SMs.
EDGE_SHAPES = [(1008, 1040, 1056), (528, 272, 80), (2064, 1936, 4128)]

def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", type=Path, help="directory for the JSON and markdown results")
    parser.add_argument("--shapes", nargs="+", default=["4096x4096x4096", "8192x8192x8192"], help="MxNxK")
    parser.add_argument("--only", nargs="+", help="candidate names to run (default: all)")
    parser.add_argument("--budget-s", type=float, default=200.0,
                        help="start no candidate after this many seconds")
    return parser.parse_args(argv)


def launcher(candidate: Candidate, x: Any, y: Any, c: Any) -> tuple[Any, Any]:
    """A zero-argument launch of ``candidate`` computing ``c = x @ y``, and its first launch's kernel."""
    import torch
    from triton.tools.tensor_descriptor import TensorDescriptor

    from gemmzoo_triton.fp8_tma_kernel import fp8_tma_matmul_kernel, grid_for

    m, k = x.shape
    n = y.shape[1]
    part_m, part_n = candidate.bm // candidate.split_m, candidate.bn // candidate.split
    yt = y.T
    a_desc = TensorDescriptor(x, [m, k], [x.stride(0), 1], [part_m, candidate.bk])
    b_desc = TensorDescriptor(yt, [n, k], [yt.stride(0), 1], [part_n, candidate.bk])
    c_desc = TensorDescriptor(c, [m, n], [c.stride(0), 1], [part_m, part_n])
    sms = torch.cuda.get_device_properties(x.device).multi_processor_count
    options: dict[str, Any] = {
        "PROMOTE": candidate.promote, "BLOCK_SIZE_M": candidate.bm, "BLOCK_SIZE_N": candidate.bn,
        "BLOCK_SIZE_K": candidate.bk, "GROUP_SIZE_M": 8, "SPLIT_M": candidate.split_m,
        "SPLIT_N": candidate.split,
        "FLATTEN": candidate.flatten, "PROGRAMS_PER_SM": candidate.per_sm,
        "num_warps": candidate.warps, "num_stages": candidate.stages,
    }
    if candidate.maxnreg is not None:
        options["maxnreg"] = candidate.maxnreg
    grid = grid_for(m, n, sms)(options)

    def run() -> Any:
        return fp8_tma_matmul_kernel.fn[grid](a_desc, b_desc, c_desc, m, n, k, **options)

    return run, run()


def resources(kernel: Any, candidate: Candidate) -> dict[str, Any]:
    """Registers, spills and shared memory of the compiled kernel, and the programs an SM holds."""
    try:
        regs, spills, shared = kernel.n_regs, kernel.n_spills, kernel.metadata.shared
    except AttributeError:
        return {}
    threads = 32 * candidate.warps
    by_regs = SM_REGISTERS // max(1, regs * threads)
    by_shared = SM_SHARED // (shared + PROGRAM_RESERVED_SHARED)
    return {"regs": regs, "spills": spills, "shared": shared, "programs_per_sm": min(by_regs, by_shared)}


def judge(c: Any, a16: Any, b16: Any) -> dict[str, Any]:
    """error/bound against the float64 product, and whether every element was written."""
    import torch

    ratio, _ = error_ratio(c, a16, b16)
    return {"error_ratio": ratio, "unwritten": int(torch.isnan(c).sum().item())}


def check_edges(candidate: Candidate) -> dict[str, Any]:
    """The candidate on :data:`EDGE_SHAPES`: the worst error/bound and unwritten count, and resources."""
    import torch

    worst, unwritten, info = 0.0, 0, {}
    for m, n, k in EDGE_SHAPES:
        a, b, a16, b16 = operands(m, n, k, "NT", seed=m + 2 * n + 3 * k)
        c = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
        _, kernel = launcher(candidate, a, b, c)
        torch.cuda.synchronize()
        info = info or resources(kernel, candidate)
        verdict = judge(c, a16, b16)
        worst, unwritten = max(worst, verdict["error_ratio"]), unwritten + verdict["unwritten"]
    return {"edge_error_ratio": worst, "edge_unwritten": unwritten, **info}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import torch

    start = time.monotonic()
    env = environment()
    rows: list[dict[str, Any]] = []
    candidates = [c for c in CANDIDATES if not args.only or c.name in args.only]
    shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes]
    problems = {}
    one = torch.ones((), dtype=torch.float32, device="cuda")
    for m, n, k in shapes:
        a, b, a16, b16 = operands(m, n, k, "NT", seed=m + n + k)
        b = b.t().contiguous().t()  # column-major, as _scaled_mm takes it
        reference = torch._scaled_mm(a, b, one, one, out_dtype=torch.bfloat16)
        problems[(m, n, k)] = (a, b, a16, b16, reference)
        for name, fast in (("scaled_mm", False), ("scaled_mm-fast", True)):
            def call(a=a, b=b, fast=fast):
                return torch._scaled_mm(a, b, one, one, out_dtype=torch.bfloat16, use_fast_accum=fast)

            ms = median_ms(call)
            row = {"shape": f"{m}x{n}x{k}", "variant": name, "ms": ms, "tflops": 2 * m * n * k / ms / 1e9,
                   **judge(call(), a16, b16)}
            rows.append(row)
            print(row, flush=True)

    for candidate in candidates:
        if time.monotonic() - start > args.budget_s:
            print(f"budget spent: {candidate.name} and later not run", flush=True)
            break
        base = {"variant": candidate.name, **asdict(candidate)}
        try:
            edges = check_edges(candidate)
        except Exception as error:  # a candidate that does not compile must not end the sweep
            rows.append({**base, "shape": "edges", "error": f"{type(error).__name__}: {str(error)[:400]}"})
            print(rows[-1], flush=True)
            continue
        for (m, n, k), (a, b, a16, b16, reference) in problems.items():
            row = {**base, **edges, "shape": f"{m}x{n}x{k}"}
            try:
                c = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
                run, _ = launcher(candidate, a, b, c)
                torch.cuda.synchronize()
                row.update(judge(c, a16, b16))
                differ = c.view(torch.int16) != reference.view(torch.int16)
                row["differs_from_scaled_mm"] = int(differ.sum())
                row["ms"] = median_ms(run)
                row["tflops"] = 2 * m * n * k / row["ms"] / 1e9
            except Exception as error:
                row["error"] = f"{type(error).__name__}: {str(error)[:400]}"
            rows.append(row)
            print({key: row[key] for key in row if key not in asdict(candidate)}, flush=True)
        write_results(args.out_dir, "fp8_tma_sweep", env, rows, markdown(rows, env))
    text = write_results(args.out_dir, "fp8_tma_sweep", env, rows, markdown(rows, env))
    print(text)
    print(f"sweep took {time.monotonic() - start:.0f} s")
    return 0


def markdown(rows: list[dict[str, Any]], env: dict[str, Any]) -> str:
    """The table: per variant and shape, TFLOPS, the ratio to _scaled_mm, the judgement, resources."""
    base = {r["shape"]: r["tflops"] for r in rows if r["variant"] == "scaled_mm" and "tflops" in r}
    lines = [f"# triton-fp8 TMA kernel candidates on {env['device']}", "",
             f"torch {env['torch']} (CUDA {env['cuda']}), Triton {env['triton']}, driver {env['driver']}, "
             f"{env['date']}; `{env['command']}`", "",
             "| variant | shape | TFLOPS | / scaled_mm | error/bound | edges | differ | regs | spills | smem "
             "| per SM |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['variant']} | {r['shape']} | error: {r['error'][:100]} | | | | | | | | |")
            continue
        ratio = f"{r['tflops'] / base[r['shape']]:.3f}" if r["shape"] in base else "-"
        edges = f"{r['edge_error_ratio']:.3g}/{r['edge_unwritten']}" if "edge_error_ratio" in r else "-"
        lines.append(
            f"| {r['variant']} | {r['shape']} | {r['tflops']:.0f} | {ratio} | {r['error_ratio']:.3g} | "
            f"{edges} | "
            f"{r.get('differs_from_scaled_mm', '-')} | {r.get('regs', '-')} | {r.get('spills', '-')} | "
            f"{r.get('shared', '-')} | {r.get('programs_per_sm', '-')} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
