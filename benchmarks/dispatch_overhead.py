"""Host time that ``gemmzoo.matmul`` adds to the library call it wraps, on the CPU, in one run.

    python benchmarks/dispatch_overhead.py [--json FILE] [--calls N] [--rounds R] [--clock thread|wall]
                                           [--cache DIR] [--dispatch compiled|python]

Tiny products (4x4 float32), so the library call is short and the dispatch's own work shows:
NumPy arrays through the Python dispatch, torch CPU tensors through the compiled dispatch (built
first into a fresh cache, as ``gemmzoo cache --build-dispatch`` does) or the Python one. torch runs
on one thread. A last group times the CUDA ``torch`` backend's float16 launcher (which holds fp32
reduction around ``torch.mm``) against ``torch.mm`` on CPU float16 tensors: the host time an untuned
CUDA call no longer pays now that it is ``torch.mm`` itself. Each round times a loop of N calls
of every row, interleaved; the figure kept per row is the fastest round (host timings on a shared
machine carry interference that only ever adds time) and the median round. ``overhead`` is a
row's fastest round minus the library's. ``--cache DIR`` keeps the build for later runs. Timed
by this thread's CPU time by default (``--clock thread``), so that on a shared machine the time
the process waits while others run is left out.
Runs against whichever gemmzoo is first on ``PYTHONPATH``: run it on two checkouts to compare them.
"""

from __future__ import annotations

import argparse
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

CLOCKS = {"thread": time.thread_time, "wall": time.perf_counter}
clock = time.thread_time


def per_call(call: Callable[[Any, Any], Any], a: Any, b: Any, calls: int) -> float:
    """Seconds per call of a loop of ``calls`` calls, by :data:`clock`."""
    start = clock()
    for _ in range(calls):
        call(a, b)
    return (clock() - start) / calls


Row = tuple[str, Callable[[Any, Any], Any], Any, Any]


def run_rows(rows: list[Row], calls: int, rounds: int) -> list[dict[str, Any]]:
    """Every row timed in ``rounds`` interleaved rounds; printed and returned, the first row the
    library call the others are compared with."""
    samples: dict[str, list[float]] = {name: [] for name, *_ in rows}
    for _name, call, a, b in rows:  # warm: plans made, caches filled
        per_call(call, a, b, 100)
    for _ in range(rounds):
        for name, call, a, b in rows:
            samples[name].append(per_call(call, a, b, calls))
    base = min(samples[rows[0][0]])
    result = []
    for name, *_ in rows:
        fastest, median = min(samples[name]), statistics.median(samples[name])
        result.append({"name": name, "fastest_us": fastest * 1e6, "median_us": median * 1e6,
                       "overhead_us": (fastest - base) * 1e6})
        print(f"  {name:<44} fastest {fastest * 1e6:7.3f} us  median {median * 1e6:7.3f} us  "
              f"overhead {(fastest - base) * 1e6:6.3f} us")
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", help="also write the figures to this file")
    parser.add_argument("--calls", type=int, default=20000, help="calls per timed loop (default 20000)")
    parser.add_argument("--rounds", type=int, default=15, help="interleaved rounds (default 15)")
    parser.add_argument("--clock", choices=tuple(CLOCKS), default="thread",
                        help="thread: this thread's CPU time (default; time the process waits while other "
                             "processes run is not counted); wall: elapsed time")
    parser.add_argument("--cache", metavar="DIR",
                        help="the tuning cache directory, where the compiled dispatch is built (default: a "
                             "fresh one; give one to build once for several runs; nothing is measured there)")
    parser.add_argument("--dispatch", choices=("compiled", "python"), default="compiled",
                        help="gemmzoo.matmul's dispatch for torch tensors (default: compiled, built first)")
    args = parser.parse_args(argv)
    global clock
    clock = CLOCKS[args.clock]
    if args.calls < 1 or args.rounds < 1:
        parser.error("--calls and --rounds must be at least 1")
    # configured before gemmzoo is first used: a fresh cache, so no backend is measured
    os.environ["GEMMZOO_CACHE_DIR"] = args.cache or tempfile.mkdtemp(prefix="gemmzoo-dispatch-overhead-")
    if args.dispatch == "python":
        os.environ["GEMMZOO_COMPILED_DISPATCH"] = "0"
    import gemmzoo

    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((4, 4)).astype(np.float32) for _ in range(2))
    groups = {}
    print(f"python={platform.python_version()} numpy={np.__version__} gemmzoo from {gemmzoo.__file__}")
    print("NumPy 4x4 float32")
    groups["numpy"] = run_rows([
        ("np.matmul", np.matmul, a, b),
        ("gemmzoo.matmul (no backend named)", gemmzoo.matmul, a, b),
        ("gemmzoo.matmul(a, b, 'numpy')", lambda x, y: gemmzoo.matmul(x, y, "numpy"), a, b),
    ], args.calls, args.rounds)
    dispatch = "python"
    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None:
        torch.set_num_threads(1)
        if args.dispatch == "compiled":
            from gemmzoo import native
            from gemmzoo.dispatch import matmul as dispatch_module

            try:
                dispatch_module.use_compiled(native.build())
                dispatch = "compiled"
            except native.CompiledDispatchError as error:
                dispatch = f"python ({error})"
        ta, tb = torch.from_numpy(a), torch.from_numpy(b)
        print(f"torch 4x4 float32, one thread, dispatch: {dispatch}")
        groups["torch"] = run_rows([
            ("torch.mm", torch.mm, ta, tb),
            ("gemmzoo.matmul (no backend named)", gemmzoo.matmul, ta, tb),
            ("gemmzoo.matmul(a, b, 'torch-cpu')", lambda x, y: gemmzoo.matmul(x, y, "torch-cpu"), ta, tb),
        ], args.calls, args.rounds)
        try:
            from gemmzoo_torch.precision import runner
        except ImportError:  # a gemmzoo without the bundled torch plugin on the path
            runner = None
        if runner is not None:
            # The launcher of the CUDA `torch` backend holds fp32 reduction around torch.mm; the
            # switch can be read and written without a GPU, so its host cost shows on CPU tensors.
            ha, hb = ta.half(), tb.half()
            print("torch 4x4 float16: torch.mm against the CUDA torch backend's launcher "
                  "(fp32 reduction held)")
            groups["float16_launcher"] = run_rows([
                ("torch.mm", torch.mm, ha, hb),
                ("torch backend's float16 launcher", runner("float16"), ha, hb),
            ], args.calls, args.rounds)
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"command": "python benchmarks/dispatch_overhead.py " + " ".join(sys.argv[1:]),
                       "date": time.strftime("%Y-%m-%d"), "python": platform.python_version(),
                       "clock": args.clock,
                       "torch": getattr(torch, "__version__", None), "dispatch": dispatch, "groups": groups},
                      handle, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
