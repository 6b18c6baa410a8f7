"""First ``best_backend`` answers on a fresh machine: seconds per answer, and the suites each ran.

    python benchmarks/first_answers.py [--problem DTYPE:MxNxK ...] [--device cuda] [--regret]
        [--regret-skip NAME] [--regret-jobs N] [--json PATH]

Every cache a new user starts without is a fresh temporary directory: gemmzoo's tuning store,
Triton's and TorchInductor's kernel caches, CuPy's. The problems are answered in order in one
process, as a program meets them; the first of each dtype is the one that pays for conformance
suites. On the GPU, torch is imported and CUDA started first and that time is reported apart, as
a program that already uses torch has paid it (``--cold-framework`` leaves it to the first
answer). Printed per problem: the wall seconds of the answer, the backend, where the answer came
from, and the suites that ran for it (backend and seconds; the JSON keeps each candidate's timing
too); then the first answer of each dtype
against the 10 s target and the median of the others against 5 s. With ``--regret``, every
problem is then tuned the deliberate way (``gemmzoo tune``: every conforming backend, Triton's
full autotune; ``--regret-skip NAME`` leaves a backend out of it, and says so) and each first
answer's device time is set against the fastest one's: the regret, against the target of at
most 3% on 90% of the problems. ``--regret-jobs N`` tunes N problems at a time, each in a process
of its own with fresh caches (on a machine of several GPUs, a GPU each), after the first answers
were all given in this process.
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


def print_regrets(rows: list[dict], skip: list[str], save=lambda: None) -> None:
    """Tune each answered problem fully (every backend but those in ``skip``) and add to its row
    the regret of the first answer: its backend's device time over the fastest backend's, less
    one, from the same tuning run; ``save`` is called after each problem."""
    from gemmzoo.plugins.registry import get_registry
    from gemmzoo.problems.grids import GridPoint
    from gemmzoo.tuning import tune

    backends = [name for name in get_registry().names() if name not in skip]
    if skip:
        print(f"regret against a full tune of every backend but {', '.join(skip)}", flush=True)
    for row in rows:
        point = GridPoint(*row["shape"], row["dtype"])
        times = {r.backend: r.median_s for r in tune([point], backends, budget_s=0.3) if r.status == "ok"}
        row["fastest"] = min(times, key=times.__getitem__) if times else None
        row["regret"] = times[row["backend"]] / times[row["fastest"]] - 1 if row["backend"] in times else None
        print_regret(row)
        save()
    print_regret_summary(rows)


def print_regret(row: dict) -> None:
    """One problem's regret line."""
    point = f"{row['dtype']} {'x'.join(map(str, row['shape']))}"
    if row.get("regret") is None:
        print(f"{point}: {row['backend']} has no tuned time; regret unknown", flush=True)
    else:
        print(f"{point}: answered {row['backend']}, fastest when tuned {row['fastest']}: "
              f"regret {row['regret']:.1%}", flush=True)


def print_regret_summary(rows: list[dict]) -> None:
    known = [r["regret"] for r in rows if r.get("regret") is not None]
    if known:
        print(f"regret at most 3%: {sum(x <= 0.03 for x in known)} of {len(known)} problems (target 90%)")


