"""Ctrl-C in a loop: each try a fresh ``gemmzoo check``, ``bench`` or ``tune`` process with the jax,
torch-cpu and numpy backends, sent SIGINT after a random delay that lands while it runs; prints each exit
status and how many of the interrupted runs exited 130.

    python3 benchmarks/ctrl_c_loop.py [TRIES] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

#: The backends each bench and tune try runs.
BACKENDS = ["--backend", "jax", "--backend", "torch-cpu", "--backend", "numpy"]

COMMANDS = {
    "check": (["check", "jax"], 3.0, 9.0),
    "bench": (["bench", *BACKENDS, "--shape", "300x300x300", "--shape", "500x400x300", "--shape",
               "700x600x500", "--shape", "1000x800x600"], 3.0, 8.0),
    "tune": (["tune", *BACKENDS, "--shape", "300x200x100", "--shape", "301x201x101", "--shape",
              "600x500x400", "--shape", "1000x800x600", "--shape", "1201x901x701"], 2.0, 5.0),
}


def one_try(name: str, folder: Path) -> dict:
    args, low, high = COMMANDS[name]
    if name == "bench":
        args = [*args, "--json", str(folder / "partial.json")]
    env = {**os.environ, "GEMMZOO_CACHE_DIR": str(folder / "cache")}
    process = subprocess.Popen([sys.executable, "-m", "gemmzoo", *args], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, env=env, text=True)
    delay = random.uniform(low, high)
    time.sleep(delay)
    running = process.poll() is None
    process.send_signal(signal.SIGINT)
    _out, err = process.communicate(timeout=600)
    last = err.strip().splitlines()[-1] if err.strip() else ""
    return {"command": name, "delay_s": round(delay, 1), "running": running, "status": process.returncode,
            "last_stderr_line": last}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tries", type=int, nargs="?", default=21)
    parser.add_argument("--json", metavar="PATH")
    args = parser.parse_args()
    names = list(COMMANDS)
    tries = []
    for number in range(args.tries):
        with tempfile.TemporaryDirectory() as folder:
            found = one_try(names[number % len(names)], Path(folder))
        tries.append(found)
        print(f"{found['command']:6} {found['delay_s']:5.1f} s  "
              f"{'running' if found['running'] else 'had ended'}  exit {found['status']}  "
              f"{found['last_stderr_line']}", flush=True)
    live = [t for t in tries if t["running"]]
    print(f"{sum(t['status'] == 130 for t in live)} of {len(live)} interrupted runs exited 130 "
          f"({len(tries) - len(live)} had ended before the signal)")
    if args.json:
        Path(args.json).write_text(json.dumps(tries, indent=1))


if __name__ == "__main__":
    main()
