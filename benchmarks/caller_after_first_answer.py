"""The caller's own small CPU products before and after gemmzoo answers a new problem, in one run.

    python benchmarks/caller_after_first_answer.py [--size N] [--calls C] [--loops L]

``torch.mm`` of two NxN float32 CPU tensors (default 64), timed in the caller's thread as the
median of L loops of C calls: before ``gemmzoo.best_backend`` measures a new CPU problem, right
after it answers, and a second later. gemmzoo runs backends on worker threads; a worker kept
alive after running a backend's OpenMP work keeps that work's thread team alive too, which on a
machine with few cores slows every later OpenMP region of the caller. The ratios say whether an
answer leaves the caller's own work slower. The tuning cache is a fresh temporary directory, so
the answer is measured.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time


def per_call_us(call, calls: int, loops: int) -> float:
    """Median over ``loops`` loops of ``calls`` calls, in µs a call, after a warm-up."""
    for _ in range(100):
        call()
    times = []
    for _ in range(loops):
        start = time.perf_counter()
        for _ in range(calls):
            call()
        times.append((time.perf_counter() - start) / calls * 1e6)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=64, help="N of the caller's NxN products (default 64)")
    parser.add_argument("--calls", type=int, default=2000, help="calls per timed loop (default 2000)")
    parser.add_argument("--loops", type=int, default=5, help="timed loops, median kept (default 5)")
    args = parser.parse_args(argv)
    os.environ["GEMMZOO_CACHE_DIR"] = tempfile.mkdtemp(prefix="gemmzoo-after-answer-")
    import torch

    a = torch.randn(args.size, args.size)

    def product() -> None:
        torch.mm(a, a)

    before = per_call_us(product, args.calls, args.loops)
    import gemmzoo

    start = time.perf_counter()
    chosen = gemmzoo.best_backend((args.size, args.size, args.size), "float32", "cpu")
    answer_s = time.perf_counter() - start
    right_after = per_call_us(product, args.calls, args.loops)
    time.sleep(1.0)
    later = per_call_us(product, args.calls, args.loops)
    print(f"torch {torch.__version__}, {os.cpu_count()} cores; best_backend answered {chosen.name} "
          f"in {answer_s:.2f} s")
    print(f"torch.mm {args.size}x{args.size} float32 in the caller's thread: before {before:.2f} us, "
          f"right after the answer {right_after:.2f} us ({right_after / before:.2f}x), "
          f"1 s later {later:.2f} us ({later / before:.2f}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
