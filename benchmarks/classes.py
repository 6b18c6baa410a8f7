"""Batched, scaled FP8 and grouped products: every backend declaring the class against torch's
own call, in one run.

    python benchmarks/classes.py [--problem TEXT ...] [--model NAME --tokens T] [--device cuda|cpu]
                                 [--json PATH]

Problems are text forms of :mod:`gemmzoo.problems.classes` (``bmm:32x2048x2048x128``,
``scaled:rowwise:8192x8192x8192``, ``grouped:g8:4096x7168:m=512``); without any, a default set
of attention, FP8 and mixture-of-experts problems runs (smaller ones with ``--device cpu``). The
baselines are ``torch.matmul`` (batched), ``torch._scaled_mm`` row-wise or tensor-wise (scaled;
block-wise problems have none in torch, their baseline is the ``torch`` backend's dequantized
product) and the loop of one ``torch.mm`` per group (grouped); ``torch._grouped_mm`` is timed
beside them where the installed torch has it. Each backend is timed only after it passed its
class's conformance cases in this run, calling its own method on operands it made
(:func:`gemmzoo.scale.class_bench.call_of`). On CUDA every time is ``triton.testing.do_bench``'s median
(L2 flushed); on the CPU the median of loops of calls. Each row prints the time, TFLOPS and the
ratio baseline/time (above 1: faster than torch). ``--model`` runs a model's grid, its dense
projections against ``torch.mm`` with the backend ``gemmzoo.best_backend`` picks (which measures
a shape it has not met; ``gemmzoo tune`` first makes that quick)
(:mod:`gemmzoo.problems.model_grids`) and prints its GEMM time per forward pass, best backend against the
baseline, each point weighted by its count.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from typing import Any

import numpy as np

GPU_PROBLEMS = (
    "bmm:32x2048x2048x128", "bmm:32x2048x128x2048", "bmm:256x512x512x64", "bmm:8x4096x4096x4096",
    "scaled:rowwise:8192x8192x8192", "scaled:rowwise:4096x7168x16384", "scaled:rowwise:3000x5000x7000",
    "scaled:blockwise:4096x7168x16384", "scaled:blockwise:4096x2112x7168", "scaled:blockwise:4096x24576x1536",
    "grouped:g8:4096x7168:m=512", "grouped:4096x7168:m=128,900,64,1024,333,0,700,1024",
    "grouped:g8:28672x4096:m=1024", "grouped:g8:4096x14336:m=1024",
)
CPU_PROBLEMS = ("bmm:8x64x64x32", "scaled:rowwise:64x96x128", "scaled:blockwise:64x256x256",
                "grouped:g4:64x96:m=32", "grouped:64x96:m=5,0,40,19")


def median_time(call, device: str) -> float:
    """Seconds per call: ``do_bench``'s median on CUDA, the median of 5 loops on the CPU."""
    if device == "cuda":
        from triton.testing import do_bench

        return do_bench(call, warmup=25, rep=100, return_mode="median") / 1e3
    call()
    loops = []
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(3):
            call()
        loops.append((time.perf_counter() - start) / 3)
    return statistics.median(loops)


def operands(problem: Any, device: str, dtype: Any) -> dict[str, Any]:
    """Random torch operands of ``problem`` on ``device`` (fp8 values drawn in range)."""
    import torch

    from gemmzoo.problems.classes import scale_shapes

    gen = torch.Generator(device="cpu").manual_seed(0)

    def rand(*shape: int, fp8: bool = False) -> Any:
        x = torch.randn(*shape, generator=gen) * (4 if fp8 else 1)
        return x.to(device=device, dtype=torch.float8_e4m3fn if fp8 else dtype)

    m, n, k = problem.shape
    if problem.kind == "gemm":
        return {"a": rand(m, k), "b": rand(k, n)}
    if problem.kind == "batched":
        return {"a": rand(*problem.batch, m, k), "b": rand(*problem.batch, k, n)}
    if problem.kind == "scaled":
        sa_shape, sb_shape = scale_shapes(problem.scaling, m, n, k)
        return {"a": rand(m, k, fp8=True), "b": rand(n, k, fp8=True).t(),
                "scale_a": (torch.rand(sa_shape, generator=gen) + 0.5).to(device),
                "scale_b": (torch.rand(sb_shape, generator=gen) + 0.5).to(device)}
    offs = torch.tensor(problem.offsets(), dtype=torch.int32, device=device)
    return {"a": rand(m, k), "b": rand(len(problem.groups), k, n), "offsets": offs}


def baselines(problem: Any, ops: dict[str, Any]) -> dict[str, Any]:
    """torch's own calls for ``problem``, by label; the first is the baseline."""
    import torch

    found: dict[str, Any] = {}
    if problem.kind == "gemm":
        found["torch.mm"] = lambda: torch.mm(ops["a"], ops["b"])
    elif problem.kind == "batched":
        found["torch.matmul"] = lambda: torch.matmul(ops["a"], ops["b"])
    elif problem.kind == "scaled" and problem.scaling != "blockwise" and ops["a"].is_cuda:
        m, n, k = problem.shape
        if m % 16 == n % 16 == k % 16 == 0:
            sa = ops["scale_a"].reshape(()) if problem.scaling == "tensorwise" else ops["scale_a"]
            sb = ops["scale_b"].reshape(()) if problem.scaling == "tensorwise" else ops["scale_b"]
            found[f"torch._scaled_mm {problem.scaling}"] = lambda: torch._scaled_mm(
                ops["a"], ops["b"], sa, sb, out_dtype=torch.bfloat16, use_fast_accum=False)
    elif problem.kind == "grouped":
        ends = problem.offsets()

        def loop() -> Any:
            a = ops["a"]
            c = torch.empty((a.shape[0], ops["b"].shape[2]), dtype=a.dtype, device=a.device)
            start = 0
            for g, end in enumerate(ends):
                if end > start:
                    torch.mm(ops["a"][start:end], ops["b"][g], out=c[start:end])
                start = end
            return c

        found["per-group torch.mm loop"] = loop
        if hasattr(torch, "_grouped_mm") and ops["a"].is_cuda and ops["a"].dtype == torch.bfloat16:
            found["torch._grouped_mm"] = lambda: torch._grouped_mm(ops["a"], ops["b"], offs=ops["offsets"])
    return found


