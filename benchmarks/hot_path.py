"""Host time per call of gemmzoo's hot path against the library call it wraps, in one run.

    python benchmarks/hot_path.py [--json FILE] [--calls N] [--rounds R]

Each row times a loop of N calls followed by one synchronisation and divides by N: what a
program calling in a loop waits per call. Variants of one group run interleaved, R rounds, and the
median of the rounds is kept; the ratio is the median over rounds of each round's ratio to the
group's first row (the library's own call) timed in that round. The
ratio of the fastest rounds is printed too: host timings on a shared machine carry interference
that only ever adds time.
On the CPU: 64x64 float32 NumPy and torch arrays. With CUDA: 128³ and 512³ float16 torch tensors
(and CuPy arrays when CuPy is installed). The tuning cache is a fresh temporary directory, so
``gemmzoo.matmul`` without a backend gives the unmeasured default (torch for CUDA tensors).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import numpy as np

Call = Callable[[Any, Any], Any]


def run_group(title: str, rows: list[tuple[str, Call, Any, Any]], sync: Callable[[], None], calls: int,
              rounds: int, targets: dict[str, float]) -> dict[str, Any]:
    from gemmzoo.measure import loop_per_call_s

    for _name, call, a, b in rows:  # warm up: plans, compilation, allocator
        for _ in range(20):
            call(a, b)
    samples: dict[str, list[float]] = {name: [] for name, *_ in rows}
    for number in range(rounds):
        for name, call, a, b in (rows if number % 2 == 0 else rows[::-1]):  # no row always first
            samples[name].append(loop_per_call_s(functools.partial(call, a, b), calls, sync))
    medians = {name: statistics.median(values) for name, values in samples.items()}
    base_samples = samples[rows[0][0]]
    fastest_base = min(base_samples)
    print(f"\n{title}")
    result = []
    for name, *_ in rows:
        # each round's ratio to the library call timed in that round, then the median of those:
        # interference that slows a whole round cancels out
        ratio = statistics.median(t / t0 for t, t0 in zip(samples[name], base_samples, strict=True))
        # the fastest round of each: the cost of the code itself, with the least interference
        ratio_min = min(samples[name]) / fastest_base
        target = targets.get(name)
        verdict = ""
        if target is not None:
            verdict = f"  target <= {target:.2f}x: {'met' if ratio <= target else 'MISSED'}"
        spread = (max(samples[name]) - min(samples[name])) * 1e6
        print(f"  {name:<48} {medians[name] * 1e6:8.2f} us  (range {spread:5.2f})  {ratio:5.2f}x"
              f"  fastest rounds {ratio_min:5.2f}x{verdict}")
        result.append({"name": name, "median_us": medians[name] * 1e6, "range_us": spread, "ratio": ratio,
                       "min_us": min(samples[name]) * 1e6, "ratio_of_minima": ratio_min, "target": target})
    return {"group": title, "rows": result}


def cpu_groups(calls: int, rounds: int) -> list[dict[str, Any]]:
    import gemmzoo

    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((64, 64)).astype(np.float32) for _ in range(2))
    numpy_backend = gemmzoo.get_backend("numpy")
    groups = [run_group("CPU 64x64x64 float32, NumPy arrays", [
        ("np.matmul", np.matmul, a, b),
        ("numpy backend .matmul", numpy_backend.matmul, a, b),
        ("numpy backend plan (prepare)", numpy_backend.prepare(a, b), a, b),
        ("gemmzoo.matmul (no backend named)", gemmzoo.matmul, a, b),
    ], lambda: None, calls, rounds, {"numpy backend .matmul": 1.3, "gemmzoo.matmul (no backend named)": 1.5})]
    try:
        import torch
    except ImportError:
        return groups
    ta, tb = torch.from_numpy(a), torch.from_numpy(b)
    torch_cpu = gemmzoo.get_backend("torch-cpu")
    groups.append(run_group("CPU 64x64x64 float32, torch tensors", [
        ("torch.matmul", torch.matmul, ta, tb),
        ("torch-cpu backend .matmul", torch_cpu.matmul, ta, tb),
        ("gemmzoo.matmul(a, b, 'torch-cpu')", lambda x, y: gemmzoo.matmul(x, y, "torch-cpu"), ta, tb),
    ], lambda: None, calls, rounds, {"gemmzoo.matmul(a, b, 'torch-cpu')": 1.3}))
    return groups


def cuda_groups(calls: int, rounds: int) -> list[dict[str, Any]]:
    import torch

    import gemmzoo

    groups = []
    torch_backend = gemmzoo.get_backend("torch")
    cupy_backend = gemmzoo.get_backend("cupy")
    with_cupy = cupy_backend.unavailable_reason() is None
    for size in (128, 512):
        a, b = (torch.randn(size, size, device="cuda", dtype=torch.float16) for _ in range(2))
        picked = gemmzoo.best_backend((size, size, size), "float16", "cuda", measure=False).name
        groups.append(run_group(f"CUDA {size}³ float16, torch tensors (gemmzoo.matmul picks {picked})", [
            ("torch.matmul", torch.matmul, a, b),
            ("torch.mm (what the torch backend launches)", torch.mm, a, b),
            ("torch backend .matmul", torch_backend.matmul, a, b),
            ("torch backend plan (prepare)", torch_backend.prepare(a, b), a, b),
            ("gemmzoo.matmul (no backend named)", gemmzoo.matmul, a, b),
            ("gemmzoo.matmul(a, b, 'torch')", lambda x, y: gemmzoo.matmul(x, y, "torch"), a, b),
        ], torch.cuda.synchronize, calls, rounds,
            {"torch backend .matmul": 1.10, "torch backend plan (prepare)": 1.10,
             "gemmzoo.matmul (no backend named)": 1.15}))
        if not with_cupy:
            continue
        import cupy

        ca, cb = cupy.asarray(a), cupy.asarray(b)
        sync = cupy.cuda.get_current_stream().synchronize
        groups.append(run_group(f"CUDA {size}³ float16, CuPy arrays", [
            ("cupy.matmul", cupy.matmul, ca, cb),
            ("cupy.dot", cupy.dot, ca, cb),
            ("cupy backend .matmul", cupy_backend.matmul, ca, cb),
            ("gemmzoo.matmul(a, b, 'cupy')", lambda x, y: gemmzoo.matmul(x, y, "cupy"), ca, cb),
        ], sync, calls, rounds, {"gemmzoo.matmul(a, b, 'cupy')": 1.15}))
    return groups


def versions() -> dict[str, str]:
    found = {"python": platform.python_version(), "numpy": np.__version__, "machine": platform.machine()}
    for name in ("torch", "cupy", "triton"):
        try:
            found[name] = __import__(name).__version__
        except ImportError:
            pass
    try:
        import torch

        if torch.cuda.is_available():
            found["device"] = torch.cuda.get_device_name()
            found["cuda"] = str(torch.version.cuda)
    except ImportError:
        pass
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", help="also write the figures to this file")
    parser.add_argument("--calls", type=int, default=2000, help="calls per timed loop (default 2000)")
    parser.add_argument("--rounds", type=int, default=7, help="interleaved rounds (default 7)")
    args = parser.parse_args(argv)
    os.environ["GEMMZOO_CACHE_DIR"] = tempfile.mkdtemp(prefix="gemmzoo-hot-path-")
    found = versions()
    print(" ".join(f"{k}={v}" for k, v in found.items()))
    groups = cpu_groups(args.calls, args.rounds)
    try:
        import torch

        cuda = torch.cuda.is_available()
    except ImportError:
        cuda = False
    if cuda:
        groups += cuda_groups(args.calls, args.rounds)
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"command": "python benchmarks/hot_path.py " + " ".join(sys.argv[1:]),
                       "date": time.strftime("%Y-%m-%d"), "versions": found, "groups": groups},
                      handle, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
