"""One sweep on one GPU against the same sweep on two, through an engine executor.

    python3 benchmarks/scale_out.py OUTDIR [--executor slurm|local] [--budget SECONDS] [--fresh]
                                           [--max-seconds SECONDS] [--backend NAME ...] [--shape MxNxK ...]

With ``--executor slurm`` (the default) both runs go through submitit's local executor
(``gemmzoo bench --executor slurm --slurm-cluster local``): one array task on GPU 0, then two tasks
on GPUs 0 and 1. ``--executor local`` runs ``gemmzoo bench --devices 0`` against ``--devices
0,1`` (one worker process per GPU). Needs two CUDA GPUs and, for slurm, submitit.

What each run costs is made predictable:

- every (point, backend) samples for the whole budget (``--max-noise 0``), so a run's timing takes
  about points × backends × (budget + the point's set-up) whatever the noise;
- each worker's set-up (imports, CUDA, each backend's conformance suite for the dtype) runs once,
  before its first point, and each run has caches of its own (``GEMMZOO_CACHE_DIR``,
  ``CUPY_CACHE_DIR``, ``TRITON_CACHE_DIR``), kernel caches empty, so both runs pay the compiles
  alike: once per worker, on its own GPU;
- a machine already checked, as after ``gemmzoo check`` (the README's first step): ``gemmzoo
  check BACKENDS --dtype DTYPE`` runs once first (its time reported apart), and each run starts
  from a copy of that tuning database, so its workers find the verdicts this device's database
  holds instead of running the suites; kernel caches still start empty. ``--fresh``: each run
  from an empty tuning database instead, each worker running the suites on its own GPU;
- ``--max-seconds`` bounds the whole script: a run still going when its share of the time is
  spent is stopped as Ctrl-C stops ``gemmzoo bench`` (the results so far are written), its
  workers are ended, and the script reports what finished.

Printed at the end, and kept in OUTDIR/scale_out.json: the wall time of each whole ``gemmzoo
bench`` command ("with suites": process starts, set-ups and suites included) and each run's
timing phase alone ("timing only": per worker, from the end of its set-up to its last point; the
run's figure is its slowest worker's), the two speed-ups, each worker's set-up, and the verdicts
of ``gemmzoo compare one.json two.json`` at its default threshold, with the rows of the two-GPU
run grouped by the GPU that measured them. OUTDIR also gets one.json, two.json (the two result
files), compare.txt and report.html (the two runs side by side).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

BACKENDS = ("torch", "cupy")
DTYPE = "float32"  # IEEE fp32: each GEMM of the grid runs for milliseconds, so its timing is steady
# Shapes whose fp32 products run for milliseconds on an H100: long enough that their timings are
# steady, and enough of them that the one-GPU sweep's timing (a few minutes) outweighs what each
# command pays once (docs/results/2026-11-27-scale-out-executor.md says what they cost).
SHAPES = (
    "3072x3072x3072", "2048x2048x8192", "3000x3000x3000", "4096x2048x6144", "2048x8192x4096",
    "8192x2048x4096", "3072x4096x6144", "4096x3072x4096", "2500x2500x8000", "6000x2000x3000",
    "1500x7000x5000", "5120x3000x2048", "3500x3500x3500", "4000x4000x2000", "6144x3072x2048",
    "4500x2500x4500", "2816x2816x2816", "3584x1792x6144", "1792x6656x4096", "7168x2048x3072",
    "2600x3900x5200", "4864x2432x3648", "3328x3328x4096", "5600x1800x4200", "1900x5700x3800",
    "6400x2400x2400", "3200x4800x2800", "2304x9216x2304", "4224x4224x2112", "3700x2900x4300",
    "5376x2688x2688", "2900x6100x3100",
)
TAIL_S = 25.0  # kept back from --max-seconds for compare, the report and the summary
GRACE_S = 20.0  # for a stopped run to write its results and end its workers


def bench_command(args: argparse.Namespace, devices: str, out: Path, name: str) -> list[str]:
    """``gemmzoo bench`` of the sweep on ``devices`` through ``args.executor``."""
    command = [sys.executable, "-m", "gemmzoo", "bench", "--dtype", args.dtype, "--budget", str(args.budget),
               "--max-noise", "0", "--format", "plain", "--json", str(out / f"{name}.json")]
    for backend in args.backend or BACKENDS:
        command += ["--backend", backend]
    for shape in args.shape or SHAPES:
        command += ["--shape", shape]
    workers = len(devices.split(","))
    if args.executor == "local":
        return [*command, "--devices", devices]
    return [*command, "--executor", "slurm", "--slurm-cluster", "local", "--devices", devices,
            "--workers", str(workers), "--results-dir", str(out / f"sweep-{name}")]


def fresh_environment(out: Path, name: str, checked: Path | None = None) -> dict[str, str]:
    """The environment of one run: caches of its own, empty, so it earns its verdicts and builds
    its kernels itself; with ``checked`` (a gemmzoo cache folder ``gemmzoo check`` filled), its
    gemmzoo cache starts as a copy of that one instead."""
    caches = out / f"caches-{name}"
    shutil.rmtree(caches, ignore_errors=True)
    shutil.rmtree(out / f"sweep-{name}", ignore_errors=True)  # else its finished points are skipped
    (out / f"{name}.json").unlink(missing_ok=True)
    environment = {**os.environ, "COLUMNS": "200"}
    for variable, folder in (("GEMMZOO_CACHE_DIR", "gemmzoo"), ("CUPY_CACHE_DIR", "cupy"),
                             ("TRITON_CACHE_DIR", "triton")):
        if folder == "gemmzoo" and checked is not None:
            shutil.copytree(checked, caches / folder)
        (caches / folder).mkdir(parents=True, exist_ok=True)
        environment[variable] = str(caches / folder)
    return environment


def check_first(out: Path, backends: list[str], dtype: str) -> tuple[Path, dict[str, Any]]:
    """``gemmzoo check BACKENDS --dtype DTYPE`` into a cache folder of its own (on GPU 0): the
    checked machine's tuning database, and the check's wall time and exit status."""
    folder = out / "caches-checked" / "gemmzoo"
    shutil.rmtree(folder.parent, ignore_errors=True)
    folder.mkdir(parents=True)
    environment = {**os.environ, "GEMMZOO_CACHE_DIR": str(folder), "CUDA_VISIBLE_DEVICES": "0"}
    began = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "gemmzoo", "check", *backends, "--dtype", dtype, "--format",
                           "plain"], env=environment, capture_output=True, text=True)
    (out / "check.log").write_text(done.stdout + done.stderr)
    return folder, {"wall_s": round(time.perf_counter() - began, 2), "exit": done.returncode}


def run_bounded(name: str, command: list[str], environment: dict[str, str] | None, limit_s: float,
                log: Path) -> dict[str, Any]:
    """Run ``command`` for at most ``limit_s`` seconds: past that it is sent SIGTERM (``gemmzoo
    bench`` then writes what it measured and cancels its workers), and after :data:`GRACE_S`
    whatever is left of its process group is killed. Output goes to ``log``; the end of it is
    printed. Returns wall seconds, exit status and whether it was stopped."""
    began = time.perf_counter()
    with open(log, "w") as out:
        out.write(f"$ {' '.join(command)}\n")
        out.flush()
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=environment,
                                   start_new_session=True)
        stopped = False
        try:
            code = process.wait(timeout=max(1.0, limit_s))
        except subprocess.TimeoutExpired:
            stopped = True
            process.send_signal(signal.SIGTERM)
            try:
                code = process.wait(timeout=GRACE_S)
            except subprocess.TimeoutExpired:
                code = None
        wall = time.perf_counter() - began
        try:  # the run's own workers (submitit's controllers and tasks) go with it
            os.killpg(process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        if code is None:
            code = process.wait()
    tail = "\n".join(log.read_text(errors="replace").splitlines()[-25:])
    print(f"--- {name}: {wall:.1f} s, exit {code}{', stopped at its time limit' if stopped else ''}\n{tail}",
          flush=True)
    return {"wall_s": round(wall, 2), "exit": code, "stopped": stopped, "limit_s": round(limit_s, 1)}


def task_logs(folder: Path, lines: int = 15) -> None:
    """The end of each submitit task's output and error log (a run short of results: why)."""
    for log in sorted((folder / "submitit").glob("*_log.*")):
        text = log.read_text(errors="replace").strip().splitlines()
        if text:
            print(f"--- {log.name} (last {lines} lines)\n" + "\n".join(text[-lines:]), flush=True)


