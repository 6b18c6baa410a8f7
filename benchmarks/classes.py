"""Batched, scaled FP8 and grouped products: every backend declaring the class against torch's
own call, in one run.

    python benchmarks/classes.py [--problem TEXT[@DTYPE] ...] [--set all|targets|scaled|grouped]
                                 [--sweep] [--model NAME --tokens T] [--device cuda|cpu] [--json PATH]

Problems are text forms of :mod:`gemmzoo.problems.classes` (``bmm:32x2048x2048x128``,
``scaled:rowwise:8192x8192x8192``, ``grouped:g8:4096x7168:m=512``), each with an optional
``@DTYPE`` (``grouped:g8:4096x7168:m=512@float8_e4m3fn``; default ``--dtype``); without any, the
problems of ``--set`` run: ``targets`` (the default on CUDA) are the FP8 and grouped problems of
the project's kernel targets (row-wise FP8 at 8192³ and model shapes, block-wise FP8 at
4096×7168×16384 and DeepSeek-V3's projections, grouped MoE problems in bf16 and fp8), ``all``
adds attention batches; smaller ones with ``--device cpu``. The baselines are ``torch.matmul``
(batched), ``torch._scaled_mm`` row-wise or tensor-wise (scaled; block-wise problems have none in
torch, their baseline is the ``torch`` backend's dequantized product) and the loop of one cuBLAS
product per group (grouped: ``torch.mm``, or for fp8 ``torch._scaled_mm`` with unit scales, B
column-major; the bf16 loop on the same values is timed beside it); ``torch._grouped_mm`` is timed
beside them where the installed torch has it. ``--sweep`` also times each candidate config of the
Hopper grouped and scaled kernels on their own (checked against the baseline's result first), so
that one run says which config to make the default. Each backend is timed only after it passed its
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

ATTENTION_PROBLEMS = (
    "bmm:32x2048x2048x128", "bmm:32x2048x128x2048", "bmm:256x512x512x64", "bmm:8x4096x4096x4096",
)
#: Row-wise: 8192³ and model projections; block-wise: 4096x7168x16384 and DeepSeek-V3's
#: projections at 4096 tokens (q-down, q-up, kv-up, dense gate-up and down).
SCALED_PROBLEMS = (
    "scaled:rowwise:8192x8192x8192", "scaled:rowwise:4096x7168x16384", "scaled:rowwise:4096x36864x7168",
    "scaled:rowwise:3000x5000x7000",
    "scaled:blockwise:4096x7168x16384", "scaled:blockwise:4096x1536x7168", "scaled:blockwise:4096x24576x1536",
    "scaled:blockwise:4096x32768x512", "scaled:blockwise:4096x36864x7168", "scaled:blockwise:4096x7168x18432",
)
#: 8 experts, N=4096 and K=7168 (even and ragged rows), and Mixtral 8x7B's experts (gate and up
#: fused, then down) at 1024 rows each; bf16 and fp8.
GROUPED_PROBLEMS = tuple(
    f"{text}@{dtype}"
    for dtype in ("bfloat16", "float8_e4m3fn")
    for text in ("grouped:g8:4096x7168:m=512", "grouped:4096x7168:m=128,900,64,1024,333,0,700,1024",
                 "grouped:g8:28672x4096:m=1024", "grouped:g8:4096x14336:m=1024")
)
PROBLEM_SETS = {
    "targets": SCALED_PROBLEMS + GROUPED_PROBLEMS,
    "all": ATTENTION_PROBLEMS + SCALED_PROBLEMS + GROUPED_PROBLEMS,
    "scaled": SCALED_PROBLEMS,
    "grouped": GROUPED_PROBLEMS,
}
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
    if problem.dtype == "float8_e4m3fn":  # each B[g] column-major, as torch's fp8 products take it
        b = rand(len(problem.groups), n, k, fp8=True).transpose(1, 2)
        return {"a": rand(m, k, fp8=True), "b": b, "offsets": offs}
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

        if ops["a"].dtype == torch.float8_e4m3fn:
            found["per-group torch._scaled_mm loop"] = _scaled_loop(ops, ends)
            wide = {**ops, "a": ops["a"].to(torch.bfloat16), "b": ops["b"].to(torch.bfloat16).contiguous()}
            found["per-group torch.mm loop (bf16)"] = lambda: _loop(wide, ends)
        else:
            found["per-group torch.mm loop"] = loop
        if hasattr(torch, "_grouped_mm") and ops["a"].is_cuda and ops["a"].dtype == torch.bfloat16:
            found["torch._grouped_mm"] = lambda: torch._grouped_mm(ops["a"], ops["b"], offs=ops["offsets"])
    return found


def _loop(ops: dict[str, Any], ends: list[int]) -> Any:
    """One ``torch.mm`` per non-empty group into C."""
    import torch

    a, b = ops["a"], ops["b"]
    c = torch.empty((a.shape[0], b.shape[2]), dtype=a.dtype, device=a.device)
    start = 0
    for g, end in enumerate(ends):
        if end > start:
            torch.mm(a[start:end], b[g], out=c[start:end])
        start = end
    return c


def _scaled_loop(ops: dict[str, Any], ends: list[int]) -> Any:
    """One ``torch._scaled_mm`` per non-empty group (unit scales, C in bf16, promoted sums)."""
    import torch

    a, b = ops["a"], ops["b"]
    one = torch.ones((), dtype=torch.float32, device=a.device)

    def loop() -> Any:
        c = torch.empty((a.shape[0], b.shape[2]), dtype=torch.bfloat16, device=a.device)
        start = 0
        for g, end in enumerate(ends):
            if end > start:
                c[start:end] = torch._scaled_mm(a[start:end], b[g], one, one, out_dtype=torch.bfloat16,
                                                use_fast_accum=False)
            start = end
        return c

    return loop


def dequantized_product(ops: dict[str, Any], scaling: str) -> Any:
    """The scaled product of ``ops`` (fp8 A and B with their scales) in fp32 from the dequantized
    operands, rounded to bf16: the reference a sweep of block-wise kernels is checked against."""
    import torch

    a, b, sa, sb = ops["a"].float(), ops["b"].float(), ops["scale_a"], ops["scale_b"]
    k, n = a.shape[1], b.shape[1]
    if scaling == "blockwise":
        sa = sa.repeat_interleave(128, dim=1)[:, :k]
        sb = sb.repeat_interleave(128, dim=0).repeat_interleave(128, dim=1)[:k, :n]
    return torch.mm(a * sa, b * sb).to(torch.bfloat16)


def sweep(problem: Any, ops: dict[str, Any], reference: Any) -> tuple[dict[str, Any], dict[str, str]]:
    """Each candidate config of the Hopper grouped or scaled kernel as a call of its own, after
    its result matched ``reference`` (the baseline's C) within 2% of C's largest magnitude."""
    import torch

    from gemmzoo_triton.core.hopper import num_sms

    calls: dict[str, Any] = {}
    refused: dict[str, str] = {}
    sms = num_sms(ops["a"].device)
    if problem.kind == "grouped":
        from gemmzoo_triton.core import grouped_mm_tma as kernel

        fp8 = ops["a"].dtype == torch.float8_e4m3fn
        out = torch.bfloat16 if fp8 else ops["a"].dtype
        c = torch.empty(reference.shape, dtype=out, device=ops["a"].device)
        for text in GROUPED_SWEEP[ops["a"].element_size()]:
            config = kernel.parse_config(text)

            def call(config: Any = config) -> Any:
                kernel.launch(ops["a"], ops["b"], ops["offsets"], c, config.per_sm * sms, config)
                return c

            calls[f"grouped TMA {text}"] = call
    elif problem.kind == "scaled" and problem.scaling != "tensorwise":
        from gemmzoo_triton.fp8 import scaled_tma_kernel as kernel

        m, n, k = problem.shape
        if k % 16 or n % 8:
            return calls, refused
        c = torch.empty((m, n), dtype=torch.bfloat16, device=ops["a"].device)
        for config in kernel.HOPPER_CONFIGS:
            def call(config: Any = config) -> Any:
                kernel.launch_config(ops["a"], ops["b"], ops["scale_a"], ops["scale_b"], problem.scaling, c,
                                     sms, config)
                return c

            calls[f"scaled TMA {kernel.config_text(config)}"] = call
        from gemmzoo_triton.core.hopper import gluon_shared_memory

        shared = gluon_shared_memory(ops["a"].device)
        if shared is not None:
            from gemmzoo_triton.fp8 import gluon_scaled_kernel as gluon

            config = gluon.config_for(shared, c.element_size(), problem.scaling)

            def call_gluon() -> Any:
                gluon.launch(ops["a"], ops["b"], ops["scale_a"], ops["scale_b"], problem.scaling, c, sms,
                             config)
                return c

            calls[f"scaled Gluon 128x128x128/s{config.stages}"] = call_gluon
    checked = {}
    for label, call in calls.items():
        try:
            out = call().float()
            torch.cuda.synchronize()
        except Exception as error:  # a config this GPU or Triton refuses: said, not timed
            refused[label] = str(error).splitlines()[0][:160]
            continue
        ref = reference.float()
        worst = ((out - ref).abs().max() / ref.abs().max().clamp_min(1e-30)).item()
        if not worst <= 0.02:
            refused[label] = f"WRONG: largest difference {worst:.3g} of the baseline's largest element"
            continue
        checked[label] = call
    return checked, refused


#: Grouped kernel configs ``--sweep`` times, by operand size (``BMxBNxBK/sS/wW/pP``).
GROUPED_SWEEP = {
    2: ("128x256x64/s3/w8/p1", "128x128x64/s4/w8/p1", "128x128x64/s3/w4/p2", "256x128x64/s3/w8/p1",
        "128x256x64/s4/w8/p1", "64x256x64/s4/w4/p2"),
    1: ("128x128x128/s3/w4/p2/h2", "128x128x128/s4/w8/p1", "64x128x128/s4/w4/p2", "256x128x128/s3/w8/p1/h2",
        "64x128x128/s4/w4/p1"),
}


def contenders(problem: Any, device: str, verdicts: dict[tuple[str, str, str], tuple[str, str]]
               ) -> tuple[dict[str, Any], dict[str, str]]:
    """Each available backend declaring the class, as a call of its own method on operands it made,
    once it passed its class's cases (:mod:`gemmzoo.scale.class_bench`): once a run for each backend,
    class and dtype, kept in ``verdicts``."""
    import gemmzoo
    from gemmzoo.scale.class_bench import call_of, verdict
    from gemmzoo.scale.class_bench import contenders as declaring

    calls, refused = {}, {}
    members = {b.name: b for b in gemmzoo.backends() if b.device == device}
    if device == "cuda" and "triton-fp8" in members and problem.kind == "scaled":  # without the Gluon kernel
        from gemmzoo_triton import TritonFp8Backend

        members["triton-fp8 (gluon=False)"] = TritonFp8Backend(gluon=False)
    for label, backend in members.items():
        if not declaring(problem, [backend]):
            continue
        key = (label, problem.kind, problem.dtype)
        if key not in verdicts:
            verdicts[key] = verdict(backend, problem.kind, problem.dtype)
        status, detail = verdicts[key]
        if status != "ok":
            refused[label] = f"{status.upper()}: {detail.splitlines()[0][:160]}"
            continue
        try:
            calls[label] = call_of(backend, problem)
        except Exception as error:  # operands this backend refuses: said, not timed
            refused[label] = str(error).splitlines()[0][:160]
    return calls, refused


def run_problem(text: str, device: str, dtype_name: str, sweeping: bool = False,
                verdicts: dict[tuple[str, str, str], tuple[str, str]] | None = None) -> dict[str, Any]:
    import torch

    from gemmzoo.problems.classes import parse_problem

    text, _, suffix = text.partition("@")
    dtype_name = suffix or dtype_name
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
        calls, refused = contenders(problem, device, {} if verdicts is None else verdicts)
        reference = next(iter(base.values()), None)
        if reference is None and problem.kind == "scaled":
            reference = lambda: dequantized_product(ops, problem.scaling)  # noqa: E731
        if sweeping and device == "cuda" and reference is not None and problem.kind in ("grouped", "scaled"):
            swept, why = sweep(problem, ops, reference())
            calls.update(swept)
            refused.update(why)
    rows = {}
    for label, call in {**base, **calls}.items():
        try:
            rows[label] = median_time(call, device)
        except Exception as error:  # a call the installed libraries refuse: said, not timed
            refused[label] = str(error).splitlines()[0][:160]
    baseline = next((label for label in base if label in rows), None)
    if baseline is None and problem.kind == "scaled":
        baseline = "torch" if "torch" in rows else next(iter(rows), None)
    return {"problem": problem.text(), "dtype": problem.dtype, "class": problem.kind, "flops": problem.flops,
            "seconds": rows, "baseline": baseline, "refused": refused}


def print_result(result: dict[str, Any]) -> None:
    base = result["seconds"].get(result["baseline"])
    print(f"\n{result['problem']} {result['dtype']}  (baseline: {result['baseline']})")
    for label, seconds in sorted(result["seconds"].items(), key=lambda kv: kv[1]):
        tflops = result["flops"] / seconds / 1e12
        ratio = f"{base / seconds:6.2f}x" if base else "   -   "
        print(f"  {label:34s} {seconds * 1e6:11.1f} us {tflops:9.1f} TFLOPS {ratio}")
    for label, why in result["refused"].items():
        print(f"  {label:34s} not timed: {why}")


#: Labels of rows that are no gemmzoo member: torch's own calls, and ``--sweep``'s kernel configs.
_NOT_MEMBERS = ("torch.", "per-group ", "grouped TMA ", "scaled TMA ", "scaled Gluon ")


def best_member(result: dict[str, Any]) -> tuple[str, float] | None:
    """The fastest gemmzoo backend of a result (label, seconds), or None."""
    members = {label: t for label, t in result["seconds"].items() if not label.startswith(_NOT_MEMBERS)}
    if result["class"] == "scaled":  # block-wise: the baseline is a member (the torch path)
        members.pop(result["baseline"], None)
    return min(members.items(), key=lambda kv: kv[1]) if members else None


def target_lines(results: list[dict[str, Any]]) -> list[str]:
    """Issue 47's kernel targets read off this run: row-wise FP8 (best member against
    ``torch._scaled_mm``, geomean, and TFLOPS at 8192³), block-wise FP8 (TFLOPS, and against the
    torch path), grouped (best member against the per-group loop, and fp8 against the bf16 loop)."""
    lines, rowwise = [], []
    for r in results:
        best = best_member(r)
        if best is None or r["baseline"] not in r["seconds"]:
            continue
        label, seconds = best
        ratio = r["seconds"][r["baseline"]] / seconds
        tflops = r["flops"] / seconds / 1e12
        text = f"{r['problem']} {r['dtype']}: {label} {tflops:.0f} TFLOPS, {ratio:.2f}x {r['baseline']}"
        if r["problem"].startswith("scaled:rowwise") and r["baseline"].startswith("torch._scaled_mm"):
            rowwise.append(ratio)
        if r["class"] == "grouped" and "per-group torch.mm loop (bf16)" in r["seconds"]:
            text += f", {r['seconds']['per-group torch.mm loop (bf16)'] / seconds:.2f}x the bf16 loop"
        lines.append(text)
    if rowwise:
        lines.append(f"row-wise geomean over {len(rowwise)}: {statistics.geometric_mean(rowwise):.3f}x "
                     "torch._scaled_mm (target >= 1.0, and >= 1000 TFLOPS at 8192^3)")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problem", action="append", default=[])
    parser.add_argument("--model", default=None)
    parser.add_argument("--tokens", type=int, default=4096)
    parser.add_argument("--device", default=None, choices=("cuda", "cpu"))
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--set", default=None, choices=sorted(PROBLEM_SETS),
                        help="the problems to run without --problem (default: targets on CUDA)")
    parser.add_argument("--sweep", action="store_true",
                        help="also time each candidate config of the Hopper grouped and scaled kernels")
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
        problems = list(PROBLEM_SETS[args.set or "targets"] if device == "cuda" else CPU_PROBLEMS)
    where = torch.cuda.get_device_name() if device == "cuda" else "cpu"
    print(f"device {device}: {where}; torch {torch.__version__}")
    results, verdicts = [], {}
    for text in dict.fromkeys(problems):
        result = run_problem(text, device, args.dtype, args.sweep, verdicts)
        print_result(result)
        results.append(result)
    lines = target_lines(results)
    if lines:
        print("\nbest member per problem (targets: row-wise >= 1.0x geomean; block-wise >= 1200 TFLOPS and "
              ">= 1.1x the torch path; grouped >= 1.3x the loop)")
        for line in lines:
            print(f"  {line}")
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
            json.dump({"device": device, "torch": torch.__version__, "results": results, "summary": summary,
                       "targets": lines}, out, indent=1)
    return 0


if __name__ == "__main__":
    np.seterr(all="ignore")
    sys.exit(main())
