"""A transformer's training step through ``gemmzoo.matmul`` against stock torch: untuned, then
after ``gemmzoo tune --recorded``, in one run.

    python benchmarks/model_step.py [--json FILE]                 # GPT-2 small, bf16 on CUDA
    python benchmarks/model_step.py --device cpu [--json FILE]    # a small model, fp32 on the CPU
    python benchmarks/model_step.py --n-embd 1024 --vocab 32000 --n-layer 24 --n-head 16
    python benchmarks/model_step.py --preset llama-1b            # Llama-shaped: SwiGLU, vocabulary 128256
    python benchmarks/model_step.py --config n_embd=2560,n_head=20,n_layer=4,mlp=swiglu,vocab_size=50000
    python benchmarks/model_step.py --dispatch compiled          # gemmzoo.matmul's compiled dispatch

The model is examples/transformer/model.py: every projection and the LM head one product call;
its step is forward and backward (gradients cleared first, no optimizer). One model serves both
sides, its ``matmul`` swapped between ``torch.matmul`` (stock) and ``gemmzoo.matmul``.

1. ``GEMMZOO_CACHE_DIR`` is a fresh temporary directory (or ``--cache-dir``): nothing tuned. The
   first gemmzoo step is timed alone (it makes the plans and records the problems).
2. Untuned: stock and gemmzoo steps in interleaved rounds; each side's median step time, and the
   median over rounds of stock/gemmzoo (above 1: gemmzoo is faster).
3. ``python -m gemmzoo tune --recorded`` runs as a subprocess with the same cache directory (its
   progress lines are passed through), and its wall time is kept.
4. Tuned: this process drops its answers and plans (as a new process would start without them)
   and steps are timed as in 2.

Each phase ends with a per-problem breakdown: every product of a step (forward and backward),
how often a step runs it, the backend gemmzoo.matmul runs it on, and its time per call alone
(loops of calls) through gemmzoo.matmul and torch.matmul.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "transformer"
sys.path.insert(0, str(EXAMPLE))

import torch  # noqa: E402
from model import Config, batch_of, build, step  # noqa: E402
from train_step import DTYPES, add_config_arguments  # noqa: E402
from train_step import config_from as example_config  # noqa: E402

#: The CPU's default model: small enough for a few seconds a phase on two cores.
CPU_CONFIG = Config(n_layer=2, n_head=4, n_embd=128, vocab_size=2003, seq_len=64, batch=4)


def config_from(args: argparse.Namespace) -> Config:
    """GPT-2 small on CUDA (or with ``--gpt2``), :data:`CPU_CONFIG` on the CPU (or with
    ``--tiny``, the tiny test model), or ``--preset``'s; ``--config`` and sizes given override it."""
    return example_config(args, args.device, CPU_CONFIG)


class Clock:
    """Elapsed time of a piece of work on the device: CUDA events on CUDA, else the host clock."""

    def __init__(self, device: str) -> None:
        self.cuda = device == "cuda"

    def time(self, work: Callable[[], Any]) -> float:
        """Seconds ``work()`` took, its device work included."""
        if self.cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize()
            start.record()
            work()
            end.record()
            end.synchronize()
            return start.elapsed_time(end) / 1e3
        started = time.perf_counter()
        work()
        return time.perf_counter() - started


def interleaved(sides: dict[str, Callable[[], Any]], clock: Clock, rounds: int, warmup: int
                ) -> dict[str, list[float]]:
    """Each side's times, one per round, the sides taking turns within each round."""
    for _ in range(warmup):
        for work in sides.values():
            clock.time(work)
    times: dict[str, list[float]] = {name: [] for name in sides}
    for _ in range(rounds):
        for name, work in sides.items():
            times[name].append(clock.time(work))
    return times


def ratio(times: dict[str, list[float]], base: str, other: str) -> float:
    """The median over rounds of ``base``'s time over ``other``'s (above 1: ``other`` is faster)."""
    return statistics.median(b / o for b, o in zip(times[base], times[other], strict=True))