def completed(run: dict[str, Any]) -> bool:
    """Whether a run went to its end: not stopped, its result file written, and ``gemmzoo bench``'s
    exit 0, or 1 (some result not ok: a backend wrong or failing somewhere, said in its table)."""
    return not run["stopped"] and run["exit"] in (0, 1) and run.get("results", 0) > 0


def run_file(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def phases(document: dict[str, Any] | None) -> dict[str, Any]:
    """From a result file: how many results and which are ok, and per worker its set-up and its
    timing phase (seconds from the end of its set-up to its last point); ``timing_s`` is the
    slowest worker's timing phase, ``last_done_s`` when the last worker finished (seconds from the
    executor's start: the rest of a run's wall time is the command's own start and end)."""
    if not document:
        return {"results": 0}
    results = document.get("results") or []
    workers = []
    for worker in document.get("devices") or []:
        if not worker.get("points"):
            continue
        setup = worker.get("setup") or {}
        suites = setup.get("suites") or {}
        ready, done, began = worker.get("ready_s"), worker.get("done_s"), worker.get("began_s")
        workers.append({
            "worker": worker.get("device"), "points": worker.get("points"), "began_s": began,
            "ready_s": ready, "done_s": done, "busy_s": worker.get("busy_s"), "setup_s": setup.get("seconds"),
            "warm_s": setup.get("warm_s"),
            "suites_s": round(sum(float(s.get("seconds") or 0) for s in suites.values()), 2),
            "suites": {key: s.get("verdict") for key, s in suites.items()},
            "timing_s": round(done - ready, 2) if isinstance(done, (int, float)) and isinstance(
                ready, (int, float)) else None,
            "error": worker.get("error") or ""})
    timings = [w["timing_s"] for w in workers if w["timing_s"] is not None]
    done_at = [w["done_s"] for w in workers if isinstance(w["done_s"], (int, float))]
    return {"results": len(results), "ok": sum(r.get("status") == "ok" for r in results),
            "last_done_s": max(done_at) if done_at else None,
            "keys": sorted(f"{r.get('point')} {r.get('backend')}" for r in results
                           if r.get("status") == "ok"),
            "workers": workers,
            "timing_s": max(timings) if timings and len(timings) == len(workers) else None}


def sweep_folder(folder: Path) -> dict[str, Any]:
    """What a run's workers left in its results folder: the seconds of each point they finished
    (all its backends) and each worker's set-up with its suites' seconds — also when the run was
    stopped, whose own result file then has no report per worker."""
    workers = []
    for path in sorted((folder / "workers").glob("*.json")):
        record = run_file(path) or {}
        setup = record.get("setup") or {}
        workers.append({"worker": record.get("label"), "setup_s": setup.get("seconds"),
                        "warm_s": setup.get("warm_s"), "suites": setup.get("suites")})
    seconds = []
    for path in (folder / "points").glob("*.json"):
        worker = (run_file(path) or {}).get("worker") or {}
        if isinstance(worker.get("seconds"), (int, float)):
            seconds.append(worker["seconds"])
    return {"points_in_folder": len(seconds), "point_seconds": sorted(seconds), "workers_in_folder": workers}


def verdict_counts(one: Path, two: Path) -> dict[str, int] | None:
    """How many rows of each verdict ``gemmzoo compare`` gives at its default threshold."""
    done = subprocess.run([sys.executable, "-m", "gemmzoo", "compare", str(one), str(two),
                           "--format", "json"], capture_output=True, text=True)
    try:
        counts = json.loads(done.stdout).get("summary")
    except (ValueError, AttributeError):
        print(f"compare gave no JSON: {done.stderr.strip()[-400:]}", flush=True)
        return None
    return counts if isinstance(counts, dict) else None


def rows_by_gpu(one: dict[str, Any], two: dict[str, Any]) -> dict[str, Any]:
    """Each result of the two-GPU run against the one-GPU run's, grouped by the GPU (driver index)
    that measured it in the two-GPU run: how many, the largest difference of medians, how many
    within 3%, and the SM clocks and throttle flags both runs recorded."""
    first = {(r["point"], r["backend"]): r for r in one.get("results") or []}
    groups: dict[str, dict[str, Any]] = {}
    for row in two.get("results") or []:
        base = first.get((row.get("point"), row.get("backend")))
        if not base or base.get("status") != "ok" or row.get("status") != "ok":
            continue
        gpu = str((row.get("gpu") or {}).get("index", "?"))
        group = groups.setdefault(gpu, {"rows": 0, "max_abs_diff_percent": 0.0, "within_3_percent": 0,
                                        "diffs_percent": [], "sm_clock_mhz": set(), "throttled": 0})
        diff = 100 * (row["median_s"] / base["median_s"] - 1)
        group["rows"] += 1
        group["diffs_percent"].append(round(diff, 2))
        group["max_abs_diff_percent"] = round(max(group["max_abs_diff_percent"], abs(diff)), 2)
        group["within_3_percent"] += abs(diff) <= 3
        group["sm_clock_mhz"] |= {row.get("sm_clock_mhz"), base.get("sm_clock_mhz")}
        group["throttled"] += bool(row.get("throttled") or base.get("throttled"))
    for group in groups.values():
        clocks = sorted(c for c in group["sm_clock_mhz"] if c is not None)
        group["sm_clock_mhz"] = [clocks[0], clocks[-1]] if clocks else []  # the lowest and highest
        diffs = group["diffs_percent"]
        group["mean_diff_percent"] = round(sum(diffs) / len(diffs), 3)
    return groups


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("outdir")
    parser.add_argument("--executor", choices=("slurm", "local"), default="slurm")
    parser.add_argument("--budget", type=float, default=10.0,
                        help="seconds sampled per backend and point (a row also stops at its sample limit)")
    parser.add_argument("--max-seconds", type=float, default=560.0,
                        help="the whole script's limit: a run past its share is stopped and what finished "
                             "is reported (0: no limit)")
    parser.add_argument("--dtype", default=DTYPE)
    parser.add_argument("--backend", action="append", help=f"instead of {', '.join(BACKENDS)}")
    parser.add_argument("--shape", action="append", help="instead of the built-in 16 shapes")
    parser.add_argument("--fresh", action="store_true",
                        help="both runs from an empty tuning database, each worker running the suites; by "
                             "default gemmzoo check runs first and both runs start from its database (a "
                             "checked machine: the workers find their verdicts stored)")
    parser.add_argument("--only", choices=("one",),
                        help="one: the one-GPU run alone (a calibration on a one-GPU machine)")
    args = parser.parse_args()
    out = Path(args.outdir).resolve()
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    limit = args.max_seconds or float("inf")
    backends, shapes = args.backend or list(BACKENDS), args.shape or list(SHAPES)
    summary: dict[str, Any] = {"executor": args.executor, "budget_s": args.budget, "dtype": args.dtype,
                               "backends": backends, "shapes": shapes, "max_seconds": args.max_seconds}

    def save() -> None:  # after every step: a script cut short still leaves its figures
        summary["script_s"] = round(time.perf_counter() - started, 1)
        (out / "scale_out.json").write_text(json.dumps(summary, indent=1, default=str))

    def left() -> float:
        return limit - (time.perf_counter() - started)

    try:
        smi = subprocess.run(["nvidia-smi", "--query-gpu=index,name,uuid,driver_version,clocks.sm,"
                              "clocks.max.sm,power.draw,power.limit,temperature.gpu", "--format=csv"],
                             capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired) as error:
        smi = f"nvidia-smi: {error}"
    summary["nvidia_smi"] = smi
    print(smi, flush=True)
    print(f"sweep: {len(shapes)} shapes x {len(backends)} backends ({', '.join(backends)}), {args.dtype}, "
          f"{args.budget} s each, through {args.executor}", flush=True)
    save()
    # The two-GPU run needs a little over half of the one-GPU run's time: the one-GPU run may
    # take up to about 60% of what is left, so that a slow first run still leaves the second its time.
    checked = None
    if not args.fresh:
        checked, summary["check"] = check_first(out, backends, args.dtype)
        print(f"gemmzoo check {' '.join(backends)} --dtype {args.dtype}: exit {summary['check']['exit']}, "
              f"{summary['check']['wall_s']} s (before both runs, not counted in either)", flush=True)
        save()
    runs: dict[str, dict[str, Any]] = {}
    plan = (("one", "0", 1.0),) if args.only == "one" else (("one", "0", 0.6), ("two", "0,1", 1.0))
    for name, devices, share in plan:
        budget_left = (left() - TAIL_S) * share
        if budget_left < 10:
            print(f"--- {name}: not run, {max(0.0, left()):.0f} s left of --max-seconds", flush=True)
            break
        command = bench_command(args, devices, out, name)
        runs[name] = run_bounded(f"{name} GPU{'s' if name == 'two' else ''}", command,
                                 fresh_environment(out, name, checked), budget_left, out / f"{name}.log")
        runs[name].update(phases(run_file(out / f"{name}.json")))
        if args.executor == "slurm":  # what the workers left in the folder, stopped or not
            runs[name].update(sweep_folder(out / f"sweep-{name}"))
        if runs[name].get("last_done_s") is not None:
            runs[name]["outside_executor_s"] = round(runs[name]["wall_s"] - runs[name]["last_done_s"], 2)
        summary["runs"] = {key: {k: v for k, v in value.items() if k != "keys"}
                           for key, value in runs.items()}
        save()
        if runs[name].get("ok", 0) < len(shapes) * len(backends):
            task_logs(out / f"sweep-{name}")
        if not completed(runs[name]):
            break
    one, two = runs.get("one", {}), runs.get("two", {})
    finished = bool(one and two and completed(one) and completed(two))
    summary["finished"] = finished
    if finished:
        summary["same_points"] = one.get("keys") == two.get("keys")
        summary["speedup_with_suites"] = round(one["wall_s"] / two["wall_s"], 3)
        if one.get("timing_s") and two.get("timing_s"):
            summary["speedup_timing_only"] = round(one["timing_s"] / two["timing_s"], 3)
        one_file, two_file = out / "one.json", out / "two.json"
        summary["compare_verdicts"] = verdict_counts(one_file, two_file)
        summary["two_gpu_rows_by_gpu"] = rows_by_gpu(run_file(one_file) or {}, run_file(two_file) or {})
        compare = subprocess.run([sys.executable, "-m", "gemmzoo", "compare", str(one_file), str(two_file),
                                  "--all", "--format", "plain"], capture_output=True, text=True)
        (out / "compare.txt").write_text(compare.stdout + compare.stderr)
        subprocess.run([sys.executable, "-m", "gemmzoo", "report", str(one_file), str(two_file), "-o",
                        str(out / "report.html")], capture_output=True, text=True)
    save()
    for name, run in runs.items():
        for worker in run.get("workers") or []:
            print(f"{name}: worker {worker['worker']}: {worker['points']} points, began "
                  f"{worker['began_s']} s, set up in {worker['setup_s']} s (warm {worker['warm_s']} s, "
                  f"suites {worker['suites_s']} s: {worker['suites']}), timing {worker['timing_s']} s, "
                  f"done at {worker['done_s']} s"
                  f"{', ' + worker['error'] if worker['error'] else ''}", flush=True)
    for name, run in runs.items():
        seconds = run.get("point_seconds") or []
        if seconds:
            print(f"{name}: {len(seconds)} points in the results folder, seconds each (all backends): "
                  f"min {seconds[0]}, median {seconds[len(seconds) // 2]}, max {seconds[-1]}, "
                  f"sum {sum(seconds):.1f}", flush=True)
        if run.get("stopped"):
            for worker in run.get("workers_in_folder") or []:
                print(f"{name} (stopped): worker {worker['worker']}: set up in {worker['setup_s']} s "
                      f"(warm {worker['warm_s']} s, suites {worker['suites']})", flush=True)
    for gpu, group in (summary.get("two_gpu_rows_by_gpu") or {}).items():
        print(f"two GPUs, rows measured on GPU {gpu}: {group['rows']}, largest difference from the one-GPU "
              f"run {group['max_abs_diff_percent']}% (mean {group['mean_diff_percent']}%), within 3%: "
              f"{group['within_3_percent']}, SM clocks {group['sm_clock_mhz']} MHz (lowest, highest), "
              f"throttled rows {group['throttled']}", flush=True)
    if args.only == "one" and one and completed(one):
        print(f"one GPU {one['wall_s']:.1f} s (timing only {one.get('timing_s')} s, outside the executor "
              f"{one.get('outside_executor_s')} s); the two-GPU run was not asked for (--only one)",
              flush=True)
        return 0
    if not finished:
        done = {name: f"{run.get('ok', 0)} ok results of {len(shapes) * len(backends)}"
                f"{' (stopped at its share of --max-seconds)' if run['stopped'] else ''}, exit {run['exit']}"
                for name, run in runs.items()}
        print(f"NOT FINISHED: {done}; figures so far in {out / 'scale_out.json'}", flush=True)
        return 1
    counts = summary.get("compare_verdicts") or {}
    print(f"ok results: one GPU {one.get('ok')}, two GPUs {two.get('ok')} of {len(shapes) * len(backends)} "
          f"(exit {one['exit']} and {two['exit']}: 1 when a result was not ok)", flush=True)
    print(f"the commands' own start and end (outside the executor): one GPU "
          f"{one.get('outside_executor_s')} s, two GPUs {two.get('outside_executor_s')} s", flush=True)
    print(f"one GPU {one['wall_s']:.1f} s, two GPUs {two['wall_s']:.1f} s: "
          f"{summary['speedup_with_suites']:.2f}x with suites (whole commands); timing only "
          f"{one.get('timing_s')} s against {two.get('timing_s')} s: {summary.get('speedup_timing_only')}x; "
          f"same points: {summary['same_points']}", flush=True)
    print(f"compare: {', '.join(f'{k} {v}' for k, v in sorted(counts.items())) or 'no verdicts'}; "
          f"SLOWER {counts.get('slower', 0)}, FASTER {counts.get('faster', 0)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
