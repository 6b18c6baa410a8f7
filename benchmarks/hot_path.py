"""Host time per call of gemmzoo's hot path against the library call it wraps, in one run.

    python benchmarks/hot_path.py [--json FILE] [--calls N] [--rounds R] [--max-rounds M] [--ratio-noise F]
    python benchmarks/hot_path.py --targets [--json FILE] [--rounds R] [--max-rounds M] [--budget S]
                                  [--verdicts DB] [--tune]
                                  [--groups G1,G2] [--shape MxNxK-DTYPE-LAYOUT ...]

Each row times a loop of N calls followed by one synchronisation and divides by N: what a
program calling in a loop waits per call. Variants of one group run interleaved, at least R rounds,
and the median of the rounds is kept; the ratio is the median over rounds of each round's ratio to
the group's first row (the library's own call) timed in that round, printed with its 95%
confidence interval (order statistics: none under six rounds). While a ratio that has a target is
known less well than ``--ratio-noise`` (half that interval over it), rounds are added one at a
time, up to ``--max-rounds``. The ratio of the fastest rounds is printed too: host timings on a
shared machine carry interference that only ever adds time.
On the CPU: 64x64 float32 NumPy and torch arrays. With CUDA: 128³ and 512³ float16 torch tensors
(and CuPy arrays when CuPy is installed). The tuning cache is a fresh temporary directory, so
``gemmzoo.matmul`` without a backend gives the unmeasured default (torch for CUDA tensors).

``--targets`` measures issue 34's targets instead (see :func:`target_groups`): on a miss
``best_backend`` measures each problem first, so ``gemmzoo.matmul`` then runs what it chose.
With ``--tune``, after every caller loop, each problem compared with torch-compile is tuned as
``gemmzoo tune --shape`` would: every backend of the device is measured again, with those a first
answer leaves out (those that compile each problem, such as torch-compile-cuda), timed in a column
of their own, and the device comparison uses ``gemmzoo.matmul(a, b, by="device")``'s answer from every
measurement.
``--shape`` (repeatable) measures the same targets on problems of your own instead of the
built-in groups, as one group named "given".
Restrict the candidates with ``GEMMZOO_BACKENDS`` as usual.
``gemmzoo.matmul`` runs through its compiled dispatch (built first into the fresh cache) unless
``--dispatch python`` is given.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

Call = Callable[[Any, Any], Any]


@dataclass(frozen=True)
class Rounds:
    """How many interleaved rounds a group runs: at least ``least``; then, while the ratio of a
    row with a target is known less well than ``noise`` (half its 95% confidence interval over
    it), one more at a time, up to ``most``."""

    least: int
    most: int
    noise: float = 0.01


def run_group(title: str, rows: list[tuple[str, Call, Any, Any]], sync: Callable[[], None], calls: int,
              rounds: Rounds, targets: dict[str, float]) -> dict[str, Any]:
    from gemmzoo.measure import loop_per_call_s
    from gemmzoo.measure.stats import median_interval, relative_noise

    for _name, call, a, b in rows:  # warm up: plans, compilation, allocator
        for _ in range(20):
            call(a, b)
    samples: dict[str, list[float]] = {name: [] for name, *_ in rows}
    base = rows[0][0]

    def ratios(name: str) -> list[float]:
        # each round's time over the library call's timed in that round: interference that slows
        # a whole round cancels out
        return [t / t0 for t, t0 in zip(samples[name], samples[base], strict=True)]

    def settled() -> bool:
        return all(relative_noise(ratios(name)) <= rounds.noise for name in targets if name in samples)

    number = 0
    while number < rounds.least or (number < rounds.most and not settled()):
        for name, call, a, b in (rows if number % 2 == 0 else rows[::-1]):  # no row always first
            samples[name].append(loop_per_call_s(functools.partial(call, a, b), calls, sync))
        number += 1
    medians = {name: statistics.median(values) for name, values in samples.items()}
    fastest_base = min(samples[base])
    print(f"\n{title} ({number} rounds)")
    result = []
    for name, *_ in rows:
        ratio = statistics.median(ratios(name))
        interval = median_interval(ratios(name))
        known = f"95% {interval[0]:.2f}-{interval[1]:.2f}" if interval else "95% -"
        # the fastest round of each: the cost of the code itself, with the least interference
        ratio_min = min(samples[name]) / fastest_base
        target = targets.get(name)
        verdict = ""
        if target is not None:
            verdict = f"  target <= {target:.2f}x: {'met' if ratio <= target else 'MISSED'}"
        spread = (max(samples[name]) - min(samples[name])) * 1e6
        print(f"  {name:<48} {medians[name] * 1e6:8.2f} us  (range {spread:5.2f})  {ratio:5.2f}x ({known})"
              f"  fastest rounds {ratio_min:5.2f}x{verdict}")
        result.append({"name": name, "median_us": medians[name] * 1e6, "range_us": spread, "ratio": ratio,
                       "ratio_interval": list(interval) if interval else None, "rounds": number,
                       "min_us": min(samples[name]) * 1e6, "ratio_of_minima": ratio_min, "target": target})
    return {"group": title, "rows": result}


def cpu_groups(calls: int, rounds: Rounds) -> list[dict[str, Any]]:
    import gemmzoo

    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((64, 64)).astype(np.float32) for _ in range(2))
    numpy_backend = gemmzoo.get_backend("numpy")
    groups = [run_group("CPU 64x64x64 float32, NumPy arrays", [
        ("np.matmul", np.matmul, a, b),
        ("numpy backend .matmul", numpy_backend.matmul, a, b),
        ("numpy backend plan (prepare)", numpy_backend.prepare(a, b), a, b),
        ("gemmzoo.matmul (no backend named)", gemmzoo.matmul, a, b),
    ], lambda: None, calls, rounds, {"numpy backend .matmul": 1.3, "gemmzoo.matmul (no backend named)": 1.5})]
    try:
        import torch
    except ImportError:
        return groups
    ta, tb = torch.from_numpy(a), torch.from_numpy(b)
    torch_cpu = gemmzoo.get_backend("torch-cpu")
    groups.append(run_group("CPU 64x64x64 float32, torch tensors", [
        ("torch.matmul", torch.matmul, ta, tb),
        ("torch-cpu backend .matmul", torch_cpu.matmul, ta, tb),
        ("gemmzoo.matmul(a, b, 'torch-cpu')", lambda x, y: gemmzoo.matmul(x, y, "torch-cpu"), ta, tb),
        ("gemmzoo.matmul (no backend named)", gemmzoo.matmul, ta, tb),
    ], lambda: None, calls, rounds, {"gemmzoo.matmul(a, b, 'torch-cpu')": 1.3}))
    return groups


def cuda_groups(calls: int, rounds: Rounds) -> list[dict[str, Any]]:
    import torch

    import gemmzoo

    groups = []
    torch_backend = gemmzoo.get_backend("torch")
    cupy_backend = gemmzoo.get_backend("cupy")
    with_cupy = cupy_backend.unavailable_reason() is None
    for size in (128, 512):
        a, b = (torch.randn(size, size, device="cuda", dtype=torch.float16) for _ in range(2))
        picked = gemmzoo.best_backend((size, size, size), "float16", "cuda", measure=False).name
        groups.append(run_group(f"CUDA {size}³ float16, torch tensors (gemmzoo.matmul picks {picked})", [
            ("torch.matmul", torch.matmul, a, b),
            ("torch.mm (what the torch backend launches)", torch.mm, a, b),
            ("torch backend .matmul", torch_backend.matmul, a, b),
            ("torch backend plan (prepare)", torch_backend.prepare(a, b), a, b),
            ("gemmzoo.matmul (no backend named)", gemmzoo.matmul, a, b),
            ("gemmzoo.matmul(a, b, 'torch')", lambda x, y: gemmzoo.matmul(x, y, "torch"), a, b),
        ], torch.cuda.synchronize, calls, rounds,
            {"torch backend .matmul": 1.10, "torch backend plan (prepare)": 1.10,
             "gemmzoo.matmul (no backend named)": 1.15}))
        if not with_cupy:
            continue
        import cupy

        ca, cb = cupy.asarray(a), cupy.asarray(b)
        sync = cupy.cuda.get_current_stream().synchronize
        groups.append(run_group(f"CUDA {size}³ float16, CuPy arrays", [
            ("cupy.matmul", cupy.matmul, ca, cb),
            ("cupy.dot", cupy.dot, ca, cb),
            ("cupy backend .matmul", cupy_backend.matmul, ca, cb),
            ("gemmzoo.matmul(a, b, 'cupy')", lambda x, y: gemmzoo.matmul(x, y, "cupy"), ca, cb),
        ], sync, calls, rounds, {"gemmzoo.matmul(a, b, 'cupy')": 1.15}))
    return groups


# The issue-34 targets (--targets) ---------------------------------------------------------------

#: (M, N, K, dtype, layout) per group: LLM projections from decode to prefill (a Llama-3-8B-sized
#: layer: QKV 4096->6144, MLP 4096->14336->4096), problems gemmzoo lost on, odd sizes, long K, tf32
#: and fp8 (B column-major, as torch._scaled_mm takes it). None is in a bundled grid.
TARGET_PROBLEMS: dict[str, list[tuple[int, int, int, str, str]]] = {
    "LLM projections": [
        (1, 6144, 4096, "bfloat16", "NN"), (1, 14336, 4096, "bfloat16", "NN"),
        (1, 4096, 14336, "bfloat16", "NN"), (16, 6144, 4096, "bfloat16", "NN"),
        (16, 4096, 14336, "bfloat16", "NN"), (128, 14336, 4096, "bfloat16", "NN"),
        (32, 4608, 3584, "float16", "NN"), (2048, 6144, 4096, "bfloat16", "NN"),
        (2048, 4096, 14336, "bfloat16", "NN"), (8192, 768, 3072, "float16", "NN"),
        (1024, 50257, 768, "bfloat16", "NN"),
    ],
    "odd sizes": [
        (1023, 1023, 1023, "float16", "NN"), (2047, 4093, 1531, "float16", "NN"),
        (777, 5555, 3333, "bfloat16", "NN"), (3001, 3001, 3001, "bfloat16", "NN"),
        (32768, 128, 128, "float16", "NN"),
    ],
    "long K": [(64, 64, 65536, "float16", "NN"), (256, 256, 32768, "bfloat16", "NN")],
    "tf32": [(3072, 5120, 2048, "tf32", "NN"), (1000, 1000, 1000, "tf32", "NN")],
    "fp8": [(16, 18944, 3584, "float8_e4m3fn", "NT"), (2048, 10240, 8192, "float8_e4m3fn", "NT"),
            (4096, 4096, 4096, "float8_e4m3fn", "NT")],
}
#: A small CPU set, to run the same code path where there is no GPU.
CPU_TARGET_PROBLEMS = {"CPU check": [(48, 40, 56, "float32", "NN"), (33, 65, 17, "float32", "NT")]}
#: Padded paths on the misaligned cube of the issue, against torch.matmul in caller time.
PADDED_PROBLEM = (1025, 1025, 1025, "float16", "NN")
PADDED_BACKENDS = ("torch-padded", "triton-grouped")
COMPILE_PEER = {"cuda": "torch-compile-cuda", "cpu": "torch-compile"}
#: Rounds of the device-time comparison with the compile peer (a GPU's clocks drift by a per cent
#: or two between two measurements taken one after the other).
COMPARE_ROUNDS = 3


def _target_operands(m: int, n: int, k: int, dtype: str, layout: str, device: str) -> tuple[Any, Any]:
    import torch

    generator = torch.Generator(device=device).manual_seed(m * 7 + n * 5 + k)
    storage = torch.float32 if dtype in ("tf32", "float8_e4m3fn") else getattr(torch, dtype)

    def make(rows: int, cols: int, transposed: bool) -> Any:
        shape = (cols, rows) if transposed else (rows, cols)
        x = torch.randn(*shape, device=device, generator=generator)
        if dtype == "float8_e4m3fn":
            x = x.to(torch.float8_e4m3fn)
        else:
            x = x.to(storage)
        return x.T if transposed else x

    return make(m, k, layout[0] == "T"), make(k, n, layout[1] == "T")


def _ranking(m: int, n: int, k: int, dtype: str, device: str, layout: str) -> list[dict[str, Any]]:
    """The stored timings a first answer ranked, fastest first (read back, nothing measured):
    each backend's time per call, what that time is (its loops' time, or its device or host time,
    whichever bounds a call), and whether its measurement met its noise target."""
    from gemmzoo.tuning.select import explain

    choice = explain((m, n, k), dtype, device, measure=False, layout=layout)
    return [{"backend": t.backend, "us": t.median_s * 1e6, "spread_us": t.spread_s * 1e6, "bound": t.bound,
             "converged": t.converged} for t in choice.ranking]


def _baseline(dtype: str) -> tuple[str, Call]:
    """What a torch user calls for ``dtype``: torch.matmul (with TF32 allowed for tf32), or
    torch._scaled_mm with unit scales and fp32 promotion for fp8."""
    import torch

    if dtype == "float8_e4m3fn":
        one = torch.ones((), device="cuda", dtype=torch.float32)

        def scaled(a: Any, b: Any) -> Any:
            return torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16,
                                    use_fast_accum=False)

        return "torch._scaled_mm", scaled
    if dtype == "tf32":
        return "torch.matmul (allow_tf32)", lambda a, b: torch.matmul(a.data, b.data)
    return "torch.matmul", torch.matmul


def _calls_for(call: Call, a: Any, b: Any, sync: Callable[[], None], seconds: float = 0.05) -> int:
    """How many calls make a loop of about ``seconds`` (timed after warm-up calls: a library's first
    call, such as cuBLAS's handle, would make the loops far too short)."""
    from gemmzoo.measure import loop_per_call_s

    loop_per_call_s(functools.partial(call, a, b), 3, sync)
    per_call = loop_per_call_s(functools.partial(call, a, b), 10, sync)
    return max(10, min(2000, int(seconds / max(per_call, 1e-7))))


def _geomean(values: list[float]) -> float:
    return float(np.exp(np.mean(np.log(values)))) if values else float("nan")


def _tune_problem(m: int, n: int, k: int, dtype: str, layout: str, device: str, budget_s: float) -> float:
    """Measure one problem with ``gemmzoo tune --shape`` in a child process, as a user would run
    it: every available, selectable backend on ``device`` for ``dtype``, those that compile each
    problem (which a first answer leaves out) included, all in one process, so that the rows
    compared were measured together and not minutes apart; this process then answers from the rows
    it stored. The seconds it took (nothing is run, and 0 returned, when no backend compiles)."""
    import subprocess

    from gemmzoo.session import current
    from gemmzoo.tuning import state

    usable = [b for b in current().select()
              if b.device == device and dtype in b.dtypes and getattr(b, "selectable", True)
              and b.unavailable_reason() is None]
    names = [b.name for b in usable] if any(getattr(b, "compiles_per_problem", False) is True
                                            for b in usable) else []
    start = time.perf_counter()
    if names:
        command = [sys.executable, "-m", "gemmzoo", "tune", "--shape", f"{m}x{n}x{k}-{dtype}-{layout}",
                   "--budget", str(budget_s), "--format", "plain"]
        for name in names:
            command += ["--backend", name]
        done = subprocess.run(command, stdout=subprocess.DEVNULL)
        if done.returncode != 0:
            print(f"  gemmzoo tune exited {done.returncode} on {m}x{n}x{k} {dtype} {layout}")
        state.forget_answers()  # the answers now come from the rows the child stored
    return time.perf_counter() - start


def target_groups(rounds: Rounds, device: str, budget_s: float, only: list[str] | None = None,
                  tuned: bool = False, given: list[tuple[int, int, int, str, str]] | None = None
                  ) -> list[dict[str, Any]]:
    """The issue-34 targets, measured in one run: ``gemmzoo.matmul`` against what a torch user
    calls (caller time, loops of calls, interleaved rounds), the backend ``gemmzoo.matmul`` uses
    against torch-compile in device time (the engine: CUDA events, L2 flushed), best_backend's first
    answer on a miss (conformance verdicts made beforehand, timed apart), torch-compile's compile
    time, and the padded paths at 1025³ fp16 (group ``padded``). ``only``: the groups to run.
    ``tuned``: after the caller loops, each problem compared with torch-compile is tuned
    (:func:`_tune_problem`) before the comparison, which then uses the tuned answer. ``given``:
    problems to measure instead of the built-in ones, as one group "given" (``only`` is ignored)."""
    import torch

    import gemmzoo
    from gemmzoo import TF32Array
    from gemmzoo.dispatch.matmul import backend_for

    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    problems = TARGET_PROBLEMS if device == "cuda" else CPU_TARGET_PROBLEMS
    problems = {title: group for title, group in problems.items() if not only or title in only}
    if given:
        problems, only = {"given": given}, ["given"]
    peer = gemmzoo.get_backend(COMPILE_PEER[device])
    peer_reason = peer.unavailable_reason()
    # Conformance verdicts first, timed apart: a first answer on a real machine has them stored.
    for dtype in sorted({p[3] for group in problems.values() for p in group}):
        start = time.perf_counter()
        gemmzoo.best_backend((64, 64, 64), dtype, device)
        print(f"conformance verdicts for {dtype}: {time.perf_counter() - start:.1f} s")
    groups: list[dict[str, Any]] = []
    speedups: list[float] = []
    first_answers: list[float] = []
    allow_tf32 = torch.backends.cuda.matmul.allow_tf32
    compared: list[dict[str, Any]] = []  # rows whose problem torch-compile is compared on, after
    for title, group in problems.items():
        rows = []
        for m, n, k, dtype, layout in group:
            a, b = _target_operands(m, n, k, dtype, layout, device)
            if dtype == "tf32":
                a, b = TF32Array(a), TF32Array(b)
            start = time.perf_counter()
            chosen = gemmzoo.best_backend((m, n, k), dtype, device, layout=layout)
            first_answer = time.perf_counter() - start
            first_answers.append(first_answer)
            ranking = _ranking(m, n, k, dtype, device, layout)
            name, baseline = _baseline(dtype) if device == "cuda" else ("torch.matmul", torch.matmul)
            torch.backends.cuda.matmul.allow_tf32 = dtype == "tf32"
            try:
                calls = _calls_for(baseline, a, b, sync)
                used = backend_for(a, b).name
                label = (f"{title}: {m}x{n}x{k} {dtype} {layout} (best_backend: {chosen.name}; "
                         f"gemmzoo.matmul uses {used})")
                caller = run_group(label, [(name, baseline, a, b), ("gemmzoo.matmul", gemmzoo.matmul, a, b)],
                                   sync, calls, rounds, {"gemmzoo.matmul": 1 / 0.97})
            finally:
                torch.backends.cuda.matmul.allow_tf32 = allow_tf32
            speedup = 1 / caller["rows"][1]["ratio"]
            speedups.append(speedup)
            row: dict[str, Any] = {"problem": [m, n, k, dtype, layout], "chosen": chosen.name, "used": used,
                                   "caller_speedup": speedup, "first_answer_s": first_answer,
                                   "ranking": ranking, "caller": caller["rows"]}
            print(f"  first answer {first_answer:.2f} s; caller speedup {speedup:.2f}x "
                  f"(target >= 0.97x: {'met' if speedup >= 0.97 else 'MISSED'})")
            print("  ranked on the miss: " + ", ".join(
                f"{r['backend']} {r['us']:.1f} us ({r['bound']}{'' if r['converged'] else ', noisy'})"
                for r in ranking))
            rows.append(row)
            if peer_reason is None and dtype in peer.dtypes:
                compared.append(row)
        groups.append({"group": title, "rows": rows})
    if device == "cuda" and (not only or "padded" in only):
        groups.append(_padded_group(rounds, sync))
    # Inductor's compile workers outlive a compile: the peer comes after every caller loop
    for row in compared:
        _against_compile(row, peer, budget_s, device, tuned)
    if compared:
        ratios = [row["device_vs_compile"] for row in compared]
        met = sum(row["device_vs_compile"] >= 1.0 or row["used_by_device"] == peer.name for row in compared)
        print(f"\nagainst {peer.name} in device time: {met} of {len(ratios)} problems at or above it "
              f"(target: every one; a problem where gemmzoo.matmul(by='device') runs {peer.name} itself "
              f"counts), worst measured {min(ratios):.3f}x")
    if not speedups:
        return groups
    geomean = _geomean(speedups)
    median_answer = float(np.median(first_answers))
    print(f"\ngemmzoo.matmul against the torch baseline, caller time: geomean {geomean:.3f}x over "
          f"{len(speedups)} problems "
          f"(target >= 1.25x: {'met' if geomean >= 1.25 else 'MISSED'}), worst {min(speedups):.3f}x")
    print(f"best_backend first answer on a miss: median {median_answer:.2f} s (target <= 5 s), "
          f"worst {max(first_answers):.2f} s (target <= 15 s)")
    groups.append({"group": "summary", "caller_speedup_geomean": geomean,
                   "caller_speedup_worst": min(speedups), "first_answer_median_s": median_answer,
                   "first_answer_worst_s": max(first_answers)})
    return groups


def _against_compile(row: dict[str, Any], peer: Any, budget_s: float, device: str, tuned: bool) -> None:
    """The backend ``gemmzoo.matmul(a, b, by="device")`` uses on ``row``'s problem against ``peer``
    (torch-compile) in device time (the engine: CUDA events, L2 flushed), after tuning the problem
    when ``tuned``; and the peer's compile time (a tuned problem's compile is in its tuning time).
    The two are measured in :data:`COMPARE_ROUNDS` interleaved rounds; the ratio is the median of
    the rounds' ratios."""
    import gemmzoo
    from gemmzoo import TF32Array
    from gemmzoo.dispatch.matmul import backend_for
    from gemmzoo.measure import measure
    from gemmzoo.problems.grids import GridPoint

    m, n, k, dtype, layout = row["problem"]
    a, b = _target_operands(m, n, k, dtype, layout, device)
    if dtype == "tf32":
        a, b = TF32Array(a), TF32Array(b)
    row["tune_s"] = _tune_problem(m, n, k, dtype, layout, device, budget_s) if tuned else None
    start = time.perf_counter()
    peer.prepare(a, b)  # compiles and autotunes this problem (again, after a tuning in a child process)
    row["compile_s"] = time.perf_counter() - start if not tuned else None
    point = GridPoint(m, n, k, dtype, layout)
    used = row["used_by_device"] = backend_for(a, b, by="device").name
    backends = [gemmzoo.get_backend(used), peer]
    times: list[list[float]] = [[], []]  # µs per round: ours, theirs
    for number in range(COMPARE_ROUNDS):  # in turn, either first: drift between them cancels out
        for index in ((0, 1) if number % 2 == 0 else (1, 0)):
            times[index].append(measure(backends[index], point, budget_s, verify=False).timing.median_s * 1e6)
    ours_us, theirs_us = statistics.median(times[0]), statistics.median(times[1])
    row["device_us"] = {f"gemmzoo ({used})": ours_us, peer.name: theirs_us}
    row["device_rounds_us"] = {f"gemmzoo ({used})": times[0], peer.name: times[1]}
    row["device_vs_compile"] = ratio = statistics.median(t / o for o, t in zip(*times, strict=True))
    same = used == peer.name
    verdict = "met" if ratio >= 1.0 or same else "MISSED"
    cost = (f"compile {row['compile_s']:.1f} s" if row["compile_s"] is not None
            else f"tuned in {row['tune_s']:.1f} s")
    print(f"{m}x{n}x{k} {dtype} {layout}: device time, gemmzoo.matmul(by='device') runs {used}: "
          f"{ours_us:.1f} us, {peer.name} {theirs_us:.1f} us: {ratio:.2f}x "
          f"(target >= 1.00x: {verdict}{'; the same backend' if same else ''}); {cost}")


def _padded_group(rounds: Rounds, sync: Callable[[], None]) -> dict[str, Any]:
    """The padded paths at :data:`PADDED_PROBLEM`, through gemmzoo.matmul, against torch.matmul."""
    import torch

    import gemmzoo

    m, n, k, dtype, layout = PADDED_PROBLEM
    a, b = _target_operands(m, n, k, dtype, layout, "cuda")
    rows: list[tuple[str, Call, Any, Any]] = [("torch.matmul", torch.matmul, a, b)]
    for name in PADDED_BACKENDS:
        if gemmzoo.get_backend(name).unavailable_reason() is None:
            rows.append((f"gemmzoo.matmul(a, b, {name!r})", functools.partial(_named, name=name), a, b))
    calls = _calls_for(torch.matmul, a, b, sync)
    targets = {label: 1 / 1.7 for label, *_ in rows[1:]}
    return run_group(f"padded paths: {m}x{n}x{k} {dtype} (target >= 1.7x torch.matmul: ratio <= 0.59)",
                     rows, sync, calls, rounds, targets)


def _named(a: Any, b: Any, name: str) -> Any:
    import gemmzoo

    return gemmzoo.matmul(a, b, name)


def versions() -> dict[str, str]:
    found = {"python": platform.python_version(), "numpy": np.__version__, "machine": platform.machine()}
    for name in ("torch", "cupy", "triton"):
        try:
            found[name] = __import__(name).__version__
        except ImportError:
            pass
    try:
        import torch

        if torch.cuda.is_available():
            found["device"] = torch.cuda.get_device_name()
            found["cuda"] = str(torch.version.cuda)
    except ImportError:
        pass
    return found


def host_reference(cuda: bool) -> float | None:
    """µs a call of ``torch.mm`` on 64x64 operands (float16 on the GPU, float32 on the CPU) in a
    loop ended by one synchronisation, median of five loops: how fast this host launches, so that
    runs of this script on different machines can be told apart. ``None`` without torch."""
    try:
        import torch
    except ImportError:
        return None
    from gemmzoo.measure import loop_per_call_s

    device, dtype = ("cuda", torch.float16) if cuda else ("cpu", torch.float32)
    a = torch.randn(64, 64, device=device, dtype=dtype)
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    call = functools.partial(torch.mm, a, a)
    for _ in range(100):
        call()
    return statistics.median(loop_per_call_s(call, 2000, sync) for _ in range(5)) * 1e6


def _choose_dispatch(wanted: str) -> str:
    """Set up the dispatch ``wanted`` for torch tensors; say which one runs (and why not the
    compiled one, where it was wanted and cannot be built)."""
    from gemmzoo import native

    if wanted == "python":
        os.environ[native.ENV_SWITCH] = "0"
        return "python"
    try:
        module = native.build()
    except native.CompiledDispatchError as error:
        return f"python ({error})"
    from gemmzoo.dispatch import matmul as dispatch

    dispatch.use_compiled(module)  # where build() does not do it itself
    return "compiled"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", help="also write the figures to this file")
    parser.add_argument("--calls", type=int, default=2000, help="calls per timed loop (default 2000)")
    parser.add_argument("--rounds", type=int, default=7, help="interleaved rounds, at least (default 7)")
    parser.add_argument("--max-rounds", type=int, default=None,
                        help="more rounds, one at a time, up to this many, while a targeted ratio is "
                             "known less well than --ratio-noise (default: --rounds; 3x --rounds with "
                             "--targets)")
    parser.add_argument("--ratio-noise", type=float, default=0.01,
                        help="half the 95%% confidence interval of a targeted ratio, over it, that ends the "
                             "extra rounds (default 0.01)")
    parser.add_argument("--targets", action="store_true",
                        help="instead: issue 34's targets (GPU; a small CPU set without one)")
    parser.add_argument("--budget", type=float, default=0.3,
                        help="--targets: seconds of device timing per backend and problem (default 0.3)")
    parser.add_argument("--verdicts", metavar="DB",
                        help="--targets: a tuning database holding only conformance verdicts (made by "
                             "`gemmzoo check` on this machine), copied into the fresh cache so that first "
                             "answers find them stored; verdicts of another device or versions are not used")
    parser.add_argument("--tune", action="store_true",
                        help="--targets: before comparing with torch-compile, tune each problem, compiling "
                             "backends included, as `gemmzoo tune --shape` does (timed apart)")
    parser.add_argument("--groups", default="",
                        help="--targets: comma-separated groups to run (default all: "
                             + ", ".join([*TARGET_PROBLEMS, "padded"]) + ")")
    parser.add_argument("--shape", action="append", default=[], metavar="MxNxK-DTYPE-LAYOUT",
                        help="--targets: a problem of your own (repeatable; dtype default float16, layout "
                             "NN); given problems replace the built-in groups")
    parser.add_argument("--dispatch", choices=("compiled", "python"), default="compiled",
                        help="gemmzoo.matmul's dispatch for torch tensors: the compiled one, built first as "
                             "`gemmzoo cache --build-dispatch` does (default), or the Python one")
    args = parser.parse_args(argv)
    too_few = args.max_rounds is not None and args.max_rounds < args.rounds
    if args.rounds < 1 or too_few or args.ratio_noise <= 0:
        parser.error("--rounds must be at least 1, --max-rounds at least --rounds, --ratio-noise above 0")
    most = args.max_rounds if args.max_rounds is not None else args.rounds * (3 if args.targets else 1)
    rounds = Rounds(args.rounds, most, args.ratio_noise)
    given = None
    if args.shape:
        from gemmzoo.problems.grids import points_from_text

        given = [(p.m, p.n, p.k, p.dtype, p.layout) for p in points_from_text(args.shape, ["float16"])]
    cache = os.environ["GEMMZOO_CACHE_DIR"] = tempfile.mkdtemp(prefix="gemmzoo-hot-path-")
    if args.verdicts:
        from gemmzoo.tuning.db import DB_NAME

        shutil.copyfile(args.verdicts, os.path.join(cache, DB_NAME))
    found = versions()
    print(" ".join(f"{k}={v}" for k, v in found.items()))
    try:
        import torch

        cuda = torch.cuda.is_available()
    except ImportError:
        cuda = False
    dispatch_used = _choose_dispatch(args.dispatch)
    print(f"gemmzoo.matmul's dispatch for torch tensors: {dispatch_used}")
    reference = {"before": host_reference(cuda)}
    if reference["before"] is not None:
        print(f"host reference: torch.mm of 64x64 takes {reference['before']:.2f} us a call here")
    if args.targets:
        only = [g.strip() for g in args.groups.split(",") if g.strip()] or None
        groups = target_groups(rounds, "cuda" if cuda else "cpu", args.budget, only, args.tune, given)
    else:
        groups = cpu_groups(args.calls, rounds)
        if cuda:
            groups += cuda_groups(args.calls, rounds)
    reference["after"] = host_reference(cuda)
    if reference["after"] is not None:
        print(f"host reference after the run: {reference['after']:.2f} us a call")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"command": "python benchmarks/hot_path.py " + " ".join(sys.argv[1:]),
                       "date": time.strftime("%Y-%m-%d"), "versions": found,
                       "host_reference_us": reference, "dispatch": dispatch_used, "groups": groups},
                      handle, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