def regrets_side_by_side(rows: list[dict], args: argparse.Namespace, jobs: int, save=lambda: None) -> None:
    """:func:`print_regrets` for each problem in a process of its own, ``jobs`` at a time, each
    with fresh caches and, on the GPU, a GPU of its own where there are several (the job's slot
    modulo the GPUs seen); each row gains its ``regret`` and ``fastest``, and ``save`` is called
    as each problem ends."""
    import subprocess

    gpus = 1
    if args.device == "cuda":
        import torch

        gpus = max(1, torch.cuda.device_count())
    folder = tempfile.mkdtemp(prefix="gemmzoo-regrets-")
    pending = list(enumerate(rows))
    running: dict[int, tuple[subprocess.Popen, int, str]] = {}
    while pending or running:
        for slot in range(jobs):
            if slot in running or not pending:
                continue
            index, row = pending.pop(0)
            given = os.path.join(folder, f"row-{index}.json")
            got = os.path.join(folder, f"regret-{index}.json")
            with open(given, "w") as out:
                json.dump({"answers": [row]}, out)
            command = [sys.executable, __file__, "--device", args.device, "--answers", given, "--regret",
                       "--json", got, *[f"--regret-skip={name}" for name in args.regret_skip or []]]
            env = dict(os.environ)
            if args.device == "cuda" and gpus > 1:
                env["CUDA_VISIBLE_DEVICES"] = str(slot % gpus)
            with open(os.path.join(folder, f"regret-{index}.log"), "w") as log:
                process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
            running[slot] = (process, index, got)
        for slot, (process, index, got) in list(running.items()):
            if process.poll() is None:
                continue
            del running[slot]
            try:
                with open(got) as source:
                    done = json.load(source)["answers"][0]
                rows[index].update(regret=done.get("regret"), fastest=done.get("fastest"))
            except (OSError, ValueError, KeyError, IndexError):
                rows[index].update(regret=None, fastest=None)
                print(f"problem {index + 1}: its tune ended without a result (exit {process.returncode}; "
                      f"log {os.path.join(folder, f'regret-{index}.log')})", flush=True)
            print_regret(rows[index])
            save()
        time.sleep(0.2)
    print_regret_summary(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--problem", action="append", type=parse_problem,
                        help="DTYPE:MxNxK, in order (repeatable; default: ten new problems)")
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--regret", action="store_true",
                        help="then tune every problem fully and report each first answer's regret")
    parser.add_argument("--regret-skip", action="append", metavar="NAME",
                        help="leave this backend out of --regret's full tune (repeatable)")
    parser.add_argument("--regret-jobs", type=int, default=1, metavar="N",
                        help="tune N problems at a time for --regret, each in a process of its own with "
                             "fresh caches and, on the GPU, a GPU of its own where there are several")
    parser.add_argument("--answers", help=argparse.SUPPRESS)  # a --regret-jobs process: the rows it tunes
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
    if args.answers:  # a --regret-jobs process: tune the rows given, answer nothing
        with open(args.answers) as source:
            rows = json.load(source)["answers"]
        print_regrets(rows, args.regret_skip or [], (lambda: write_json(args.json, {}, rows)) if args.json
                      else (lambda: None))
        return 0
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
                     "source": choice.source, "suites": suites, "first_of_dtype": first,
                     "timings": [_timing(t, "ranked") for t in choice.ranking]
                     + [_timing(t, "unchecked") for t in choice.unchecked]})
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
    facts = {"python": sys.version.split()[0], "imported_s": imported, "framework_start_s": framework_s}
    if args.json:
        import torch

        facts.update(torch=torch.__version__,
                     device=torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu")
    save = (lambda: write_json(args.json, facts, rows)) if args.json else (lambda: None)
    save()  # the answers survive a run stopped during the regret tunes
    if args.regret and args.regret_jobs > 1:
        regrets_side_by_side(rows, args, args.regret_jobs, save)
    elif args.regret:
        print_regrets(rows, args.regret_skip or [], save)
    return 0


def _timing(timed, role: str) -> dict:
    """One timing of a first answer as the JSON keeps it: the backend, its time per call, what that
    time is (device, host or loop), its spread and whether it was ranked or stood unchecked."""
    return {"backend": timed.backend, "seconds": timed.median_s, "spread_s": timed.spread_s,
            "half_width_s": timed.half_width_s, "bound": timed.bound, "role": role}


def write_json(path: str, facts: dict, rows: list[dict]) -> None:
    """The figures so far, replacing the file whole."""
    from gemmzoo.results.atomic_file import write_atomically

    write_atomically(path, json.dumps({"facts": facts, "answers": rows}, indent=1))


if __name__ == "__main__":
    raise SystemExit(main())
