"""The GPU lane's steps (called by scripts/gpu-lane.sh after the offline install).

Exit status 0 only when every available GPU backend conforms for every dtype it declares, the
GPU-marked tests pass, and no benchmarked backend gives a wrong result.
"""

from __future__ import annotations

import concurrent.futures
import datetime
import json
import multiprocessing
import subprocess
import sys
import time
from pathlib import Path

import gemmzoo
from gemmzoo.conformance import check_backend
from gemmzoo.problems.grids import GridPoint
from gemmzoo.scale.bench import OK, UNSUPPORTED, WRONG, environment, run_bench

BENCH_POINTS = [
    GridPoint(4096, 4096, 4096, "float16"),
    GridPoint(4096, 4096, 4096, "bfloat16"),
    GridPoint(4097, 4097, 4097, "float16"),
    GridPoint(16, 4096, 4096, "float16"),
    GridPoint(4096, 4096, 4096, "float32"),
    GridPoint(4096, 4096, 4096, "tf32"),
]


def check_one(name: str) -> dict[str, object]:
    """The whole suite on one backend, timed (run in a worker process of its own)."""
    backend = gemmzoo.get_backend(name)
    began = time.perf_counter()
    report = check_backend(backend)
    failures = [{"check": r.check, "detail": r.detail} for r in report.failures]
    return {
        "dtypes": sorted(backend.dtypes),
        "checks": len(report.results),
        "failures": failures,
        "conforms": report.passed,
        "seconds": round(time.perf_counter() - began, 1),
    }


def conformance(backends: list) -> dict[str, dict[str, object]]:
    """The suite on every backend, one process each: most of its time is Triton compiling on the
    host, which the machine's cores do side by side."""
    names = [backend.name for backend in backends]
    context = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(max_workers=max(1, len(names)), mp_context=context) as pool:
        outcomes = dict(zip(names, pool.map(check_one, names), strict=True))
    for name, result in outcomes.items():
        failures = result["failures"]
        print(f"check {name}: {result['checks']} checks, {len(failures)} failed ({result['seconds']} s)")
        for failure in failures:  # type: ignore[attr-defined]
            print(f"  FAIL {failure['check']}: {failure['detail']}")
    return outcomes


def main(out: Path) -> int:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "gemmzoo", "list"], check=False)
    gpu = [b for b in gemmzoo.backends() if b.device == "cuda"]
    unavailable = {b.name: b.unavailable_reason() for b in gpu if b.unavailable_reason() is not None}
    available = [b for b in gpu if b.name not in unavailable]
    report: dict[str, object] = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "environment": environment(available or gpu),
        "unavailable": unavailable,
    }
    print(json.dumps(report["environment"], indent=2))
    # The GPU tests run beside the conformance suite: both are correctness checks, and Triton's
    # compiles keep the CPU busy more than the GPU. Timing comes after both have finished.
    tests = subprocess.Popen([sys.executable, "-m", "pytest", "-q", "-m", "gpu", "tests"])
    report["conformance"] = conformance(available)
    report["gpu_tests_exit"] = tests.wait()

    results = run_bench(available, BENCH_POINTS, budget_s=0.3)
    report["bench"] = [r.as_dict() for r in results]
    report["seconds"] = round(time.perf_counter() - started, 1)
    (out / "gpu-lane.json").write_text(json.dumps(report, indent=2, default=str))
    text = summary(report)
    (out / "gpu-lane.md").write_text(text)
    print(text)
    conforming = all(c["conforms"] for c in report["conformance"].values())
    right = all(r["status"] != WRONG for r in report["bench"])
    return 0 if conforming and right and report["gpu_tests_exit"] in (0, 5) else 1


def summary(report: dict) -> str:
    """The markdown summary: environment, conformance per backend, benchmark table."""
    lines = ["# GPU lane", "", f"- date: {report['date']}"]
    for device, info in report["environment"].items():
        lines.append(f"- {device}: " + ", ".join(f"{k} {v}" for k, v in info.items() if v is not None))
    lines += [
        f"- lane time: {report['seconds']} s; GPU tests (`pytest -m gpu`) exit code: "
        f"{report['gpu_tests_exit']}",
        "",
        "## Conformance",
        "",
        "| backend | dtypes | checks | failed | seconds | conforms |",
        "|---|---|---|---|---|---|",
    ]
    for name, c in report["conformance"].items():
        lines.append(
            f"| {name} | {', '.join(c['dtypes'])} | {c['checks']} | {len(c['failures'])} | "
            f"{c['seconds']} | {'yes' if c['conforms'] else 'NO'} |"
        )
    for name, reason in report["unavailable"].items():
        lines.append(f"| {name} | - | 0 | - | - | unavailable: {reason} |")
    lines += [
        "",
        "## Short benchmark (median device time from CUDA events, L2 flushed)",
        "",
        "| problem | backend | TFLOPS | median ms | error / bound |",
        "|---|---|---|---|---|",
    ]
    for row in report["bench"]:
        if row["status"] == OK:
            lines.append(
                f"| {row['point']} | {row['backend']} | {row['tflops']:.1f} | "
                f"{row['median_s'] * 1e3:.4f} | {row['error_ratio']:.2f} |"
            )
        elif row["status"] != UNSUPPORTED:
            lines.append(
                f"| {row['point']} | {row['backend']} | {row['status'].upper()} | - | {row['detail']} |"
            )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
