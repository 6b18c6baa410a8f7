"""Does pytest-benchmark, through gemmzoo's device clock, report the GEMM's device time?

On a CUDA machine, for each available CUDA backend at 2048^3 and 4096^3 (float16 unless told
otherwise), compare the median time of

- ``pytest``: a real ``pytest benchmarks --benchmark-only`` run (subprocess; its JSON);
- ``clock``: the same device-clock rounds driven in this process (~20 ms of GEMMs per round);
- ``measure``: ``gemmzoo.measure.measure`` (what ``gemmzoo bench`` reports);
- ``naive``: a host timer around call + synchronize, pytest-benchmark's default way (for contrast);

with ``triton.testing.do_bench(fn, return_mode="median")`` (CUDA events, L2 flushed; the median
of three do_bench calls made between the others), and write the
ratios to OUTDIR (``gpu_timing_check.json``, ``gpu_timing_check.md``, the pytest JSON and log).
Exit status 0 when every ``pytest`` median is within 5% of do_bench's.

    python benchmarks/gpu_timing_check.py OUTDIR [--backend NAME ...] [--size N ...] [--dtype D]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
TOLERANCE = 0.05


def _pytest_medians(backends: list[str], points: list[Any], out: Path) -> dict[tuple[str, str], float]:
    json_path = out / "pytest_benchmark.json"
    command = [sys.executable, "-m", "pytest", "benchmarks/test_gemm.py", "--benchmark-only",
               "-p", "no:cacheprovider", "-q", f"--benchmark-json={json_path}",
               "--benchmark-columns=min,median,iqr,rounds"]
    command += [f"--shape={p.id}" for p in points]
    command += [f"--backend={name}" for name in backends]
    started = time.perf_counter()
    run = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
    (out / "pytest_benchmark.log").write_text(f"$ {' '.join(command)}\n\n{run.stdout}\n{run.stderr}")
    print(f"pytest benchmarks: exit {run.returncode} in {time.perf_counter() - started:.0f} s "
          f"(log: {out / 'pytest_benchmark.log'})", flush=True)
    if not json_path.exists():
        return {}
    data = json.loads(json_path.read_text())
    return {(b["params"]["gemm_backend"], b["params"]["gemm_point"]): b["stats"]["median"]
            for b in data["benchmarks"] if "gemm_backend" in b["params"]}


def _clock_median(backend: Any, problem: Any, rounds: int) -> float:
    """The device clock driven as pytest-benchmark drives it in gemmzoo (rounds of ~20 ms)."""
    from gemmzoo.measure import DeviceClock
    from gemmzoo.pytest_bench import cuda_rounds

    clock = DeviceClock()
    target = clock.wrap(lambda: backend.matmul(problem.a, problem.b))
    start = time.perf_counter()
    for _ in range(5):
        target()
    clock()
    _, iterations = cuda_rounds((time.perf_counter() - start) / 5, max_time_s=1.0, min_rounds=1)
    for _ in range(5 * iterations):  # warm-up rounds
        target()
    clock()
    samples = []
    for _ in range(rounds):  # what pytest-benchmark's pedantic runner does with this timer
        start = clock()
        for _ in range(iterations):
            target()
        samples.append((clock() - start) / iterations)
    return statistics.median(samples)


def _naive_median(backend: Any, problem: Any, rounds: int) -> float:
    samples = []
    for _ in range(rounds):
        start = time.perf_counter()
        backend.matmul(problem.a, problem.b)
        backend.synchronize()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("outdir", type=Path)
    parser.add_argument("--backend", action="append", help="CUDA backend (default: every available one)")
    parser.add_argument("--size", action="append", type=int, help="cube size (default: 2048 and 4096)")
    parser.add_argument("--dtype", default="float16")
    parser.add_argument("--rounds", type=int, default=50, help="rounds for the in-process medians")
    args = parser.parse_args(argv)
    args.outdir.mkdir(parents=True, exist_ok=True)

    import torch
    import triton
    import triton.testing

    import gemmzoo
    from gemmzoo.device import device_info
    from gemmzoo.grids import GridPoint
    from gemmzoo.measure import check, measure, prepare

    if not torch.cuda.is_available():
        print("no CUDA device: nothing to check", file=sys.stderr)
        return 2
    names = args.backend or [b.name for b in gemmzoo.backends()
                             if b.device == "cuda" and b.unavailable_reason() is None]
    backends = [gemmzoo.get_backend(n) for n in names]
    backends = [b for b in backends if args.dtype in b.dtypes]
    points = [GridPoint(s, s, s, args.dtype) for s in (args.size or [2048, 4096])]
    info = device_info("cuda")
    print(f"device: {info['device_name']}, driver {info['driver']}, torch {torch.__version__}, "
          f"triton {triton.__version__}; backends: {', '.join(b.name for b in backends)}", flush=True)

    pytest_medians = _pytest_medians([b.name for b in backends], points, args.outdir)
    rows = []
    for point in points:
        for backend in backends:
            problem = prepare(backend, point)
            check(problem)
            def do_bench_s(backend: Any = backend, problem: Any = problem) -> float:
                return triton.testing.do_bench(lambda: backend.matmul(problem.a, problem.b),
                                               warmup=50, rep=300, return_mode="median") / 1e3

            # do_bench three times, between the others, and its median as the reference: a single
            # do_bench call now and then reads far off (CuPy at 2048^3: 246 against 29 µs).
            references = [do_bench_s()]
            row = {
                "backend": backend.name, "point": point.id,
                "pytest_s": pytest_medians.get((backend.name, point.id)),
                "clock_s": _clock_median(backend, problem, args.rounds),
            }
            references.append(do_bench_s())
            row["measure_s"] = measure(backend, point, budget_s=1.0).timing.median_s
            row["naive_s"] = _naive_median(backend, problem, args.rounds)
            references.append(do_bench_s())
            row["do_bench_runs_s"] = references
            row["do_bench_s"] = statistics.median(references)
            for key in ("pytest", "clock", "measure", "naive"):
                value = row[f"{key}_s"]
                row[f"{key}_ratio"] = value / row["do_bench_s"] if value else None
            row["tflops_do_bench"] = point.flops / row["do_bench_s"] / 1e12
            rows.append(row)
            print(json.dumps(row), flush=True)

    ok = all(r["pytest_ratio"] is not None and abs(r["pytest_ratio"] - 1) <= TOLERANCE for r in rows)
    report = {"device": info, "torch": torch.__version__, "triton": triton.__version__,
              "tolerance": TOLERANCE, "passed": ok, "rows": rows}
    (args.outdir / "gpu_timing_check.json").write_text(json.dumps(report, indent=2) + "\n")

    def fmt(value: float | None, digits: int = 3) -> str:
        return "-" if value is None else f"{value:.{digits}f}"

    lines = [f"# Device-clock check on {info['device_name']} (driver {info['driver']})", "",
             f"torch {torch.__version__}, triton {triton.__version__}; ratio = median / do_bench median",
             "", "| backend | point | do_bench ms (its three runs) | TFLOPS | pytest ratio | clock ratio | "
             "measure ratio | naive (host+sync) ratio |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        runs = ", ".join(f"{t * 1e3:.4f}" for t in r["do_bench_runs_s"])
        lines.append(f"| {r['backend']} | {r['point']} | {r['do_bench_s'] * 1e3:.4f} ({runs}) | "
                     f"{r['tflops_do_bench']:.0f} | {fmt(r['pytest_ratio'])} | {fmt(r['clock_ratio'])} | "
                     f"{fmt(r['measure_ratio'])} | {fmt(r['naive_ratio'])} |")
    lines += ["", f"pytest medians within {TOLERANCE:.0%} of do_bench: {'yes' if ok else 'NO'}"]
    (args.outdir / "gpu_timing_check.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0 if ok else 1


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
