"""``gemmzoo compare`` against a machine that moves between runs: issue 45's two CPU targets.

    python benchmarks/compare_drift.py [--cpus 2,3] [--pairs 10] [--identical 10] [--busy 1]
                                       [--identical-args "--backend numpy"] [--json FILE] [--keep DIR]

1. **A backend slowed by 25%.** ``slowed-numpy`` (``tests/slowed_plugin.py``, installed for the run
   as a plugin in a temporary folder) in ``--pairs`` pairs of ``gemmzoo bench --backend slowed-numpy
   --shape 256x256x256 --dtype float32``, without and with ``GEMMZOO_TEST_EXTRA_WORK=0.25``, then
   ``gemmzoo compare base.json slow.json`` of each pair. Target: SLOWER with exit 1 in every pair.
   Nothing else of this script runs meanwhile (``--busy`` applies to part 2 only).
2. **Identical runs beside a busy process.** ``--identical`` default ``gemmzoo bench`` runs
   (``--identical-args`` added to each; none by default; the slowed plugin disabled) while
   ``--busy`` processes spin on the same CPUs, then ``gemmzoo compare`` of every pair. Target: no
   SLOWER or FASTER row, every compare exits 0.

Every command runs on ``--cpus`` (the CPU affinity, as ``taskset -c`` sets it; default: this
process's), with a tuning cache of its own (``--keep``'s ``cache`` folder, else a fresh one: the
suites run once, in the first run). Part 2 can be split across calls: ``--identical 5 --no-compare
--keep DIR`` then ``--identical 5 --identical-first 6 --keep DIR`` compares all ten. For each
run the script also prints what says where the drift comes from: the row's median, the machine's
calibration (a fixed GEMM timed between the row's samples, ``gemmzoo.measure.calibration``), their
ratio, and the thread pools and CPU share the row was timed with. If the row's median moves
between runs and the calibration moves with it, the machine moved (not gemmzoo's policy).
``--skip-pairs`` / ``--skip-identical`` run one part alone.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shlex
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SLOWED = ROOT / "tests" / "slowed_plugin.py"
SHAPE = "256x256x256"


def install_slowed(site: Path) -> None:
    """``tests/slowed_plugin.py`` as an installed-looking distribution in ``site``."""
    info = site / "gemmzoo_slowed-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: gemmzoo-slowed\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[gemmzoo]\nslowed = gemmzoo_slowed\n")
    (site / "gemmzoo_slowed.py").write_text(textwrap.dedent(SLOWED.read_text()))


class Runner:
    """``python -m gemmzoo ...`` on the chosen CPUs, with the slowed plugin and a fresh cache."""

    def __init__(self, work: Path, cpus: set[int] | None, cache: Path) -> None:
        site = work / "site"
        install_slowed(site)
        self.cpus = cpus
        self.env = {key: value for key, value in os.environ.items() if not key.startswith("GEMMZOO_")}
        self.env["PYTHONPATH"] = os.pathsep.join(p for p in (str(site), str(ROOT), str(ROOT / "plugins"),
                                                             os.environ.get("PYTHONPATH")) if p)
        self.env["GEMMZOO_CACHE_DIR"] = str(cache)
        self.env["COLUMNS"] = "200"

    def _pinned(self) -> None:
        if self.cpus:
            os.sched_setaffinity(0, self.cpus)

    def gemmzoo(self, *args: str, **variables: str) -> subprocess.CompletedProcess[str]:
        env = {**self.env, **variables}
        return subprocess.run([sys.executable, "-m", "gemmzoo", *args], capture_output=True, text=True,
                              env=env, preexec_fn=self._pinned, timeout=3600, check=False)

    def busy(self, count: int) -> list[subprocess.Popen[bytes]]:
        """``count`` processes spinning on the same CPUs."""
        return [subprocess.Popen([sys.executable, "-c", "while True: pass"], preexec_fn=self._pinned)
                for _ in range(count)]


def bench(runner: Runner, path: Path, args: list[str], **variables: str) -> dict[str, Any]:
    done = runner.gemmzoo("bench", *args, "--json", str(path), "--format", "plain", **variables)
    if done.returncode != 0 or not path.exists():
        raise SystemExit(f"gemmzoo bench {' '.join(args)} exited {done.returncode}:\n{done.stdout[-2000:]}"
                         f"\n{done.stderr[-2000:]}")
    return json.loads(path.read_text())


def compare(runner: Runner, base: Path, other: Path) -> tuple[int, dict[str, Any]]:
    done = runner.gemmzoo("compare", str(base), str(other), "--format", "json")
    try:
        return done.returncode, json.loads(done.stdout)
    except json.JSONDecodeError:
        raise SystemExit(f"gemmzoo compare exited {done.returncode}:\n{done.stdout[-2000:]}\n"
                         f"{done.stderr[-2000:]}") from None


def _row(document: dict[str, Any]) -> dict[str, Any]:
    return document["results"][0]


def _us(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e6:.1f}"


def part_pairs(runner: Runner, out: Path, pairs: int) -> dict[str, Any]:
    """Part 1 (see the module docstring)."""
    args = ["--backend", "slowed-numpy", "--shape", SHAPE, "--dtype", "float32"]
    print(f"\n# 1. slowed-numpy {SHAPE} float32: {pairs} pairs without / with 1.25x the work")
    print("pair  base_us  slow_us  ratio  cal_base_us  cal_slow_us  machine  vs_machine  share_b/s  "
          "pools  verdict  exit  flags")
    rows, caught = [], 0
    for number in range(1, pairs + 1):
        base = bench(runner, out / f"base{number}.json", args, GEMMZOO_TEST_EXTRA_WORK="0")
        slow = bench(runner, out / f"slow{number}.json", args, GEMMZOO_TEST_EXTRA_WORK="0.25")
        code, verdicts = compare(runner, out / f"base{number}.json", out / f"slow{number}.json")
        [record] = verdicts["rows"]
        b, s = _row(base), _row(slow)
        hit = code == 1 and record["verdict"] == "slower"
        caught += hit
        rows.append({"pair": number, "base_s": b["median_s"], "slow_s": s["median_s"],
                     "base_calibration_s": b.get("calibration_s"),
                     "slow_calibration_s": s.get("calibration_s"),
                     "machine": record.get("machine"), "relative_diff": record.get("relative_diff"),
                     "verdict": record["verdict"], "exit": code, "flags": record["flags"],
                     "cpu_share": [b.get("cpu_share"), s.get("cpu_share")],
                     "thread_pools": [b.get("thread_pools"), s.get("thread_pools")]})
        relative = record.get("relative_diff")
        ratio = s["median_s"] / b["median_s"]
        print(f"{number:>4}  {_us(b['median_s']):>7}  {_us(s['median_s']):>7}  {ratio:5.3f}  "
              f"{_us(b.get('calibration_s')):>11}  {_us(s.get('calibration_s')):>11}  "
              f"{record.get('machine') or float('nan'):7.3f}  "
              f"{(1 + relative) if relative is not None else float('nan'):10.3f}  "
              f"{b.get('cpu_share') or 0:.2f}/{s.get('cpu_share') or 0:.2f}  {b.get('thread_pools')}  "
              f"{record['verdict'].upper():>7}  {code:>4}  {record['flags']}", flush=True)
    medians = [r["base_s"] for r in rows]
    calibrations = [r["base_calibration_s"] for r in rows if r["base_calibration_s"]]
    units = [r["base_s"] / r["base_calibration_s"] for r in rows if r["base_calibration_s"]]
    summary = {"pairs": pairs, "slower_exit_1": caught,
               "verdicts": {v: sum(r["verdict"] == v for r in rows)
                            for v in sorted({r["verdict"] for r in rows})},
               "base_median_range_s": [min(medians), max(medians)],
               "base_calibration_range_s": [min(calibrations), max(calibrations)] if calibrations else None,
               "base_in_calibrations_range": [min(units), max(units)] if units else None}
    print(f"SLOWER with exit 1 in {caught} of {pairs} pairs; verdicts {summary['verdicts']}")
    print(f"unslowed runs: median {_us(min(medians))}-{_us(max(medians))} us "
          f"(x{max(medians) / min(medians):.2f}); calibration "
          + (f"{_us(min(calibrations))}-{_us(max(calibrations))} us "
             f"(x{max(calibrations) / min(calibrations):.2f}); "
             f"median in calibrations {min(units):.2f}-{max(units):.2f} (x{max(units) / min(units):.2f})"
             if calibrations else "not recorded"))
    return {"summary": summary, "rows": rows}


def part_identical(runner: Runner, out: Path, runs: int, busy: int, extra: list[str], first_number: int = 1,
                   compare_them: bool = True) -> dict[str, Any]:
    """Part 2 (see the module docstring): ``runs`` runs numbered from ``first_number``, then every
    pair of the ``run*.json`` files in ``out`` compared (those of an earlier call too)."""
    print(f"\n# 2. {runs} identical runs of gemmzoo bench {' '.join(extra)} beside {busy} busy process(es)")
    spinning = runner.busy(busy)
    times = []
    try:
        for number in range(first_number, first_number + runs):
            start = time.perf_counter()
            bench(runner, out / f"run{number}.json", extra, GEMMZOO_DISABLE_PLUGINS="slowed")
            times.append(time.perf_counter() - start)
            print(f"run {number}: {times[-1]:.1f} s", flush=True)
    finally:
        for process in spinning:
            process.kill()
            process.wait()
    seconds = [min(times), max(times)] if times else None
    if not compare_them:
        return {"summary": {"runs": runs, "busy": busy, "args": extra, "run_seconds": seconds}}
    paths = sorted(out.glob("run*.json"), key=lambda path: int(path.stem[3:]))
    runs = len(paths)
    counts: dict[str, int] = {}
    clean, wolves = 0, []
    for first, second in itertools.combinations(range(runs), 2):
        code, verdicts = compare(runner, paths[first], paths[second])
        for record in verdicts["rows"]:
            counts[record["verdict"] or "none"] = counts.get(record["verdict"] or "none", 0) + 1
            if record["verdict"] in ("slower", "faster"):
                wolves.append({"pair": [first + 1, second + 1], "backend": record["backend"],
                               "shape": f"{record['m']}x{record['n']}x{record['k']}",
                               "verdict": record["verdict"],
                               "machine": record.get("machine"), "flags": record["flags"]})
                print(f"  {paths[first].name} {paths[second].name}: {wolves[-1]}", flush=True)
        clean += code == 0
    pairs = runs * (runs - 1) // 2
    print(f"{clean} of {pairs} compares exit 0; rows: {counts}")
    return {"summary": {"runs": runs, "busy": busy, "args": extra, "compares": pairs, "exit_0": clean,
                        "verdicts": counts, "run_seconds": seconds},
            "faster_or_slower": wolves}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cpus", help="CPU list the commands run on, e.g. 2,3 (default: this process's)")
    parser.add_argument("--pairs", type=int, default=10)
    parser.add_argument("--identical", type=int, default=10)
    parser.add_argument("--busy", type=int, default=1, help="busy processes beside part 2 (default 1)")
    parser.add_argument("--identical-args", default="", help="added to each identical run's gemmzoo bench")
    parser.add_argument("--identical-first", type=int, default=1, metavar="N",
                        help="number the identical runs from N (a second call adding runs to --keep's)")
    parser.add_argument("--no-compare", action="store_true",
                        help="make the identical runs, compare nothing (a later call compares them all)")
    parser.add_argument("--skip-pairs", action="store_true")
    parser.add_argument("--skip-identical", action="store_true")
    parser.add_argument("--json", help="write the figures to this file")
    parser.add_argument("--keep", help="keep the result files in this folder (default: a temporary one)")
    args = parser.parse_args()
    cpus = {int(c) for c in args.cpus.split(",")} if args.cpus else None
    with tempfile.TemporaryDirectory(prefix="gemmzoo-drift-") as scratch:
        work = Path(scratch)
        out = Path(args.keep) if args.keep else work / "out"
        out.mkdir(parents=True, exist_ok=True)
        runner = Runner(work, cpus, Path(args.keep) / "cache" if args.keep else work / "cache")
        figures: dict[str, Any] = {"cpus": sorted(cpus) if cpus else sorted(os.sched_getaffinity(0)),
                                   "cpu_count": os.cpu_count(), "python": sys.version.split()[0]}
        print(f"CPUs {figures['cpus']} of {figures['cpu_count']}; load average {os.getloadavg()}")
        if not args.skip_pairs:
            figures["pairs"] = part_pairs(runner, out, args.pairs)
        if not args.skip_identical:
            figures["identical"] = part_identical(runner, out, args.identical, args.busy,
                                                  shlex.split(args.identical_args), args.identical_first,
                                                  not args.no_compare)
        figures["load_average_after"] = os.getloadavg()
        if args.json:
            Path(args.json).write_text(json.dumps(figures, indent=2))
            print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
