"""FP8 products whose sizes are not multiples of 16 against the nearest aligned size, backend by
backend (issue 47's target: every FP8 backend at least 0.8x its aligned throughput).

    python benchmarks/fp8_alignment.py [--problem MxNxK ...] [--device cuda|cpu] [--json PATH]

For each problem, its aligned twin has every size rounded up to a multiple of 16. Two classes:

- ``gemm``: unscaled E4M3 operands (``float8_e4m3fn``), each backend declaring that dtype, after
  it passed its float8_e4m3fn conformance suite in this run; its plan
  (:meth:`gemmzoo.Backend.prepare`) called on operands it made, as ``gemmzoo.matmul`` would;
- ``scaled`` row-wise: every backend declaring the class, after its class cases passed, as
  ``benchmarks/classes.py`` times them (its Triton kernel without Gluon too).

Times are ``triton.testing.do_bench`` medians on CUDA (L2 flushed), medians of loops on the CPU.
A problem and its twin are timed ``--rounds`` times, in alternating order, and each row takes
the median of its rounds: the small problems are bound by the host's time per call, which moves
with the machine's load between one timing and the next.
Each row: the backend, TFLOPS at the problem, TFLOPS at the aligned twin, and their ratio (the
misaligned problem's throughput over the aligned one's), against 0.8.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import sys
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import classes  # benchmarks/classes.py: its timing, operands and contenders

#: Sizes of large LLM-like products that are not multiples of 16, none on a bundled grid.
DEFAULT_PROBLEMS = ("3000x5000x7000", "1000x3000x2000", "2047x4093x1021", "4100x14330x4090", "777x5555x1234")
CPU_PROBLEMS = ("40x56x72", "33x17x50")
TARGET = 0.8


def aligned(shape: tuple[int, int, int], to: int = 16) -> tuple[int, int, int]:
    """``shape`` with each size rounded up to a multiple of ``to``."""
    return tuple(-(-size // to) * to for size in shape)  # type: ignore[return-value]


def gemm_seconds(shape: tuple[int, int, int], device: str, checked: dict[str, bool]) -> dict[str, float]:
    """Seconds per call of each backend declaring ``float8_e4m3fn`` on ``device`` at ``shape``,
    timed only once its suite for that dtype passed (``checked`` keeps each backend's answer)."""
    import gemmzoo
    from gemmzoo.conformance import check_backend
    from gemmzoo.measure import make_problem, planned
    from gemmzoo.plugins.registry import unavailable_reason
    from gemmzoo.problems.grids import GridPoint

    found = {}
    for backend in gemmzoo.backends():
        if backend.device != device or "float8_e4m3fn" not in backend.dtypes:
            continue
        if unavailable_reason(backend) is not None:
            continue
        if backend.name not in checked:
            checked[backend.name] = check_backend(backend, ["float8_e4m3fn"]).passed
            if not checked[backend.name]:
                print(f"  {backend.name}: did not pass its float8_e4m3fn suite; not timed", flush=True)
        if not checked[backend.name]:
            continue
        problem = make_problem(backend, GridPoint(*shape, "float8_e4m3fn"))
        call = functools.partial(planned(backend, problem.a, problem.b), problem.a, problem.b)
        found[backend.name] = classes.median_time(call, device)
    return found


def medians(rounds: list[dict[str, float]]) -> dict[str, float]:
    """Each backend's median time over the rounds that timed it."""
    labels = set().union(*rounds) if rounds else set()
    return {label: statistics.median([r[label] for r in rounds if label in r]) for label in labels}


def rows_of(kind: str, shape: tuple[int, int, int], twin: tuple[int, int, int],
            at: dict[str, float], at_twin: dict[str, float]) -> list[dict[str, Any]]:
    flops, twin_flops = 2 * shape[0] * shape[1] * shape[2], 2 * twin[0] * twin[1] * twin[2]
    rows = []
    for label in sorted(set(at) & set(at_twin)):
        tflops, twin_tflops = flops / at[label] / 1e12, twin_flops / at_twin[label] / 1e12
        rows.append({"class": kind, "shape": list(shape), "aligned": list(twin), "backend": label,
                     "tflops": tflops, "aligned_tflops": twin_tflops, "ratio": tflops / twin_tflops})
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--problem", action="append", default=[], help="MxNxK (repeatable)")
    parser.add_argument("--device", default=None, choices=("cuda", "cpu"))
    parser.add_argument("--json", default=None)
    parser.add_argument("--rounds", type=int, default=3,
                        help="times each problem and its twin this many times, in alternating order "
                             "(default 3); a row's time is the median of its rounds")
    args = parser.parse_args(argv)
    import torch

    from gemmzoo.problems.grids import parse_point

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    texts = args.problem or list(DEFAULT_PROBLEMS if device == "cuda" else CPU_PROBLEMS)
    shapes = [parse_point(text)[0] for text in texts]
    where = torch.cuda.get_device_name() if device == "cuda" else "cpu"
    print(f"device {device}: {where}; torch {torch.__version__}", flush=True)
    rows: list[dict[str, Any]] = []
    checked: dict[str, bool] = {}
    verdicts: dict[tuple[str, str, str], tuple[str, str]] = {}
    for shape in shapes:
        twin = aligned(shape)
        if twin == shape:
            print(f"{'x'.join(map(str, shape))}: already aligned, skipped", flush=True)
            continue
        gemm_times: dict[tuple[int, ...], list[dict[str, float]]] = {shape: [], twin: []}
        scaled_times: dict[tuple[int, ...], list[dict[str, float]]] = {shape: [], twin: []}
        for round_ in range(args.rounds):
            for size in (shape, twin) if round_ % 2 == 0 else (twin, shape):
                gemm_times[size].append(gemm_seconds(size, device, checked))
                name = "scaled:rowwise:" + "x".join(map(str, size))
                timed = classes.run_problem(name, device, "bfloat16", verdicts=verdicts)
                scaled_times[size].append({label: s for label, s in timed["seconds"].items()
                                           if not label.startswith("torch._scaled_mm")})
                if round_ == 0:
                    for label, why in timed["refused"].items():
                        print(f"  scaled {timed['problem']}: {label} not timed: {why}", flush=True)
        found = rows_of("gemm", shape, twin, medians(gemm_times[shape]), medians(gemm_times[twin]))
        found += rows_of("scaled rowwise", shape, twin, medians(scaled_times[shape]),
                         medians(scaled_times[twin]))
        for row in found:
            mark = "ok" if row["ratio"] >= TARGET else "UNDER"
            print(f"{row['class']:15} {'x'.join(map(str, shape)):>16} -> {'x'.join(map(str, twin)):>16}  "
                  f"{row['backend']:26} {row['tflops']:9.4g} / {row['aligned_tflops']:9.4g} TFLOPS  "
                  f"x{row['ratio']:.3f} {mark}", flush=True)
        rows += found
    met = sum(row["ratio"] >= TARGET for row in rows)
    print(f"\nat least {TARGET}x the aligned throughput: {met} of {len(rows)} rows")
    if args.json:
        with open(args.json, "w") as out:
            facts = {"device": device, "where": where, "torch": torch.__version__}
            json.dump({**facts, "rows": rows}, out, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
