"""Does best_backend pick what a fresh measurement says is fastest? (run on a CUDA machine)

    python benchmarks/gpu_tune_oracle.py OUTDIR [--dtype float16] [--budget 0.1] [--max-seconds 240]

1. Conformance of every available CUDA backend for the dtype (timed; stored, as tune does).
2. ``tune`` over a mixed grid (square, LLM and odd shapes; the named grids when gemmzoo has them)
   into a fresh database under OUTDIR/cache.
3. For every shape: ``best_backend``'s answer (from that database, measuring off) against the
   oracle, a fresh measurement of every candidate. A pick is right when it is the oracle's
   fastest or within the oracle's measured noise of it (the tie rule of gemmzoo.tuning.select).
4. The host overhead of ``gemmzoo.matmul`` on torch CUDA tensors against ``torch.matmul``.

Writes OUTDIR/tune_oracle.md (tables) and OUTDIR/tune_oracle.json (raw numbers).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

GRIDS = ("square", "llm", "odd")
MAX_MNK = 4097**3  # the float64 host check of larger shapes costs more than the whole budget


def grid_points(dtype: str, max_mnk: float) -> list[Any]:
    """The square, llm and odd grids' shapes, taken in turn from each, so that a time cap on
    tuning still leaves a mix of all three."""
    import itertools

    from gemmzoo.grids import GridPoint, get_grid

    per_grid = [sorted({(p.m, p.n, p.k) for p in get_grid(name)}) for name in GRIDS]
    mixed = [shape for group in itertools.zip_longest(*per_grid) for shape in group if shape]
    points = [GridPoint(m, n, k, dtype) for m, n, k in mixed if m * n * k <= max_mnk]
    return list(dict.fromkeys(points))


def host_overhead(dtype: str) -> dict[str, float]:
    """Microseconds per call, launch-bound 64x64x64: gemmzoo.matmul vs torch.matmul (no sync per call)."""
    import torch

    import gemmzoo

    a = torch.randn(64, 64, device="cuda", dtype=getattr(torch, dtype))
    b = torch.randn(64, 64, device="cuda", dtype=getattr(torch, dtype))
    chosen = gemmzoo.best_backend((64, 64, 64), dtype, "cuda")
    calls = 2000
    result = {"backend": chosen.name}
    for label, call in (("torch.matmul", lambda: torch.matmul(a, b)),
                        ("gemmzoo.matmul", lambda: gemmzoo.matmul(a, b)),
                        ("gemmzoo.best_backend", lambda: gemmzoo.best_backend((64, 64, 64), dtype, "cuda"))):
        for _ in range(200):
            call()
        torch.cuda.synchronize()
        best = float("inf")
        for _ in range(5):
            start = time.perf_counter()
            for _ in range(calls):
                call()
            torch.cuda.synchronize()
            best = min(best, (time.perf_counter() - start) / calls * 1e6)
        result[label] = best
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("outdir", type=Path)
    parser.add_argument("--dtype", default="float16")
    parser.add_argument("--budget", type=float, default=0.1, help="timing seconds per backend and shape")
    parser.add_argument("--max-seconds", type=float, default=240.0, help="stop tuning new shapes after this")
    parser.add_argument("--backend", action="append", help="only these backends (default: every CUDA one)")
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"),
                        help="cpu: a dry run of this script")
    parser.add_argument("--max-mnk", type=float, default=MAX_MNK, help="skip shapes with a larger M*N*K")
    args = parser.parse_args()
    args.outdir.mkdir(parents=True, exist_ok=True)
    cache = args.outdir / "cache"
    cache.mkdir(exist_ok=True)
    for stale in cache.glob("tuning.sqlite3*"):  # start from an empty database
        stale.unlink()
    os.environ["GEMMZOO_CACHE_DIR"] = str(cache)
    began = time.perf_counter()

    import gemmzoo
    from gemmzoo.measure import measure
    from gemmzoo.registry import get_registry
    from gemmzoo.tuning import conformance_verdict, explain, rank, state, tune
    from gemmzoo.tuning.fingerprint import device_fingerprint, framework_versions
    from gemmzoo.tuning.select import Timed

    registry = get_registry()
    selected = registry.select(args.backend)
    backends = [b for b in selected if b.device == args.device and args.dtype in b.dtypes]
    usable = [b for b in backends if b.unavailable_reason() is None]
    if not usable:
        reasons = {b.name: b.unavailable_reason() for b in backends}
        print(f"no {args.device} backend is available here:", reasons)
        return 2
    os.environ["GEMMZOO_BACKENDS"] = ",".join(b.name for b in usable)

    conformance = {}
    for backend in usable:
        start = time.perf_counter()
        passed = conformance_verdict(state.store(), backend, args.dtype)
        conformance[backend.name] = {"passed": passed, "seconds": time.perf_counter() - start}
        seconds = conformance[backend.name]["seconds"]
        print(f"conformance {backend.name} {args.dtype}: {passed} ({seconds:.1f} s)", flush=True)
    candidates = [b for b in usable if conformance[b.name]["passed"]]
    if not candidates:
        print("no backend passed conformance; nothing to tune")
        return 1

    points = grid_points(args.dtype, args.max_mnk)
    tuned, skipped = [], []
    tune_start = time.perf_counter()
    for point in points:
        if time.perf_counter() - began > args.max_seconds:
            skipped.append(point)
            continue
        start = time.perf_counter()
        tune([point], [b.name for b in candidates], budget_s=args.budget)
        tuned.append(point)
        print(f"tuned {point.id} in {time.perf_counter() - start:.1f} s", flush=True)
    tune_seconds = time.perf_counter() - tune_start

    rows = []
    for point in tuned:
        shape = (point.m, point.n, point.k)
        state.answers.clear()
        choice = explain(shape, args.dtype, args.device, measure=False)
        oracle = {}
        for backend in candidates:
            try:
                timing = measure(backend, point, budget_s=args.budget, verify=False).timing
                oracle[backend.name] = Timed(backend.name, timing.median_s, timing.spread_s)
            except Exception as error:
                print(f"oracle: {backend.name} {point.id}: {error}", flush=True)
        if not oracle:
            continue
        winner, ranking, tied = rank(list(oracle.values()))
        picked = choice.backend.name
        fastest = ranking[0]
        slowdown = oracle[picked].median_s / fastest.median_s if picked in oracle else float("nan")
        verdict = "same" if picked == winner else ("within noise" if picked in tied else "WRONG")
        rows.append({
            "shape": "x".join(map(str, shape)), "picked": picked, "source": choice.source,
            "stored_us": choice.timing.median_s * 1e6 if choice.timing else None,
            "oracle_winner": winner, "oracle_tied": list(tied),
            "oracle_us": {t.backend: t.median_s * 1e6 for t in ranking},
            "oracle_iqr_us": {t.backend: t.spread_s * 1e6 for t in ranking},
            "tflops_picked": point.flops / oracle[picked].median_s / 1e12 if picked in oracle else None,
            "slowdown": slowdown, "verdict": verdict,
        })
        print(f"{point.id}: picked {picked}, oracle {winner} ({verdict}, x{slowdown:.3f})", flush=True)

    on_cuda = args.device == "cuda" and "torch" in [b.name for b in usable]
    overhead = host_overhead(args.dtype) if on_cuda else {}
    info = {
        "device": json.loads(device_fingerprint(args.device)), "versions": framework_versions(),
        "gemmzoo": gemmzoo.__version__, "python": platform.python_version(), "dtype": args.dtype,
        "budget_s": args.budget, "conformance": conformance, "tune_seconds": tune_seconds,
        "total_seconds": time.perf_counter() - began, "skipped": [p.id for p in skipped],
        "rows": rows, "host_overhead_us": overhead, "command": " ".join(sys.argv),
    }
    (args.outdir / "tune_oracle.json").write_text(json.dumps(info, indent=2))
    (args.outdir / "tune_oracle.md").write_text(markdown(info, [b.name for b in candidates]))
    print(f"wrote {args.outdir / 'tune_oracle.md'} ({info['total_seconds']:.0f} s)")
    return 0 if all(r["verdict"] != "WRONG" for r in rows) else 1


def markdown(info: dict[str, Any], names: list[str]) -> str:
    device = info["device"]
    lines = [
        "# best_backend against a fresh-measurement oracle",
        "",
        f"`{info['command']}`",
        "",
        f"Device: {', '.join(f'{k} {v}' for k, v in device.items())}; "
        f"{', '.join(f'{k} {v}' for k, v in sorted(info['versions'].items()))}; "
        f"gemmzoo {info['gemmzoo']}, Python {info['python']}. dtype {info['dtype']}, timing budget "
        f"{info['budget_s']} s per backend and shape (gemmzoo.measure median).",
        "",
        f"Tuning took {info['tune_seconds']:.0f} s; the whole run {info['total_seconds']:.0f} s. "
        "Conformance: " + ", ".join(f"{k} {'passed' if v['passed'] else 'FAILED'} ({v['seconds']:.1f} s)"
                                    for k, v in info["conformance"].items()) + ".",
        "",
        "A pick is `same` when it is the oracle's winner, `within noise` when the oracle's measured noise "
        "ties it with the winner, `WRONG` otherwise; slowdown = oracle time of the pick / oracle's fastest.",
        "",
        "| shape | picked (source) | oracle winner | verdict | slowdown | TFLOPS of pick | "
        + " | ".join(f"{n} us" for n in names) + " |",
        "|---|---|---|---|---|---|" + "---|" * len(names),
    ]
    for row in info["rows"]:
        times = " | ".join(f"{row['oracle_us'].get(n, float('nan')):,.1f}" for n in names)
        tflops = f"{row['tflops_picked']:.3g}" if row["tflops_picked"] else "-"
        lines.append(f"| {row['shape']} | {row['picked']} ({row['source']}) | {row['oracle_winner']} | "
                     f"{row['verdict']} | {row['slowdown']:.3f} | {tflops} | {times} |")
    if info["skipped"]:
        lines += ["", f"Not tuned (time limit): {', '.join(info['skipped'])}"]
    overhead = info["host_overhead_us"]
    if overhead:
        lines += ["", f"Host time per call, 64x64x64 {info['dtype']} on CUDA tensors, no sync per call "
                  f"(best of 5 x 2000 calls; gemmzoo picked {overhead['backend']}): torch.matmul "
                  f"{overhead['torch.matmul']:.2f} us, gemmzoo.matmul {overhead['gemmzoo.matmul']:.2f} us, "
                  f"best_backend (cached) {overhead['gemmzoo.best_backend']:.2f} us."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
