"""``gemmzoo.matmul`` with no tuning data at all against ``torch.matmul``, caller time, in one run.

    python benchmarks/empty_cache.py [--json FILE] [--calls N] [--rounds R] [--shape MxNxK-DTYPE ...]

The tuning cache is a fresh temporary directory: every answer comes from the shipped prior
(:mod:`gemmzoo.tuning.prior`) or the default order, never from a measurement. Each problem's two
loops (N calls, then one synchronisation) run interleaved for R rounds; the ratio printed is the
median over rounds of torch.matmul's time over gemmzoo.matmul's (above 1: gemmzoo is faster), with
the backend gemmzoo picked and the first call's wall time (which includes the picked backend's
conformance suite the first time a dtype meets it). tf32 problems wrap the operands in
``gemmzoo.TF32Array`` and time ``torch.matmul`` with ``allow_tf32`` on. Needs a CUDA GPU.
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
    "2048x2048x2048-float32", "4095x4095x4095-tf32",
)


def parse(text: str) -> tuple[int, int, int, str]:
    sizes, dtype = text.rsplit("-", 1)
    m, n, k = (int(x) for x in sizes.split("x"))
    return m, n, k, dtype


def misaligned(m: int, n: int, k: int, dtype: str) -> bool:
    size = {"float16": 2, "bfloat16": 2}.get(dtype)
    return size is not None and any((x * size) % 16 for x in (n, k))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="also write the figures to this file")
    parser.add_argument("--calls", type=int, default=50, help="calls per timed loop (default 50)")
    parser.add_argument("--rounds", type=int, default=7, help="interleaved rounds (default 7)")
    parser.add_argument("--shape", action="append", default=[], metavar="MxNxK-DTYPE")
    args = parser.parse_args()
    os.environ["GEMMZOO_CACHE_DIR"] = tempfile.mkdtemp(prefix="gemmzoo-empty-")
    import torch

    import gemmzoo
    from gemmzoo.dispatch.matmul import backend_for

    if not torch.cuda.is_available():
        sys.exit("needs a CUDA GPU")
    settings = torch.backends.cuda.matmul
    rows = []
    for text in args.shape or PROBLEMS:
        m, n, k, dtype = parse(text)
        storage = torch.float32 if dtype == "tf32" else getattr(torch, dtype)
        a = torch.randn(m, k, device="cuda").to(storage)
        b = torch.randn(k, n, device="cuda").to(storage)
        x, y = (gemmzoo.TF32Array(a), gemmzoo.TF32Array(b)) if dtype == "tf32" else (a, b)
        start = time.perf_counter()
        gemmzoo.matmul(x, y)
        torch.cuda.synchronize()
        first_s = time.perf_counter() - start
        picked = backend_for(x, y).name

        def loop(call, calls=args.calls):
            torch.cuda.synchronize()
            begin = time.perf_counter()
            for _ in range(calls):
                call()
            torch.cuda.synchronize()
            return (time.perf_counter() - begin) / calls

        def theirs(a=a, b=b):
            return torch.matmul(a, b)

        def ours(x=x, y=y):
            return gemmzoo.matmul(x, y)

        saved = settings.allow_tf32
        settings.allow_tf32 = dtype == "tf32"
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
        row = {"problem": text, "picked": picked, "first_call_s": first_s,
               "torch_matmul_us": statistics.median(t_theirs) * 1e6,
               "gemmzoo_us": statistics.median(t_ours) * 1e6, "ratio": statistics.median(ratios),
               "misaligned": misaligned(m, n, k, dtype)}
        rows.append(row)
        print(f"{text:28} {picked:16} first {first_s:7.2f} s  "
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
            json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": rows},
                      out, indent=1)


if __name__ == "__main__":
    main()
