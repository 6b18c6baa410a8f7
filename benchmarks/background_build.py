"""The compiled dispatch built in the background on first use, in one run: from a process's first
``gemmzoo.matmul`` to its switch to the compiled dispatch, and the host time per call before and after.

    python benchmarks/background_build.py [--device cpu|cuda] [--json FILE] [--calls N] [--rounds R]
                                          [--limit S]

A fresh tuning cache (nothing built, nothing measured) and ``GEMMZOO_COMPILED_DISPATCH=auto``, as on
a new user's machine. Products of CPU tensors never start the build by themselves; with ``--device
cpu`` (the default) this script makes them start it as CUDA tensors do. Then, in order:

1. the first product (``first_call_ms``: that call's wall time, which includes starting the build
   process; ``spawn_ms``: the part spent starting it);
2. the hot path, Python dispatch: host time per call of ``gemmzoo.matmul`` and ``torch.mm`` on one
   small problem (4x4 float32 on the CPU, one thread; 128x128x128 float16 on CUDA), loops of N
   calls interleaved for R rounds, the fastest round kept (CPU: this thread's CPU time, so that
   the build sharing the cores is left out; CUDA: wall time, one synchronisation per loop);
3. a new problem every 0.25 s until the process has switched to the compiled dispatch
   (``to_switch_s``: seconds from the first product; ``build_s``: the build's own time, from its
   log);
4. the hot path again, through the compiled dispatch.

Every product is compared with ``torch.mm``'s, bit for bit. Exit 1 if the build failed or did not
finish within ``--limit`` seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import sys
import tempfile
import time
from typing import Any


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--json", help="also write the figures to this file")
    parser.add_argument("--calls", type=int, default=20000,
                        help="calls per timed loop (default 20000; at most 2000 on CUDA)")
    parser.add_argument("--rounds", type=int, default=9, help="interleaved rounds (default 9)")
    parser.add_argument("--limit", type=float, default=600.0,
                        help="seconds to wait for the build (default 600)")
    args = parser.parse_args(argv)
    os.environ["GEMMZOO_CACHE_DIR"] = tempfile.mkdtemp(prefix="gemmzoo-background-build-")
    os.environ["GEMMZOO_COMPILED_DISPATCH"] = "auto"
    import torch

    import gemmzoo
    from gemmzoo import native
    from gemmzoo.dispatch import matmul as dispatch
    from gemmzoo.native import background
    from gemmzoo.session import current

    cuda = args.device == "cuda"
    if cuda and not torch.cuda.is_available():
        sys.exit("--device cuda: torch sees no CUDA GPU")
    torch.set_num_threads(1)
    calls = args.calls if not cuda else min(args.calls, 2000)
    if not cuda:  # a product of CPU tensors starts the build, as one of CUDA tensors does
        dispatch._builds_for = lambda x: True
    spawn: list[float] = []
    start = background.start

    def timed_start(session: Any) -> Any:
        begin = time.perf_counter()
        try:
            return start(session)
        finally:
            spawn.append(time.perf_counter() - begin)

    background.start = timed_start
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    clock = time.perf_counter if cuda else time.thread_time

    def operands(m: int, n: int, k: int) -> tuple[Any, Any]:
        dtype = torch.float16 if cuda else torch.float32
        return (torch.randn(m, k, device=args.device).to(dtype),
                torch.randn(k, n, device=args.device).to(dtype))

    def checked(a: Any, b: Any) -> None:
        got, expected = gemmzoo.matmul(a, b), torch.mm(a, b)
        if not torch.equal(got, expected):
            sys.exit(f"wrong product at {tuple(a.shape)}x{tuple(b.shape)}")

    a, b = operands(*((128, 128, 128) if cuda else (4, 4, 4)))
    sync()
    began = time.perf_counter()
    gemmzoo.matmul(a, b)
    sync()
    first_call = time.perf_counter() - began
    checked(a, b)
    session = current()
    watch = session.compiled_build
    if watch is None or watch.process is None:
        why = getattr(watch, "why", None) or native.status().reason
        print(f"no background build started: {why}")
        return 1
    print(f"python={platform.python_version()} torch={torch.__version__} device={args.device}"
          + (f" ({torch.cuda.get_device_name()})" if cuda else ""))
    print(f"first product: {first_call * 1e3:.1f} ms wall, of which starting the build process "
          f"{spawn[0] * 1e3:.1f} ms (pid {watch.process.pid})", flush=True)

    def per_call(call: Any) -> float:
        sync()
        begin = clock()
        for _ in range(calls):
            call(a, b)
        sync()
        return (clock() - begin) / calls

    def hot_path(label: str) -> dict[str, float]:
        rounds = [(per_call(torch.mm), per_call(gemmzoo.matmul)) for _ in range(args.rounds)]
        mm, ours = min(r[0] for r in rounds), min(r[1] for r in rounds)
        print(f"{label:34} torch.mm {mm * 1e9:8.0f} ns  gemmzoo.matmul {ours * 1e9:8.0f} ns  "
              f"overhead {(ours - mm) * 1e9:6.0f} ns/call", flush=True)
        return {"torch_mm_ns": mm * 1e9, "gemmzoo_ns": ours * 1e9, "overhead_ns": (ours - mm) * 1e9}

    before = hot_path("hot path, Python dispatch:")
    if dispatch._ROUTES:
        print("(the build finished during the loops above: the figures mix both dispatches)")
    count = 0
    while not dispatch._ROUTES:
        if watch.finished or time.perf_counter() - began > args.limit:
            print(f"no switch: {watch.why or 'the build did not finish within --limit'}")
            return 1
        time.sleep(0.25)
        count += 1
        checked(*operands(8 + count, 8, 8))  # a new problem: the slow path, which looks at the build
    to_switch = time.perf_counter() - began
    _name, directory = native.build_directory()
    log = (directory / native.BACKGROUND_LOG).read_text(errors="replace")
    found = re.search(r"compiled dispatch built in ([0-9.]+) s", log)
    build_s = float(found.group(1)) if found else None
    print(f"switched to the compiled dispatch {to_switch:.1f} s after the first product "
          f"(the build itself: {build_s} s; {count} new problems made meanwhile)", flush=True)
    after = hot_path("hot path, compiled dispatch:")
    checked(a, b)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump({"command": "python benchmarks/background_build.py " + " ".join(sys.argv[1:]),
                       "date": time.strftime("%Y-%m-%d"), "python": platform.python_version(),
                       "torch": torch.__version__, "device": args.device, "first_call_ms": first_call * 1e3,
                       "spawn_ms": spawn[0] * 1e3, "to_switch_s": to_switch, "build_s": build_s,
                       "python_dispatch": before, "compiled_dispatch": after}, handle, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
