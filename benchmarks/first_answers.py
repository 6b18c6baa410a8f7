"""First ``best_backend`` answers on a fresh machine: seconds per answer, and the suites each ran.

    python benchmarks/first_answers.py [--problem DTYPE:MxNxK ...] [--device cuda] [--regret] [--json PATH]

Every cache a new user starts without is a fresh temporary directory: gemmzoo's tuning store,
Triton's and TorchInductor's kernel caches, CuPy's. The problems are answered in order in one
process, as a program meets them; the first of each dtype is the one that pays for conformance
suites. On the GPU, torch is imported and CUDA started first and that time is reported apart, as
a program that already uses torch has paid it (``--cold-framework`` leaves it to the first
answer). Printed per problem: the wall seconds of the answer, the backend, where the answer came
from, and the suites that ran for it (backend and seconds); then the first answer of each dtype
against the 10 s target and the median of the others against 5 s. With ``--regret``, every
problem is then tuned the deliberate way (``gemmzoo tune``: every conforming backend, Triton's
full autotune; ``--regret-skip NAME`` leaves a backend out of it, and says so) and each first
answer's device time is set against the fastest one's: the regret, against the target of at
most 3% on 90% of the problems.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

#: New problems, none of them on a bundled grid: the first of each dtype, then later ones.
DEFAULT_PROBLEMS = (
    "bfloat16:3072x1024x4096", "float16:1000x3000x2000", "tf32:2048x2048x1024", "float32:1200x1800x600",
    "float8_e4m3fn:2048x8192x4096", "float16:8192x1024x4096", "bfloat16:32x4096x11008",
    "float16:4000x4000x4000", "bfloat16:1536x1536x1536", "float32:4096x4096x512",
)


def parse_problem(text: str) -> tuple[str, tuple[int, int, int]]:
    """``"float16:1000x3000x2000"`` as the dtype and (M, N, K), the sizes read as ``gemmzoo bench
    --shape`` reads them (:func:`gemmzoo.problems.grids.parse_point`)."""
    from gemmzoo.problems.grids import GridError, parse_point

    dtype, _, shape = text.partition(":")
    try:
        sizes, _dtype, _layout = parse_point(shape)
    except GridError:
        raise argparse.ArgumentTypeError(f"a problem is DTYPE:MxNxK, not {text!r}") from None
    return dtype, sizes


def fresh_caches() -> str:
    """Point every kernel and tuning cache at a new temporary directory; return it."""
    root = tempfile.mkdtemp(prefix="gemmzoo-first-answers-")
    for variable, name in (("GEMMZOO_CACHE_DIR", "gemmzoo"), ("TRITON_CACHE_DIR", "triton"),
                           ("TORCHINDUCTOR_CACHE_DIR", "inductor"), ("CUPY_CACHE_DIR", "cupy")):
        os.environ[variable] = os.path.join(root, name)
    return root


def print_regrets(rows: list[dict], skip: list[str]) -> None:
    """Tune each answered problem fully (every backend but those in ``skip``) and add to its row
    the regret of the first answer: its backend's device time over the fastest backend's, less
    one, from the same tuning run."""
    from gemmzoo.plugins.registry import get_registry
    from gemmzoo.problems.grids import GridPoint
    from gemmzoo.tuning import tune

    backends = [name for name in get_registry().names() if name not in skip]
    if skip:
        print(f"regret against a full tune of every backend but {', '.join(skip)}", flush=True)
    for row in rows:
        point = GridPoint(*row["shape"], row["dtype"])
        times = {r.backend: r.median_s for r in tune([point], backends, budget_s=0.3) if r.status == "ok"}
        if row["backend"] not in times:
            row["regret"] = None
            print(f"{point.id}: {row['backend']} has no tuned time; regret unknown")
            continue
        fastest = min(times, key=times.__getitem__)
        row["regret"] = times[row["backend"]] / times[fastest] - 1
        print(f"{point.id}: answered {row['backend']}, fastest when tuned {fastest}: "
              f"regret {row['regret']:.1%}", flush=True)
    known = [r["regret"] for r in rows if r.get("regret") is not None]
    if known:
        print(f"regret at most 3%: {sum(x <= 0.03 for x in known)} of {len(known)} problems (target 90%)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--problem", action="append", type=parse_problem,
                        help="DTYPE:MxNxK, in order (repeatable; default: ten new problems)")
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--regret", action="store_true",
                        help="then tune every problem fully and report each first answer's regret")
    parser.add_argument("--regret-skip", action="append", metavar="NAME",
                        help="leave this backend out of --regret's full tune (repeatable)")
    parser.add_argument("--json", help="write the figures here")
    parser.add_argument("--cold-framework", action="store_true",
                        help="leave torch's import and CUDA's start to the first answer (by default "
                             "they come first and are reported apart)")
    args = parser.parse_args(argv)
    problems = args.problem or [parse_problem(p) for p in DEFAULT_PROBLEMS]
    fresh_caches()
    started = time.perf_counter()
    import gemmzoo
    from gemmzoo.tuning import explain, state

    imported = time.perf_counter() - started
    print(f"gemmzoo {gemmzoo.__version__}: imported in {imported:.2f} s; caches fresh", flush=True)
    framework_s = None
    if args.device == "cuda" and not args.cold_framework:
        started = time.perf_counter()
        import torch

        torch.zeros(1, device="cuda")
        framework_s = time.perf_counter() - started
        print(f"torch imported and CUDA started in {framework_s:.2f} s, before the first answer "
              "(as in a program that already uses torch on the GPU)", flush=True)
    rows = []
    seen_dtypes: set[str] = set()
    for dtype, shape in problems:
        before = {(v.backend, v.dtype) for v in state.store().all_conformance()}
        start = time.perf_counter()
        choice = explain(shape, dtype, args.device)
        seconds = time.perf_counter() - start
        suites = sorted(f"{v.backend}:{v.dtype}" for v in state.store().all_conformance()
                        if (v.backend, v.dtype) not in before)
        first = dtype not in seen_dtypes
        seen_dtypes.add(dtype)
        rows.append({"dtype": dtype, "shape": list(shape), "seconds": seconds, "backend": choice.backend.name,
                     "source": choice.source, "suites": suites, "first_of_dtype": first})
        print(f"{dtype:>14} {'x'.join(map(str, shape)):>16}  {seconds:7.1f} s  {choice.backend.name:<16} "
              f"{choice.source:<13} {'first of its dtype' if first else '':<18} "
              f"suites: {', '.join(suites) or '-'}", flush=True)
    firsts = [r["seconds"] for r in rows if r["first_of_dtype"]]
    later = [r["seconds"] for r in rows if not r["first_of_dtype"]]
    print(f"first answer of each dtype: worst {max(firsts):.1f} s, "
          f"{sum(s <= 10 for s in firsts)} of {len(firsts)} within 10 s")
    if later:
        print(f"later answers: median {statistics.median(later):.1f} s (target 5 s), "
              f"worst {max(later):.1f} s")
    if args.regret:
        print_regrets(rows, args.regret_skip or [])
    if args.json:
        import torch

        facts = {"python": sys.version.split()[0], "torch": torch.__version__,
                 "device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu",
                 "imported_s": imported, "framework_start_s": framework_s}
        with open(args.json, "w") as out:
            json.dump({"facts": facts, "answers": rows}, out, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
