"""``gemmzoo.matmul`` with no tuning data at all against ``torch.matmul``, caller time, in one run.

    python benchmarks/empty_cache.py [--json FILE] [--calls N] [--rounds R] [--shape MxNxK-DTYPE ...]
                                     [--dispatch first-contact|background|python] [--compiled]

The tuning cache is a fresh temporary directory: every answer comes from the shipped prior
(:mod:`gemmzoo.tuning.prior`) or the default order, never from a measurement. Each problem's two
loops (N calls, then one synchronisation) run interleaved for R rounds; the ratio printed is the
median over rounds of torch.matmul's time over gemmzoo.matmul's (above 1: gemmzoo is faster), with
what served gemmzoo's call (``torch.mm (own)`` where it is torch's own product under the caller's
switches, else the backend picked) and the first call's wall time (which includes the picked
backend's conformance suite the first time a dtype meets it).

Which dispatch serves gemmzoo's calls (the cache holds no tuning data either way; each row says
which served it, ``python`` or ``compiled``):

- ``--dispatch first-contact`` (default): a new user's first process, ``compiled_dispatch="auto"``:
  the first product starts the compiled dispatch's build in the background
  (:mod:`gemmzoo.native.background`), and the process switches to it at the first new problem
  after the build is done, so the first rows run through the Python dispatch and later ones may
  not.
- ``--dispatch background``: the same, but one small product first, then new small problems every
  0.25 s until the process has switched to the compiled dispatch (the time is printed), then the
  rows: what every process after the build gets.
- ``--dispatch python``: the Python dispatch throughout (``GEMMZOO_COMPILED_DISPATCH=0``).
- ``--compiled``: the compiled dispatch built in the foreground first (as ``gemmzoo cache
  --build-dispatch`` does).

DTYPE is a torch dtype name, or: ``tf32`` (the operands wrapped in ``gemmzoo.TF32Array``;
``torch.matmul`` timed with ``allow_tf32`` on); ``float32+tf32`` (plain float32 tensors, the
caller's ``allow_tf32`` on for both calls); ``float8_e4m3fn`` (B stored column-major, as a weight
``w.t()`` is; the call replaced is ``torch._scaled_mm`` with unit scales, fp32 promotion and a
bfloat16 result, since ``torch.matmul`` takes no fp8). Needs a CUDA GPU.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import tempfile
import time

PROBLEMS = (
    "4096x4096x4096-float16", "16x4096x4096-bfloat16", "4096x11008x4096-float16", "12608x768x3072-float16",
    "1111x2222x3333-float16", "4097x4097x4097-float16", "3001x3001x3001-bfloat16", "1023x1023x1023-float16",
    "2047x4093x1531-bfloat16", "1024x50257x768-bfloat16", "64x64x65536-float16", "2048x2048x2048-tf32",
    "2048x2048x2048-float32", "4095x4095x4095-tf32", "32x4608x3584-float16", "200x7000x5000-float16",
    "2048x2048x2048-float32+tf32", "4096x14336x4096-float8_e4m3fn",
)


def parse(text: str) -> tuple[int, int, int, str]:
    sizes, dtype = text.rsplit("-", 1)
    m, n, k = (int(x) for x in sizes.split("x"))
    return m, n, k, dtype


def misaligned(m: int, n: int, k: int, dtype: str) -> bool:
    size = {"float16": 2, "bfloat16": 2}.get(dtype)
    return size is not None and any((x * size) % 16 for x in (n, k))


def wait_for_switch(torch, gemmzoo, dispatch_module, limit_s: float) -> float | None:
    """One small product (the first: the compiled dispatch's background build starts), then a new
    small problem every 0.25 s until the process has switched to the compiled dispatch; the
    seconds that took, or ``None`` (said) if the build failed or outlasted ``limit_s``."""
    from gemmzoo.session import current

    began = time.perf_counter()
    count = 0
    while not dispatch_module._ROUTES:
        count += 1
        a = torch.randn(8 + count, 16, device="cuda", dtype=torch.float16)
        b = torch.randn(16, 8, device="cuda", dtype=torch.float16)
        if not torch.equal(gemmzoo.matmul(a, b), torch.mm(a, b)):
            sys.exit(f"wrong product at {8 + count}x8x16")
        watch = current().compiled_build
        if (watch is not None and watch.finished and not dispatch_module._ROUTES) \
                or time.perf_counter() - began > limit_s:
            why = getattr(watch, "why", None) or "the build outlasted --limit"
            print(f"--dispatch background: no switch: {why}")
            return None
        time.sleep(0.25)
    waited = time.perf_counter() - began
    print(f"switched to the compiled dispatch built in the background {waited:.1f} s after the first product",
          flush=True)
    return waited


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="also write the figures to this file")
    parser.add_argument("--calls", type=int, default=50, help="calls per timed loop (default 50)")
    parser.add_argument("--rounds", type=int, default=7, help="interleaved rounds (default 7)")
    parser.add_argument("--shape", action="append", default=[], metavar="MxNxK-DTYPE")
    parser.add_argument("--compiled", action="store_true",
                        help="build the compiled dispatch into the fresh cache first (as gemmzoo cache "
                             "--build-dispatch does; no tuning data either way) and call through it")
    parser.add_argument("--dispatch", choices=("first-contact", "background", "python"),
                        default="first-contact",
                        help="first-contact (default): compiled_dispatch=auto, the build starts at the first "
                             "product; background: wait for that build and the switch before timing; python: "
                             "the Python dispatch throughout")
    parser.add_argument("--limit", type=float, default=600.0,
                        help="--dispatch background: seconds to wait for the build (default 600)")
    args = parser.parse_args()
    os.environ["GEMMZOO_CACHE_DIR"] = tempfile.mkdtemp(prefix="gemmzoo-empty-")
    os.environ["GEMMZOO_COMPILED_DISPATCH"] = ("on" if args.compiled else "0" if args.dispatch == "python"
                                               else "auto")
    import torch

    import gemmzoo
    from gemmzoo.dispatch import matmul as dispatch_module
    from gemmzoo.dispatch.matmul import choice_for

    if not torch.cuda.is_available():
        sys.exit("needs a CUDA GPU")
    if args.dispatch == "background" and not args.compiled:
        waited = wait_for_switch(torch, gemmzoo, dispatch_module, args.limit)
        if waited is None:
            sys.exit(1)
    if args.compiled:
        from gemmzoo import native
        from gemmzoo.dispatch import matmul as dispatch

        start = time.perf_counter()
        try:
            dispatch.use_compiled(native.build())
        except native.CompiledDispatchError as error:
            sys.exit(f"--compiled: {error}")
        print(f"compiled dispatch built and used ({time.perf_counter() - start:.1f} s)", flush=True)
    settings = torch.backends.cuda.matmul
    rows = []
    for text in args.shape or PROBLEMS:
        m, n, k, dtype = parse(text)
        allow_tf32 = dtype in ("tf32", "float32+tf32")
        storage = torch.float32 if allow_tf32 else getattr(torch, dtype)
        a = torch.randn(m, k, device="cuda").to(storage)
        if dtype == "float8_e4m3fn":
            b = torch.randn(n, k, device="cuda").to(storage).t()  # column-major, as _scaled_mm takes it
        else:
            b = torch.randn(k, n, device="cuda").to(storage)
        x, y = (gemmzoo.TF32Array(a), gemmzoo.TF32Array(b)) if dtype == "tf32" else (a, b)
        saved = settings.allow_tf32
        settings.allow_tf32 = allow_tf32
        try:
            start = time.perf_counter()
            gemmzoo.matmul(x, y)
            torch.cuda.synchronize()
            first_s = time.perf_counter() - start
        finally:
            settings.allow_tf32 = saved
        choice = choice_for(x, y)
        picked = "torch.mm (own)" if choice.source == "library" else choice.backend.name

        def loop(call, calls=args.calls):
            torch.cuda.synchronize()
            begin = time.perf_counter()
            for _ in range(calls):
                call()
            torch.cuda.synchronize()
            return (time.perf_counter() - begin) / calls

        if dtype == "float8_e4m3fn":
            one = torch.ones((), device="cuda")

            def theirs(a=a, b=b, one=one):
                return torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
        else:
            def theirs(a=a, b=b):
                return torch.matmul(a, b)

        def ours(x=x, y=y):
            return gemmzoo.matmul(x, y)

        settings.allow_tf32 = allow_tf32
        try:
            loop(theirs, 3)
            loop(ours, 3)
            ratios, t_theirs, t_ours = [], [], []
            for _ in range(args.rounds):
                t1, t2 = loop(theirs), loop(ours)
                t_theirs.append(t1)
                t_ours.append(t2)
                ratios.append(t1 / t2)
        finally:
            settings.allow_tf32 = saved
        served = "compiled" if dispatch_module._ROUTES else "python"
        row = {"problem": text, "picked": picked, "source": choice.source, "first_call_s": first_s,
               "dispatch": served,
               "torch_matmul_us": statistics.median(t_theirs) * 1e6,
               "gemmzoo_us": statistics.median(t_ours) * 1e6, "ratio": statistics.median(ratios),
               "misaligned": misaligned(m, n, k, dtype)}
        rows.append(row)
        print(f"{text:28} {picked:16} {served:8} first {first_s:7.2f} s  "
              f"torch.matmul {row['torch_matmul_us']:10.1f} us  gemmzoo {row['gemmzoo_us']:10.1f} us  "
              f"x{row['ratio']:.3f}", flush=True)
    ratios = [r["ratio"] for r in rows]
    off = [r["ratio"] for r in rows if r["misaligned"]]
    print(f"geomean x{math.exp(statistics.fmean(map(math.log, ratios))):.3f} over {len(rows)}; "
          f"worst x{min(ratios):.3f}; under 0.97: {sum(r < 0.97 for r in ratios)}")
    if off:
        geomean = math.exp(statistics.fmean(map(math.log, off)))
        print(f"misaligned 16-bit: geomean x{geomean:.3f} over {len(off)}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                       "dispatch": "compiled" if args.compiled else args.dispatch, "rows": rows},
                      out, indent=1)


if __name__ == "__main__":
    main()
