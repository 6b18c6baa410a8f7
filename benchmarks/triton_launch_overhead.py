"""Host time of triton-grouped's prepared plan against a bare launch of the kernel it runs.

For each size (M = N = K) the plan (``backend.prepare(a, b)``) is made and called until its launch
is bound; then, in interleaved rounds, the host time of one call is taken for:

- ``plan``: ``run(a, b)``, which allocates C and launches;
- ``jit launch``: the same kernel and config launched through ``triton.jit``
  (``kernel.fn[grid](..., **config)``) into a C allocated beforehand: what a Triton user writes;
- ``compiled launch``: the compiled kernel's own launcher (``compiled[grid](...)``), the floor;
- ``empty + compiled launch``: that, with C allocated in the call, as the plan must;
- ``matmul`` (the backend's slow path) and ``torch.matmul``, for reference.

Each sample is one call on an idle launch queue (synchronised before, not after), so it is the
host's time alone. Prints the medians and the plan's ratios to the two bare launches, and writes
them to OUTDIR/launch_overhead.json.

    python benchmarks/triton_launch_overhead.py OUTDIR [--sizes 128 512] [--dtype float16]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def one_call_times(calls: dict[str, Callable[[], Any]], samples: int, rounds: int = 5) -> dict[str, float]:
    """Median host seconds of one call of each, sampled in ``rounds`` interleaved rounds."""
    import torch

    times: dict[str, list[float]] = {name: [] for name in calls}
    for call in calls.values():
        call()
    for _ in range(rounds):
        for name, call in calls.items():
            for _ in range(samples // rounds):
                torch.cuda.synchronize()
                start = time.perf_counter()
                call()
                times[name].append(time.perf_counter() - start)
    torch.cuda.synchronize()
    return {name: statistics.median(values) for name, values in times.items()}


def measure(backend: Any, size: int, dtype_name: str, samples: int) -> dict[str, Any]:
    """The medians and ratios of one size; printed as they come."""
    import torch
    import triton

    from gemmzoo_triton import grouped_kernel

    dtype = getattr(torch, dtype_name)
    a = torch.randn(size, size, device="cuda", dtype=dtype)
    b = torch.randn(size, size, device="cuda", dtype=dtype)
    run = backend.prepare(a, b)
    for _ in range(3):  # tune, bind, then the compiled kernel's path
        run(a, b)
    assert getattr(run, "route", "pointer") == "pointer", "these sizes take the pointer kernel"
    config = grouped_kernel.PICKED[grouped_kernel.pointer_key(a, b, "tf32")]
    blocks = config.all_kwargs()
    c = torch.empty(size, size, device="cuda", dtype=dtype)
    tiles = triton.cdiv(size, blocks["BLOCK_SIZE_M"]) * triton.cdiv(size, blocks["BLOCK_SIZE_N"])
    launch_args = (a, b, c, size, size, size, a.stride(0), a.stride(1), b.stride(0), b.stride(1), size, 1)
    options = {"PRECISION": "tf32", "ACTIVATION": ""}
    kernel = grouped_kernel.grouped_matmul_kernel.fn
    compiled = kernel[(tiles,)](*launch_args, **options, **blocks)
    constexprs = {**options, **blocks}
    tail = [constexprs[p.name] for p in kernel.params if p.is_constexpr]
    runner = compiled[(tiles, 1, 1)]
    medians = one_call_times(
        {
            "plan": lambda: run(a, b),
            "jit launch": lambda: kernel[(tiles,)](*launch_args, **options, **blocks),
            "compiled launch": lambda: runner(*launch_args, *tail),
            "empty + compiled launch": lambda: runner(
                a, b, torch.empty(size, size, device="cuda", dtype=dtype), *launch_args[3:], *tail),
            "matmul": lambda: backend.matmul(a, b),
            "torch.matmul": lambda: torch.matmul(a, b),
        },
        samples,
    )
    ok = torch.allclose(run(a, b).float(), (a.float() @ b.float()), rtol=1e-2, atol=1e-1)
    row = {
        "size": size, "dtype": dtype_name, "config": str(config), "correct": bool(ok),
        "median_us": {name: value * 1e6 for name, value in medians.items()},
        "plan_over_jit_launch": medians["plan"] / medians["jit launch"],
        "plan_over_compiled_launch": medians["plan"] / medians["compiled launch"],
        "plan_over_empty_and_compiled_launch": medians["plan"] / medians["empty + compiled launch"],
    }
    text = ", ".join(f"{name} {us:.1f}" for name, us in row["median_us"].items())
    print(f"{size}^3 {dtype_name}: {text} (µs); plan / jit launch {row['plan_over_jit_launch']:.2f}, "
          f"plan / compiled launch {row['plan_over_compiled_launch']:.2f}, plan / (empty + compiled launch) "
          f"{row['plan_over_empty_and_compiled_launch']:.2f}; correct {ok}", flush=True)
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("outdir", type=Path)
    parser.add_argument("--sizes", type=int, nargs="+", default=[128, 512])
    parser.add_argument("--dtype", default="float16")
    parser.add_argument("--samples", type=int, default=1000)
    args = parser.parse_args(argv)
    args.outdir.mkdir(parents=True, exist_ok=True)

    import gemmzoo

    backend = gemmzoo.get_backend("triton-grouped")
    results = [measure(backend, size, args.dtype, args.samples) for size in args.sizes]
    (args.outdir / "launch_overhead.json").write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