Problem = tuple[int, int, int, str, str]  # M, N, K, layout, direction


def layout_of(x: torch.Tensor) -> str:
    return "T" if x.stride(0) < x.stride(1) else "N"


def operands_like(m: int, n: int, k: int, layout: str, like: torch.Tensor
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    """Random operands of an ``m x n x k`` product in ``layout`` (T: the transposed view of a
    row-major matrix), on ``like``'s device in its dtype."""
    def operand(rows: int, cols: int, letter: str) -> torch.Tensor:
        if letter == "T":
            return torch.randn(cols, rows, device=like.device, dtype=like.dtype).t()
        return torch.randn(rows, cols, device=like.device, dtype=like.dtype)

    return operand(m, k, layout[0]), operand(k, n, layout[1])


def problems_of_a_step(model: Any, tokens: torch.Tensor, targets: torch.Tensor
                       ) -> dict[Problem, tuple[int, str, tuple[torch.Tensor, torch.Tensor]]]:
    """Every product one gemmzoo step runs: its count, the backend ``gemmzoo.matmul`` runs it on,
    and example operands: the forward products as the model's ``matmul`` gets them, and the
    backward products of each (dA and dB for the operands that require grad) as
    :func:`gemmzoo.dispatch.autograd.backward_problems` names them, with random operands of their
    layouts (torch's own autograd computes them where all three are torch's own product)."""
    import gemmzoo
    from gemmzoo.dispatch import matmul as dispatch
    from gemmzoo.dispatch.autograd import backward_problems

    found: dict[Problem, list[Any]] = {}

    def count(key: Problem, operands: Callable[[], tuple[torch.Tensor, torch.Tensor]]) -> None:
        if key in found:
            found[key][0] += 1
        else:
            a, b = operands()
            found[key] = [1, dispatch.backend_for(a, b).name, (a, b)]

    def counted(a: Any, b: Any, *args: Any, **kwargs: Any) -> Any:
        key = (a.shape[0], b.shape[1], a.shape[1], layout_of(a) + layout_of(b), "forward")
        count(key, lambda: (a.detach(), b.detach()))
        if torch.is_grad_enabled():
            for (m, n, k), layout in backward_problems(a, b):
                count((m, n, k, layout, "backward"),
                      lambda m=m, n=n, k=k, layout=layout: operands_like(m, n, k, layout, a))
        return gemmzoo.matmul(a, b, *args, **kwargs)

    model.matmul = counted
    try:
        step(model, tokens, targets)
    finally:
        model.matmul = gemmzoo.matmul
    return {key: (n, name, operands) for key, (n, name, operands) in found.items()}


def per_call(call: Callable[[], Any], clock: Clock, calls: int) -> float:
    def loop() -> None:
        for _ in range(calls):
            call()

    return clock.time(loop) / calls


def breakdown(model: Any, tokens: torch.Tensor, targets: torch.Tensor, clock: Clock, rounds: int,
              budget_s: float) -> list[dict[str, Any]]:
    """One row per product of a step, most step time first: the problem, its count per step, the
    backend, and the median time per call through gemmzoo.matmul and torch.matmul (interleaved)."""
    import gemmzoo

    rows = []
    for (m, n, k, layout, direction), (count, backend, (a, b)) in problems_of_a_step(model, tokens,
                                                                                     targets).items():
        with torch.no_grad():
            once = clock.time(lambda a=a, b=b: torch.matmul(a, b))
            calls = max(1, min(100, int(budget_s / max(once, 1e-6) / rounds)))
            sides = {"gemmzoo": lambda a=a, b=b: gemmzoo.matmul(a, b),
                     "torch": lambda a=a, b=b: torch.matmul(a, b)}
            for work in sides.values():
                work()
            times: dict[str, list[float]] = {name: [] for name in sides}
            for _ in range(rounds):
                for name, work in sides.items():
                    times[name].append(per_call(work, clock, calls))
        zoo, stock = statistics.median(times["gemmzoo"]), statistics.median(times["torch"])
        rows.append({"problem": f"{m}x{n}x{k}", "layout": layout, "direction": direction, "count": count,
                     "backend": backend, "gemmzoo_us": zoo * 1e6, "torch_us": stock * 1e6,
                     "ratio": ratio(times, "torch", "gemmzoo"),
                     "step_gemmzoo_ms": count * zoo * 1e3, "step_torch_ms": count * stock * 1e3})
    rows.sort(key=lambda row: -row["step_torch_ms"])
    return rows


def print_breakdown(title: str, rows: list[dict[str, Any]]) -> None:
    print(f"\n{title}")
    print(f"{'problem':>18} {'lay':>3} {'dir':>8} {'n/step':>6} {'backend':>14} {'gemmzoo us':>11} "
          f"{'torch us':>10} {'x torch':>7} {'ms/step zoo':>11} {'ms/step torch':>13}")
    for row in rows:
        print(f"{row['problem']:>18} {row['layout']:>3} {row['direction']:>8} {row['count']:>6} "
              f"{row['backend']:>14} {row['gemmzoo_us']:>11.1f} {row['torch_us']:>10.1f} "
              f"{row['ratio']:>7.3f} "
              f"{row['step_gemmzoo_ms']:>11.3f} {row['step_torch_ms']:>13.3f}")
    zoo, stock = sum(r["step_gemmzoo_ms"] for r in rows), sum(r["step_torch_ms"] for r in rows)
    print(f"{'products of a step':>18} {'':>3} {'':>8} {sum(r['count'] for r in rows):>6} {'':>14} {'':>11} "
          f"{'':>10} {stock / zoo if zoo else float('nan'):>7.3f} {zoo:>11.3f} {stock:>13.3f}")


def phase(name: str, model: Any, tokens: torch.Tensor, targets: torch.Tensor, clock: Clock,
          args: argparse.Namespace) -> dict[str, Any]:
    """Stock and gemmzoo steps interleaved, then the per-problem breakdown."""
    import gemmzoo

    def side(matmul: Callable[..., Any]) -> Callable[[], Any]:
        def run() -> Any:
            model.matmul = matmul
            return step(model, tokens, targets)

        return run

    times = interleaved({"torch": side(torch.matmul), "gemmzoo": side(gemmzoo.matmul)}, clock,
                        args.rounds, args.warmup)
    model.matmul = gemmzoo.matmul
    result = {"stock_step_ms": statistics.median(times["torch"]) * 1e3,
              "gemmzoo_step_ms": statistics.median(times["gemmzoo"]) * 1e3,
              "ratio": ratio(times, "torch", "gemmzoo"), "rounds": args.rounds,
              "stock_steps_ms": [t * 1e3 for t in times["torch"]],
              "gemmzoo_steps_ms": [t * 1e3 for t in times["gemmzoo"]]}
    print(f"\n{name}: step {result['gemmzoo_step_ms']:.2f} ms through gemmzoo.matmul, "
          f"{result['stock_step_ms']:.2f} ms stock: x{result['ratio']:.3f} stock's speed "
          f"(median of {args.rounds} interleaved rounds)", flush=True)
    result["problems"] = breakdown(model, tokens, targets, clock, args.problem_rounds, args.problem_budget)
    print_breakdown(f"{name}: the products of one step", result["problems"])
    return result


#: What the step must achieve (on an H100): untuned and tuned speed over stock, and the tune's wall time.
TARGETS = {"untuned": 1.0, "tuned": 1.15, "tune_s": 120.0}


def targets_met(results: dict[str, Any]) -> dict[str, bool]:
    """Each target of :data:`TARGETS` this run measured, and whether it was met."""
    met = {f"untuned x{TARGETS['untuned']:g}": results["untuned"]["ratio"] >= TARGETS["untuned"]}
    if "tuned" in results:
        met[f"tuned x{TARGETS['tuned']:g}"] = results["tuned"]["ratio"] >= TARGETS["tuned"]
        met[f"tune <= {TARGETS['tune_s']:g} s"] = results["tune"]["seconds"] <= TARGETS["tune_s"]
    return met


def run_tune(extra: list[str]) -> dict[str, Any]:
    """``python -m gemmzoo tune --recorded`` in a subprocess (this process's environment, so the
    same cache directory), its progress lines passed through as they come; its wall time, exit
    code, progress lines and output."""
    command = [sys.executable, "-m", "gemmzoo", "tune", "--recorded", *extra]
    print(f"\n$ {' '.join(['python', *command[1:]])}", flush=True)
    progress = []
    started = time.perf_counter()
    with tempfile.TemporaryFile("w+") as output:
        with subprocess.Popen(command, stdout=output, stderr=subprocess.PIPE, text=True) as child:
            assert child.stderr is not None
            for line in child.stderr:
                progress.append(line.rstrip("\n"))
                print(line, end="", file=sys.stderr, flush=True)
        took = time.perf_counter() - started
        output.seek(0)
        printed = output.read()
    print(printed, end="", flush=True)
    print(f"gemmzoo tune --recorded: exit {child.returncode}, {took:.1f} s", flush=True)
    return {"command": ["python", *command[1:]], "seconds": took, "exit": child.returncode,
            "progress": progress, "problems": tuned_lines(progress), "output": printed}


#: A progress line of ``gemmzoo tune --recorded``: ``[k/n] PROBLEM (NOTE): BACKEND, TIME, xGAIN vs
#: BASELINE (SECONDS s...)``, the note, the time and the gain optional.
PROGRESS = re.compile(r"^\[(\d+)/(\d+)\] (?P<problem>[^:(]+?)(?: \((?P<note>[^)]*)\))?: (?P<backend>[^,(]+?)"
                      r"(?:, (?P<time>[^,]+))?(?:, (?:x(?P<gain>[\d.]+) vs (?P<baseline>\S+)|-))? "
                      r"\((?P<seconds>[\d.]+) s")


def tuned_lines(progress: list[str]) -> list[dict[str, Any]]:
    """The tuner's progress lines as rows: problem, pass (its note: "again, with ...",
    "searched: ..."), backend chosen, expected gain and seconds spent."""
    rows = []
    for line in progress:
        match = PROGRESS.match(line)
        if match:
            gain = match.group("gain")
            rows.append({"problem": match.group("problem"), "pass": match.group("note") or "first",
                         "backend": match.group("backend"), "gain": float(gain) if gain else None,
                         "baseline": match.group("baseline"), "seconds": float(match.group("seconds"))})
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_config_arguments(parser)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtype", choices=DTYPES, help="default bfloat16 on CUDA, float32 on the CPU")
    parser.add_argument("--rounds", type=int, default=None,
                        help="interleaved step rounds (default 20 on CUDA, 5 on the CPU)")
    parser.add_argument("--threads", type=int, default=None,
                        help="CPU threads of every BLAS/OpenMP pool while timing (default: gemmzoo's "
                             "timing policy, as gemmzoo tune uses)")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps of each side first (default 2)")
    parser.add_argument("--problem-rounds", type=int, default=5, help="rounds per product (default 5)")
    parser.add_argument("--problem-budget", type=float, default=0.05,
                        help="seconds of calls per product and side (default 0.05)")
    parser.add_argument("--cache-dir", help="GEMMZOO_CACHE_DIR (default: a fresh temporary directory)")
    parser.add_argument("--tune-arg", action="append", default=[], metavar="ARG",
                        help="passed to gemmzoo tune --recorded (repeatable: "
                             "--tune-arg=--budget --tune-arg=0.1)")
    parser.add_argument("--dispatch", choices=("python", "compiled"), default="python",
                        help="gemmzoo.matmul's dispatch for torch tensors: the Python one (default, what a "
                             "fresh install runs) or the compiled one, built first into the cache directory "
                             "as `gemmzoo cache --build-dispatch` does (a C++ compiler and ninja)")
    parser.add_argument("--no-tune", action="store_true", help="the untuned phase only")
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args(argv)
    args.rounds = args.rounds or (20 if args.device == "cuda" else 5)
    dtype_name = args.dtype or ("bfloat16" if args.device == "cuda" else "float32")
    config = config_from(args)

    cache = args.cache_dir or tempfile.mkdtemp(prefix="gemmzoo-model-step-")
    os.environ["GEMMZOO_CACHE_DIR"] = cache  # this process and the tune subprocess share it
    from gemmzoo.measure.threads import limited, resolve_threads

    threads, policy = resolve_threads(args.threads)
    if args.device != "cpu":
        return _run(args, config, dtype_name, "")
    with limited(threads):
        return _run(args, config, dtype_name, f"{threads} ({policy})")


def _dispatch(wanted: str) -> str:
    """Set up the dispatch ``wanted`` for torch tensors; which one runs (and why not the compiled
    one, where it was wanted and cannot be built)."""
    from gemmzoo import native

    if wanted == "python":
        os.environ[native.ENV_SWITCH] = "0"
        return "python"
    try:
        native.build()
    except native.CompiledDispatchError as error:
        return f"python ({error})"
    return "compiled"


def _run(args: argparse.Namespace, config: Config, dtype_name: str, threads: str) -> int:
    import gemmzoo

    dispatch = _dispatch(args.dispatch)
    # a session read from the environment set above (cache directory, dispatch switch): gemmzoo
    # reads its configuration once per session, so one made earlier would not see them
    with gemmzoo.Session() as session:
        return _measure(args, config, dtype_name, threads, dispatch, session)


def _measure(args: argparse.Namespace, config: Config, dtype_name: str, threads: str, dispatch: str,
             session: Any) -> int:
    import gemmzoo

    clock = Clock(args.device)
    model = build(config, device=args.device, dtype=DTYPES[dtype_name])
    tokens, targets = batch_of(config, device=args.device)
    print(f"model: {config}, {dtype_name} on {args.device}"
          f"{' (' + torch.cuda.get_device_name() + ')' if args.device == 'cuda' else ''}; "
          f"torch {torch.__version__}, gemmzoo {gemmzoo.__version__}"
          f"{'; threads ' + threads if threads else ''}; gemmzoo.matmul's dispatch: {dispatch}", flush=True)

    model.matmul = gemmzoo.matmul
    first_s = clock.time(lambda: step(model, tokens, targets))
    print(f"first gemmzoo step (plans made, problems recorded): {first_s:.2f} s", flush=True)
    results: dict[str, Any] = {
        "config": config.__dict__, "dtype": dtype_name, "device": args.device,
        "device_name": torch.cuda.get_device_name() if args.device == "cuda" else platform.processor(),
        "torch": torch.__version__, "gemmzoo": gemmzoo.__version__, "python": platform.python_version(),
        "threads": threads, "dispatch": dispatch,
        "first_step_s": first_s, "untuned": phase("untuned", model, tokens, targets, clock, args)}
    if not args.no_tune:
        results["tune"] = run_tune(args.tune_arg)
        session.forget_answers()  # the stored choices are read afresh, as by a new process
        results["tuned"] = phase("after gemmzoo tune --recorded", model, tokens, targets, clock, args)

    last = results.get("tuned", results["untuned"])
    counts = collections.Counter(row["backend"] for row in last["problems"])
    summary = [f"untuned x{results['untuned']['ratio']:.3f}"]
    if "tuned" in results:
        summary += [f"tuned x{results['tuned']['ratio']:.3f}",
                    f"tune --recorded {results['tune']['seconds']:.1f} s"]
    print(f"\nstock step time / gemmzoo step time: {', '.join(summary)}; backends: {dict(counts)}")
    results["targets"] = targets_met(results)
    said = [f"{name} {'met' if met else 'NOT met'}" for name, met in results["targets"].items()]
    print(f"targets (set for an H100): {'; '.join(said)}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    status = main()
    if "jax" in sys.modules:  # loaded by asking whether jax-cuda runs here: its teardown can abort
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)
    sys.exit(status)