def contenders(problem: Any, device: str) -> tuple[dict[str, Any], dict[str, str]]:
    """Each available backend declaring the class, as a call of its own method on operands it made,
    once it passed its class's cases (:mod:`gemmzoo.scale.class_bench`)."""
    import gemmzoo
    from gemmzoo.scale.class_bench import call_of, verdict
    from gemmzoo.scale.class_bench import contenders as declaring

    calls, refused = {}, {}
    for backend in declaring(problem, [b for b in gemmzoo.backends() if b.device == device]):
        status, detail = verdict(backend, problem.kind, problem.dtype)
        if status != "ok":
            refused[backend.name] = f"{status.upper()}: {detail.splitlines()[0][:160]}"
            continue
        try:
            calls[backend.name] = call_of(backend, problem)
        except Exception as error:  # operands this backend refuses: said, not timed
            refused[backend.name] = str(error).splitlines()[0][:160]
    return calls, refused


def run_problem(text: str, device: str, dtype_name: str) -> dict[str, Any]:
    import torch

    from gemmzoo.problems.classes import parse_problem

    problem = parse_problem(text, dtype=dtype_name)
    ops = operands(problem, device, getattr(torch, dtype_name))
    base = baselines(problem, ops)
    if problem.kind == "gemm":  # a model's dense projections: the backend gemmzoo.matmul picks
        import gemmzoo

        chosen = gemmzoo.best_backend(problem.shape, problem.dtype, device)
        label = f"gemmzoo.matmul ({chosen.name})"
        calls = {label: lambda: gemmzoo.matmul(ops["a"], ops["b"], backend=chosen)}
        refused: dict[str, str] = {}
    else:
        calls, refused = contenders(problem, device)
    rows = {}
    for label, call in {**base, **calls}.items():
        try:
            rows[label] = median_time(call, device)
        except Exception as error:  # a call the installed libraries refuse: said, not timed
            refused[label] = str(error).splitlines()[0][:160]
    baseline = next((label for label in base if label in rows), None)
    if baseline is None and problem.kind == "scaled":
        baseline = "torch" if "torch" in rows else next(iter(rows), None)
    return {"problem": problem.text(), "class": problem.kind, "flops": problem.flops, "seconds": rows,
            "baseline": baseline, "refused": refused}


def print_result(result: dict[str, Any]) -> None:
    base = result["seconds"].get(result["baseline"])
    print(f"\n{result['problem']}  (baseline: {result['baseline']})")
    for label, seconds in sorted(result["seconds"].items(), key=lambda kv: kv[1]):
        tflops = result["flops"] / seconds / 1e12
        ratio = f"{base / seconds:6.2f}x" if base else "   -   "
        print(f"  {label:34s} {seconds * 1e6:11.1f} us {tflops:9.1f} TFLOPS {ratio}")
    for label, why in result["refused"].items():
        print(f"  {label:34s} not timed: {why}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problem", action="append", default=[])
    parser.add_argument("--model", default=None)
    parser.add_argument("--tokens", type=int, default=4096)
    parser.add_argument("--device", default=None, choices=("cuda", "cpu"))
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    import torch

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    problems = list(args.problem)
    points = []
    if args.model:
        from gemmzoo.problems.model_grids import model_grid

        points = model_grid(args.model, args.tokens, args.dtype)
        problems += [p.problem.text() for p in points]
    if not problems:
        problems = list(GPU_PROBLEMS if device == "cuda" else CPU_PROBLEMS)
    where = torch.cuda.get_device_name() if device == "cuda" else "cpu"
    print(f"device {device}: {where}; torch {torch.__version__}")
    results = []
    for text in dict.fromkeys(problems):
        result = run_problem(text, device, args.dtype)
        print_result(result)
        results.append(result)
    summary = None
    if points:
        from gemmzoo.problems.model_grids import weighted_summary

        times = {r["problem"]: r["seconds"] for r in results}
        by_problem = {r["problem"]: r["baseline"] for r in results}
        s = weighted_summary(points, times, lambda p: by_problem.get(p.text()) or "")
        summary = {"model": args.model, "tokens": args.tokens, "best_s": s.best_s, "baseline_s": s.baseline_s,
                   "ratio": s.ratio, "points": s.points, "missing": list(s.missing)}
        print(f"\n{args.model}, {args.tokens} tokens: GEMM time per forward pass {s.best_s * 1e3:.2f} ms "
              "with "
              f"the best backend of each point, {s.baseline_s * 1e3:.2f} ms with torch's own calls: "
              f"{s.ratio:.3f}x over {s.points} points ({len(s.missing)} without a baseline)")
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"device": device, "torch": torch.__version__, "results": results, "summary": summary},
                      out, indent=1)
    return 0


if __name__ == "__main__":
    np.seterr(all="ignore")
    sys.exit(main())
