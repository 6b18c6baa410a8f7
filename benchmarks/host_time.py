"""Host time of one call: how long each CUDA backend's launch path keeps the CPU busy.

A GEMM shorter than its launch path leaves the GPU waiting for the host, and timers that run
calls back to back (``triton.testing.do_bench``, gemmzoo's) then see launch time. For each CUDA
backend, and for triton-grouped's kernels called directly, this times single calls on the host
(after a synchronisation, so no call waits for a full launch queue) and prints the median and
minimum in µs; ``--profile`` adds a cProfile listing of triton-grouped's calls.

    python benchmarks/host_time.py OUTDIR [--size 2048] [--dtype float16] [--calls 200] [--profile]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def host_times(call: Callable[[], Any], calls: int) -> list[float]:
    """Seconds of host time for each of ``calls`` calls, each made on an idle launch queue."""
    import torch

    call()
    torch.cuda.synchronize()
    times = []
    for _ in range(calls):
        torch.cuda.synchronize()
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    torch.cuda.synchronize()
    return times


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("outdir", type=Path)
    parser.add_argument("--size", type=int, default=2048)
    parser.add_argument("--dtype", default="float16")
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args(argv)
    args.outdir.mkdir(parents=True, exist_ok=True)

    import torch

    import gemmzoo
    from gemmzoo.grids import GridPoint
    from gemmzoo.measure import prepare

    point = GridPoint(args.size, args.size, args.size, args.dtype)
    rows: dict[str, dict[str, float]] = {}

    def record(name: str, call: Callable[[], Any]) -> None:
        times = host_times(call, args.calls)
        rows[name] = {"median_us": statistics.median(times) * 1e6, "min_us": min(times) * 1e6}
        print(f"{name:>34}: median {rows[name]['median_us']:7.1f} µs, min {rows[name]['min_us']:7.1f} µs",
              flush=True)

    grouped = None
    for backend in gemmzoo.backends():
        if backend.device != "cuda" or backend.unavailable_reason() or args.dtype not in backend.dtypes:
            continue
        problem = prepare(backend, point)
        record(backend.name, lambda b=backend, p=problem: b.matmul(p.a, p.b))
        if backend.name == "triton-grouped":
            grouped = (backend, problem)

    if grouped is not None:
        from gemmzoo_triton import grouped_kernel, grouped_tma_kernel

        backend, problem = grouped
        x, y = problem.a, problem.b
        c = torch.empty((x.shape[0], y.shape[1]), device=x.device, dtype=x.dtype)
        record("pointer kernel (launch)", lambda: grouped_kernel.launch(x, y, c, "tf32"))
        for variant in grouped_tma_kernel.VARIANTS:
            record(f"tma-{variant} (launch)",
                   lambda v=variant: grouped_tma_kernel.launch(x, y, c, "tf32", variant=v))
        if args.profile:
            profiler = cProfile.Profile()
            profiler.enable()
            for _ in range(args.calls):
                backend.matmul(x, y)
            profiler.disable()
            torch.cuda.synchronize()
            text = io.StringIO()
            pstats.Stats(profiler, stream=text).sort_stats("cumulative").print_stats(40)
            (args.outdir / "host_time_profile.txt").write_text(text.getvalue())
            print(text.getvalue()[:6000])

    (args.outdir / "host_time.json").write_text(json.dumps({"point": point.id, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
