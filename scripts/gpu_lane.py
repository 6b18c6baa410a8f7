"""The GPU lane's steps (called by scripts/gpu-lane.sh after the offline install).

Exit status 0 only when every available GPU backend conforms for every dtype it declares and the
GPU-marked tests pass.
"""

from __future__ import annotations

import datetime
import json
import platform
import subprocess
import sys
import time
from pathlib import Path

import gemmzoo
from gemmzoo.conformance import check_backend
from gemmzoo.grids import GridPoint
from gemmzoo.measure import WrongResultError, measure

BENCH_POINTS = [
    GridPoint(4096, 4096, 4096, "float16"),
    GridPoint(4096, 4096, 4096, "bfloat16"),
    GridPoint(4097, 4097, 4097, "float16"),
    GridPoint(1000, 1000, 1000, "float16"),
    GridPoint(16, 4096, 4096, "float16"),
    GridPoint(4096, 4096, 4096, "float32"),
    GridPoint(4096, 4096, 4096, "tf32"),
]


def environment() -> dict[str, object]:
    """Device, driver and library versions."""
    info: dict[str, object] = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "gemmzoo": gemmzoo.__version__,
    }
    smi = subprocess.run(
        ["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
        capture_output=True,
        text=True,
        check=False,
    )
    info["nvidia-smi"] = smi.stdout.strip() or smi.stderr.strip()
    for module in ("numpy", "torch", "triton", "cupy"):
        try:
            info[module] = __import__(module).__version__
        except ImportError:
            info[module] = None
    import torch

    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        info["device"] = props.name
        info["compute_capability"] = f"{props.major}.{props.minor}"
        info["sm_count"] = props.multi_processor_count
        info["cuda"] = torch.version.cuda
    return info


def main(out: Path) -> int:
    started = time.perf_counter()
    report: dict[str, object] = {"environment": environment()}
    print(json.dumps(report["environment"], indent=2))
    subprocess.run([sys.executable, "-m", "gemmzoo", "list"], check=False)

    gpu = [b for b in gemmzoo.backends() if b.device == "cuda"]
    unavailable = {b.name: b.unavailable_reason() for b in gpu if b.unavailable_reason() is not None}
    available = [b for b in gpu if b.name not in unavailable]
    report["unavailable"] = unavailable

    conformance: dict[str, dict[str, object]] = {}
    for backend in available:
        began = time.perf_counter()
        result = check_backend(backend)
        failures = [{"check": r.check, "detail": r.detail} for r in result.failures]
        conformance[backend.name] = {
            "dtypes": sorted(backend.dtypes),
            "checks": len(result.results),
            "failures": failures,
            "conforms": result.passed,
            "seconds": round(time.perf_counter() - began, 1),
        }
        print(
            f"check {backend.name}: {len(result.results)} checks, {len(failures)} failed "
            f"({time.perf_counter() - began:.0f} s)"
        )
        for failure in failures:
            print(f"  FAIL {failure['check']}: {failure['detail']}")
    report["conformance"] = conformance

    tests = subprocess.run([sys.executable, "-m", "pytest", "-q", "-m", "gpu", "tests"], check=False)
    report["gpu_tests_exit"] = tests.returncode

    bench = []
    for point in BENCH_POINTS:
        for backend in available:
            if point.dtype not in backend.dtypes:
                continue
            try:
                m = measure(backend, point, budget_s=0.3)
                row = {
                    "backend": backend.name,
                    "point": point.id,
                    "median_ms": m.timing.median_s * 1e3,
                    "tflops": m.tflops,
                    "samples": m.timing.samples,
                    "error_ratio": m.error_ratio,
                }
            except WrongResultError as error:
                row = {"backend": backend.name, "point": point.id, "wrong": str(error)}
            bench.append(row)
            print(
                f"bench {point.id:28} {backend.name:16} "
                + (f"{row['tflops']:7.1f} TFLOPS" if "tflops" in row else "WRONG")
            )
    report["bench"] = bench
    report["seconds"] = round(time.perf_counter() - started, 1)

    (out / "gpu-lane.json").write_text(json.dumps(report, indent=2))
    (out / "gpu-lane.md").write_text(summary(report))
    print(summary(report))
    ok = all(c["conforms"] for c in conformance.values()) and tests.returncode in (0, 5)
    return 0 if ok else 1


def summary(report: dict) -> str:
    """The markdown summary: environment, conformance per backend, benchmark table."""
    env = report["environment"]
    lines = [
        "# GPU lane",
        "",
        f"- date: {env['date']}",
        f"- device: {env.get('device')} "
        f"(cc {env.get('compute_capability')}, {env.get('sm_count')} SMs); nvidia-smi: {env['nvidia-smi']}",
        f"- python {env['python']}, torch {env['torch']} (CUDA {env.get('cuda')}), triton {env['triton']}, "
        f"cupy {env['cupy']}, numpy {env['numpy']}, gemmzoo {env['gemmzoo']}",
        f"- lane time: {report['seconds']} s; GPU tests exit code: {report['gpu_tests_exit']}",
        "",
        "## Conformance",
        "",
        "| backend | dtypes | checks | failed | conforms |",
        "|---|---|---|---|---|",
    ]
    for name, c in report["conformance"].items():
        lines.append(
            f"| {name} | {', '.join(c['dtypes'])} | {c['checks']} | {len(c['failures'])} | "
            f"{'yes' if c['conforms'] else 'NO'} |"
        )
    for name, reason in report["unavailable"].items():
        lines.append(f"| {name} | - | 0 | - | unavailable: {reason} |")
    lines += [
        "",
        "## Short benchmark (median of CUDA-event samples, L2 flushed)",
        "",
        "| problem | backend | TFLOPS | median ms |",
        "|---|---|---|---|",
    ]
    for row in report["bench"]:
        if "wrong" in row:
            lines.append(f"| {row['point']} | {row['backend']} | WRONG | - |")
        else:
            lines.append(
                f"| {row['point']} | {row['backend']} | {row['tflops']:.1f} | {row['median_ms']:.4f} |"
            )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
