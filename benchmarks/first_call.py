"""A fresh process's first ``gemmzoo.matmul`` against the array library's own first matmul, and
``gemmzoo list``, in one run.

    python benchmarks/first_call.py [--json FILE] [--runs N] [--libraries numpy,torch,cuda]

Each run is a new Python process that imports the array library and makes two random operands
(300×200 and 200×100 float32; 4096×4096 float16 on CUDA), then times one product: the library's
own (``numpy.matmul``, ``torch.matmul``) or ``gemmzoo.matmul``, ``import gemmzoo`` included,
with an empty tuning cache of its own (a fresh machine). Runs of the two alternate. The figure
kept is the median over runs of the wall time and of the CPU time of the process (its threads
together) from just before the product to its result (synchronized on CUDA); ``extra`` is
gemmzoo's median minus the library's. Each gemmzoo run also says which frameworks it imported
and what served the call (:func:`gemmzoo.dispatch.matmul.choice_for`). ``gemmzoo list`` is timed as a
subprocess (wall time, and the CPU time of the child) with an empty cache as well.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time

SETUP = {
    "numpy": ("import numpy as np\n"
              "rng = np.random.default_rng(0)\n"
              "a = rng.standard_normal((300, 200)).astype(np.float32)\n"
              "b = rng.standard_normal((200, 100)).astype(np.float32)\n"
              "def sync(): pass\n"),
    "torch": ("import torch\n"
              "a, b = torch.randn(300, 200), torch.randn(200, 100)\n"
              "def sync(): pass\n"),
    "cuda": ("import torch\n"
             "a = torch.randn(4096, 4096, device='cuda', dtype=torch.float16)\n"
             "b = torch.randn(4096, 4096, device='cuda', dtype=torch.float16)\n"
             "torch.cuda.synchronize()\n"
             "sync = torch.cuda.synchronize\n"),
}
OWN = {"numpy": "c = np.matmul(a, b)\n", "torch": "c = torch.matmul(a, b)\n",
       "cuda": "c = torch.matmul(a, b)\n"}
GEMMZOO = "import gemmzoo\nc = gemmzoo.matmul(a, b)\n"
TIMED = ("import json, sys, time\n{setup}"
         "wall, cpu = time.perf_counter(), time.process_time()\n"
         "{product}sync()\n"
         "wall, cpu = time.perf_counter() - wall, time.process_time() - cpu\n"
         "extra = {{}}\n"
         "if 'gemmzoo' in sys.modules:\n"
         "    from gemmzoo.dispatch.matmul import choice_for\n"
         "    choice = choice_for(a, b)\n"
         "    extra = {{'served': choice.backend.name, 'source': choice.source}}\n"
         "frameworks = sorted({{m.split('.')[0] for m in sys.modules}}\n"
         "                    & {{'torch', 'jax', 'cupy', 'triton'}})\n"
         "print(json.dumps({{'wall_s': wall, 'cpu_s': cpu, 'frameworks': frameworks, **extra}}))\n")


def child(code: str) -> dict:
    env = {**os.environ, "GEMMZOO_CACHE_DIR": tempfile.mkdtemp(prefix="gemmzoo-first-call-")}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=600)
    if done.returncode != 0:
        raise SystemExit(f"a timed process failed:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def timed_list() -> dict:
    env = {**os.environ, "GEMMZOO_CACHE_DIR": tempfile.mkdtemp(prefix="gemmzoo-first-call-")}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "gemmzoo", "list", "--plain"], capture_output=True,
                          text=True, env=env, timeout=600)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"wall_s": wall, "cpu_s": cpu, "exit": done.returncode}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="also write the figures to this file")
    parser.add_argument("--runs", type=int, default=5, help="processes of each kind (default 5)")
    parser.add_argument("--libraries", default="numpy,torch",
                        help="comma-separated, of numpy, torch (CPU tensors), cuda (default numpy,torch)")
    args = parser.parse_args()
    print(f"python {platform.python_version()}, bytecode cache "
          f"{'off' if sys.flags.dont_write_bytecode else 'on'}, {os.cpu_count()} cores", flush=True)
    figures: dict = {}
    for library in args.libraries.split(","):
        own_code = TIMED.format(setup=SETUP[library], product=OWN[library])
        ours_code = TIMED.format(setup=SETUP[library], product=GEMMZOO)
        own, ours = [], []
        for _ in range(args.runs):
            own.append(child(own_code))
            ours.append(child(ours_code))
        row = {}
        for name, runs in (("own", own), ("gemmzoo", ours)):
            row[name] = {"wall_s": statistics.median(r["wall_s"] for r in runs),
                         "cpu_s": statistics.median(r["cpu_s"] for r in runs), "runs": runs}
        row["extra_wall_s"] = row["gemmzoo"]["wall_s"] - row["own"]["wall_s"]
        row["extra_cpu_s"] = row["gemmzoo"]["cpu_s"] - row["own"]["cpu_s"]
        figures[library] = row
        last = ours[-1]
        print(f"{library:6} own first matmul wall {row['own']['wall_s'] * 1e3:8.1f} ms cpu "
              f"{row['own']['cpu_s'] * 1e3:8.1f} ms | gemmzoo (import included) wall "
              f"{row['gemmzoo']['wall_s'] * 1e3:8.1f} ms cpu {row['gemmzoo']['cpu_s'] * 1e3:8.1f} ms | "
              f"extra wall "
              f"{row['extra_wall_s'] * 1e3:7.1f} ms cpu {row['extra_cpu_s'] * 1e3:7.1f} ms | served by "
              f"{last.get('served')} ({last.get('source')}), frameworks {last['frameworks']}", flush=True)
    lists = [timed_list() for _ in range(args.runs)]
    figures["list"] = {"wall_s": statistics.median(r["wall_s"] for r in lists),
                       "cpu_s": statistics.median(r["cpu_s"] for r in lists), "runs": lists}
    print(f"gemmzoo list: wall {figures['list']['wall_s']:.2f} s, cpu {figures['list']['cpu_s']:.2f} s "
          f"(median of {args.runs})")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump({"command": "python benchmarks/first_call.py " + " ".join(sys.argv[1:]),
                       "python": platform.python_version(), "figures": figures}, out, indent=1)


if __name__ == "__main__":
    main()
