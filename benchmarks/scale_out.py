"""One sweep on one GPU against the same sweep on two (``gemmzoo bench --devices 0,1``).

    python3 benchmarks/scale_out.py OUTDIR [--budget SECONDS] [--executor local|slurm]

With ``--executor slurm`` both timed runs go through submitit's local executor
(``--executor slurm --slurm-cluster local``): one array task on GPU 0 against two tasks on GPUs 0
and 1, each task a fresh process that earns its verdicts on its GPU (the warm-up run stores them,
so the timed runs reuse them); OUTDIR also gets report.html (the two runs side by side) and
scale_out.json the compare verdict counts at the default threshold.

Needs two CUDA GPUs. Steps (each command's output ends up in the printed log):

1. the GPU check against the host check (``gemmzoo.conformance.verify``): the same verdict and error ratio at
   2048³ fp16, a planted wrong element caught, and the time of each at 4096³ fp32;
2. a warm-up sweep over the grid on both GPUs with a tiny budget, so that Triton's compiled
   kernels and autotuning results (kept on disk) are there for both timed runs alike;
3. the sweep timed on one GPU (``gemmzoo bench``, in one process) and on two
   (``gemmzoo bench --devices 0,1``): wall time of each whole command, process start included,
   and the start-up alone (the same command on one point with a tiny budget);
4. each result of the two-GPU run against the one-GPU run (``gemmzoo compare``), and the largest
   difference of medians.

OUTDIR gets one.json and two.json (the two runs), compare.txt and scale_out.json (the figures);
the last line printed is a summary.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BACKENDS = ("torch", "cupy", "triton-grouped")
DTYPE = "float32"  # IEEE fp32: every GEMM of the grid runs for milliseconds, so timings are steady
# Each runs for 1-4 ms in fp32 on an H200, with a result of at most 16.7 M elements and operands
# of at most 33.5 M: making the operands and judging a result are O(M·N + M·K + K·N) host work.
SHAPES = (
    "3072x3072x3072", "4096x4096x4096", "2048x2048x8192", "2048x2048x16384", "3072x3072x8192",
    "4096x4096x6144", "2048x8192x4096", "8192x2048x4096", "4096x2048x8192", "2048x4096x8192",
    "3072x4096x6144", "4096x3072x4096",
)


def bench_args(budget: float, backends: tuple[str, ...] = BACKENDS, shapes: tuple[str, ...] = SHAPES,
               ) -> list[str]:
    args = [sys.executable, "-m", "gemmzoo", "bench", "--dtype", DTYPE, "--budget", str(budget)]
    for backend in backends:
        args += ["--backend", backend]
    for shape in shapes:
        args += ["--shape", shape]
    return args


def executor_args(executor: str, devices: str, folder: Path) -> list[str]:
    """The options that put a run on ``devices`` through ``executor``."""
    if executor == "local":
        return ["--devices", devices] if "," in devices else []
    return ["--executor", "slurm", "--slurm-cluster", "local", "--devices", devices,
            "--workers", str(len(devices.split(","))), "--results-dir", str(folder)]


def verdict_counts(one: Path, two: Path) -> dict[str, int]:
    """How many rows of each verdict ``gemmzoo compare`` gives at its default threshold."""
    done = subprocess.run([sys.executable, "-m", "gemmzoo", "compare", str(one), str(two),
                           "--format", "json"], capture_output=True, text=True)
    counts: dict[str, int] = {}
    try:
        rows = json.loads(done.stdout)
    except ValueError:
        return {"unreadable": 1}
    for row in rows if isinstance(rows, list) else rows.get("rows", []):
        verdict = str(row.get("verdict"))
        counts[verdict] = counts.get(verdict, 0) + 1
    return counts


def run(name: str, args: list[str], keep: Path | None = None) -> tuple[float, int]:
    """Run ``args`` and print the end of its output (all of it into ``keep`` if given);
    returns (wall seconds, exit status)."""
    began = time.perf_counter()
    done = subprocess.run(args, capture_output=True, text=True, env={**os.environ, "COLUMNS": "200"})
    wall = time.perf_counter() - began
    text = f"$ {' '.join(args)}\n{done.stdout}\n{done.stderr}"
    if keep is not None:
        keep.write_text(text)
    tail = "\n".join(text.splitlines()[-40:])
    print(f"--- {name}: {wall:.1f} s, exit {done.returncode}\n{tail}", flush=True)
    return wall, done.returncode


def verify_check() -> dict[str, object]:
    """The float64 reference on the GPU against the host's, on this GPU."""
    import numpy as np
    import torch

    import gemmzoo
    from gemmzoo.conformance.bounds import error_bound, reference
    from gemmzoo.conformance.judge import CheckFailedError, judge_result
    from gemmzoo.conformance.verify import device_reference
    from gemmzoo.measure import make_problem
    from gemmzoo.problems.grids import GridPoint

    backend = gemmzoo.get_backend("torch")
    found: dict[str, object] = {}
    problem = make_problem(backend, GridPoint(2048, 2048, 2048, "float16"), seed=1)
    c = backend.matmul(problem.a, problem.b)
    on_device = device_reference(problem.a, problem.b)
    on_host = reference(problem.a_host, problem.b_host)
    assert on_device is not None, "the reference was not computed on the GPU"
    found["product_max_diff_over_magnitude"] = float(np.max(np.abs(on_device[0] - on_host[0]) / on_host[1]))
    verdicts = [judge_result(backend, "float16", problem.a, c, problem.a_host, problem.b_host, reference=ref)
                for ref in (on_device, on_host)]
    found["error_ratio_device_ref"], found["error_ratio_host_ref"] = (v.error_ratio for v in verdicts)
    wrong = c.clone()
    bound = error_bound("float16", 2048, on_device[0], on_device[1])
    wrong[100, 200] += float(4 * bound[100, 200])
    try:
        judge_result(backend, "float16", problem.a, wrong, problem.a_host, problem.b_host,
                     reference=on_device)
        found["planted_error_caught"] = False
    except CheckFailedError as error:
        found["planted_error_caught"] = str(error)
    problem = make_problem(backend, GridPoint(4096, 4096, 4096, "float32"), seed=2)
    for _ in range(2):  # the second of each is timed: cuBLAS handles and the like are made by then
        torch.cuda.synchronize()
        began = time.perf_counter()
        device_reference(problem.a, problem.b)
        found["device_reference_4096_fp32_s"] = time.perf_counter() - began
    began = time.perf_counter()
    reference(problem.a_host, problem.b_host)
    found["host_reference_4096_fp32_s"] = time.perf_counter() - began
    return found


def compare_results(one: Path, two: Path) -> dict[str, object]:
    """Medians of the two runs side by side: the largest relative difference, and the GPU each
    two-GPU result came from."""
    first = {(r["point"], r["backend"]): r for r in json.loads(one.read_text())["results"]}
    second = {(r["point"], r["backend"]): r for r in json.loads(two.read_text())["results"]}
    rows = []
    for key, a in first.items():
        b = second.get(key)
        if a["status"] != "ok" or not b or b["status"] != "ok":
            rows.append({"point": key[0], "backend": key[1], "one": a["status"], "two": b and b["status"]})
            continue
        diff = b["median_s"] / a["median_s"] - 1
        rows.append({"point": key[0], "backend": key[1], "one_ms": a["median_s"] * 1e3,
                     "two_ms": b["median_s"] * 1e3, "diff_percent": 100 * diff,
                     "gpu_two": (b.get("gpu") or {}).get("index"),
                     "gpu_one": (a.get("gpu") or {}).get("index"),
                     "sm_clock_one": (a.get("gpu") or {}).get("sm_clock_mhz"),
                     "sm_clock_two": (b.get("gpu") or {}).get("sm_clock_mhz")})
    diffs = [abs(r["diff_percent"]) for r in rows if "diff_percent" in r]
    return {"rows": rows, "compared": len(diffs), "max_abs_diff_percent": max(diffs) if diffs else None,
            "within_3_percent": sum(d <= 3 for d in diffs)}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("outdir")
    parser.add_argument("--budget", type=float, default=2.0, help="timing budget per backend and point")
    parser.add_argument("--deadline", type=float, default=0.0,
                        help="seconds this script may take; the budget shrinks (for both timed runs alike) "
                             "to fit what is left after the warm-up (0: no limit)")
    parser.add_argument("--skip-verify", action="store_true")
    parser.add_argument("--backend", action="append", help="instead of the three above (a dry run)")
    parser.add_argument("--shape", action="append", help="instead of the grid above (a dry run)")
    parser.add_argument("--executor", choices=("local", "slurm"), default="local",
                        help="local: in one process against --devices 0,1; slurm: both runs through "
                             "submitit's local executor (one task on GPU 0 against two on GPUs 0 and 1)")
    args = parser.parse_args()
    backends, shapes = tuple(args.backend or BACKENDS), tuple(args.shape or SHAPES)
    out = Path(args.outdir)
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    summary: dict[str, object] = {"shapes": shapes, "backends": backends, "dtype": DTYPE,
                                  "budget_s": args.budget, "executor": args.executor}

    def save() -> None:  # after every step: a run cut short still leaves its figures
        summary["script_s"] = time.perf_counter() - started
        (out / "scale_out.json").write_text(json.dumps(summary, indent=1))

    try:
        smi = subprocess.run(["nvidia-smi", "--query-gpu=index,name,uuid,driver_version,clocks.sm,power.draw,"
                              "power.limit", "--format=csv"], capture_output=True, text=True).stdout
    except OSError as error:
        smi = f"nvidia-smi: {error}"
    summary["nvidia_smi"] = smi
    print(smi, flush=True)
    import torch
    import triton

    summary["versions"] = {"torch": torch.__version__, "triton": triton.__version__,
                           "cuda": torch.version.cuda, "python": sys.version.split()[0]}
    if not args.skip_verify:
        summary["verify"] = verify_check()
        print("verify:", json.dumps(summary["verify"]), flush=True)
        save()
    scratch = Path(tempfile.mkdtemp())
    if args.executor != "local":  # verdicts earned once, kept in this cache, reused by the timed runs
        os.environ["GEMMZOO_CACHE_DIR"] = str(scratch / "sweep-cache")
    warm = [*bench_args(0.02, backends, shapes), *executor_args(args.executor, "0,1", scratch / "warm"),
            "--json", str(scratch / "warm.json")]
    summary["warm_s"], _ = run("warm", warm)
    save()
    # The main process alone, on a one-point grid: what a command costs before it measures.
    summary["startup_s"], _ = run("startup", [*bench_args(0.001, backends, shapes[:1])])
    save()
    budget = args.budget
    if args.deadline:
        left = args.deadline - (time.perf_counter() - started) - 20
        per_call = 1.2  # operands, the judge and the warm-up, per backend and point (a guess)
        fitting = (left / 1.6 - 2 * summary["startup_s"]) / (len(shapes) * len(backends)) - per_call
        budget = min(budget, max(0.3, round(fitting, 2)))
    summary["timed_budget_s"] = budget
    print(f"timed runs: budget {budget} s per backend and point", flush=True)
    timed = bench_args(budget, backends, shapes)
    one_wall, one_rc = run("one_gpu", [*timed, *executor_args(args.executor, "0", scratch / "one"),
                                       "--json", str(out / "one.json")])
    summary.update(one_gpu_s=one_wall, one_rc=one_rc)
    save()
    two_wall, two_rc = run("two_gpus", [*timed, *executor_args(args.executor, "0,1", scratch / "two"),
                                        "--json", str(out / "two.json")])
    startup = float(summary["startup_s"])  # type: ignore[arg-type]
    summary.update(one_gpu_s=one_wall, two_gpus_s=two_wall, one_rc=one_rc, two_rc=two_rc,
                   speedup=one_wall / two_wall,
                   speedup_after_startup=(one_wall - startup) / max(two_wall - startup, 1e-9))
    run("compare", [sys.executable, "-m", "gemmzoo", "compare", str(out / "one.json"), str(out / "two.json"),
                    "--threshold", "3", "--all"], out / "compare.txt")
    if (out / "one.json").exists() and (out / "two.json").exists():
        summary["results"] = compare_results(out / "one.json", out / "two.json")
        summary["workers"] = json.loads((out / "two.json").read_text()).get("devices")
        summary["compare_verdicts"] = verdict_counts(out / "one.json", out / "two.json")
        run("report", [sys.executable, "-m", "gemmzoo", "report", str(out / "one.json"),
                       str(out / "two.json"), "-o", str(out / "report.html")])
    save()
    if not args.deadline or time.perf_counter() - started < args.deadline - 30:
        # tune --devices too: two workers storing into one database
        tune = [sys.executable, "-m", "gemmzoo", "tune", "--dtype", "float16", "--budget", "0.1",
                "--backend", "torch", "--backend", "cupy", "--devices", "0,1"]
        for shape in ("1024x1024x1024", "2048x2048x2048", "1000x1000x1000", "4096x4096x512"):
            tune += ["--shape", shape]
        os.environ["GEMMZOO_CACHE_DIR"] = str(scratch / "tune-cache")
        summary["tune_devices_s"], summary["tune_devices_rc"] = run("tune_devices", tune)
        save()
    results = summary.get("results") or {}
    print(f"one GPU {one_wall:.1f} s, two GPUs {two_wall:.1f} s: {one_wall / two_wall:.2f}x; "
          f"results compared {results.get('compared')}, within 3%: {results.get('within_3_percent')}, "
          f"largest difference {results.get('max_abs_diff_percent')}%; compare: "
          f"{summary.get('compare_verdicts')}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
