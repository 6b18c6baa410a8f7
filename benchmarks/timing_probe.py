"""Where does a GEMM's device time drift? Per-call times in order, beside the GPU's clocks.

For each CUDA backend on one cube (4096^3 float16 by default) this times the GEMM in several
ways, on the same operands, and keeps every sample in the order it was taken. ``do_bench`` is
``triton.testing.do_bench(return_mode="all")``; ``engine`` is gemmzoo's CUDA event batches
(``gemmzoo.measure.CudaEventTimer``, ~20 ms a batch, L2 flushed before each call); ``clock`` is
``gemmzoo.measure.DeviceClock`` with one GEMM and one sync per round (pytest's way).

- ``--plan isolated`` (default): each phase after ``--idle-s`` of idle GPU: do_bench with and
  without its 50 ms warm-up, the engine, one engine batch as long as do_bench's, the same after
  do_bench's warm-up (50 ms of calls without flushes), 1 s batches with and without flushes, and
  the clock with and without that warm-up;
- ``--plan order``: do_bench, engine, one batch, do_bench, clock, do_bench back to back, then the
  engine and do_bench after idle (run 1 of docs/results/2026-11-21-timing-agreement.md).

Meanwhile ``nvidia-smi`` logs SM clock, power, temperature and the clock-limit reasons every
20 ms; each phase gets the mean of the log lines inside it. Writes OUTDIR/timing_probe.json
(every sample), timing_probe.md and nvidia_smi.csv.

    python benchmarks/timing_probe.py OUTDIR [--backend NAME ...] [--size N] [--dtype D]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

SMI_FIELDS = ["timestamp", "clocks.sm", "power.draw", "temperature.gpu"]
REASON_FIELDS = ["clocks_event_reasons.active", "clocks_throttle_reasons.active"]


def start_smi_log(path: Path) -> subprocess.Popen | None:
    """``nvidia-smi`` logging every 20 ms to ``path``, with whichever limit-reason field it knows."""
    for reason in REASON_FIELDS:
        query = ",".join([*SMI_FIELDS, reason])
        process = subprocess.Popen(["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader,nounits",
                                    "-lms", "20", "-f", str(path)])
        time.sleep(1.0)
        if process.poll() is None:
            return process
    return None


def read_smi_log(path: Path) -> list[tuple[float, float, float, float, str]]:
    """(unix time, SM MHz, watts, deg C, reasons) per line of the log."""
    rows = []
    if not path.exists():
        return rows
    for line in path.read_text().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 5:
            continue
        try:
            stamp = datetime.strptime(parts[0], "%Y/%m/%d %H:%M:%S.%f").timestamp()
            rows.append((stamp, float(parts[1]), float(parts[2]), float(parts[3]), parts[4]))
        except ValueError:
            continue
    return rows


def summarise(samples_ms: list[float]) -> dict[str, Any]:
    """Median, quartiles, and the medians of each tenth of the run in order (the drift)."""
    n = len(samples_ms)
    if n > 1:
        q1, median, q3 = statistics.quantiles(samples_ms, n=4, method="inclusive")
    else:
        q1 = median = q3 = samples_ms[0]
    tenth = max(1, n // 10)
    deciles = [statistics.median(samples_ms[i:i + tenth]) for i in range(0, n - tenth + 1, tenth)][:10]
    return {"n": n, "median_ms": median, "q1_ms": q1, "q3_ms": q3, "decile_medians_ms": deciles}


def probe(backend: Any, point: Any, args: argparse.Namespace, record: Any) -> dict[str, float]:
    """The phases of ``args.plan`` for one backend, on one set of operands. Returns what the
    engine's launch pacer saw: shortest launch, flush time and the spin it asked for (µs)."""
    import triton.testing

    from gemmzoo.measure import CudaEventTimer, DeviceClock, check, prepare

    problem = prepare(backend, point)
    check(problem)

    def call() -> Any:
        return backend.matmul(problem.a, problem.b)

    timer = CudaEventTimer()
    first_s = timer.batch(call, 1)[0]
    per_batch = max(1, int(0.02 / first_s))
    per_rep = max(1, int(args.rep_ms * 1e-3 / (first_s + 85e-6)))  # do_bench's count, near enough
    per_second = max(1, int(1.0 / (first_s + 85e-6)))

    def do_bench(warmup_ms: int = 50) -> list[float]:
        return triton.testing.do_bench(call, warmup=warmup_ms, rep=args.rep_ms, return_mode="all")

    def engine() -> list[float]:
        samples: list[float] = []
        for _ in range(max(1, per_rep // per_batch)):
            samples += timer.batch(call, per_batch)
        return [s * 1e3 for s in samples]

    def one_batch(count: int = per_rep, flush: bool = True) -> list[float]:
        return [s * 1e3 for s in timer.batch(call, count, flush=flush)]

    def warm_50ms() -> None:  # what do_bench does before its timed calls: 50 ms, no flushes
        for _ in range(max(1, int(0.05 / first_s))):
            call()

    def clock_rounds() -> list[float]:
        clock = DeviceClock()
        target = clock.wrap(call)
        samples = []
        for _ in range(per_rep):
            start = clock()
            target()
            samples.append((clock() - start) * 1e3)
        return samples

    if args.plan == "order":  # run 1: phases back to back, as a benchmark session runs them
        record(backend, "do_bench-1", do_bench)
        record(backend, "engine", engine)
        record(backend, "engine-1batch", one_batch)
        record(backend, "do_bench-2", do_bench)
        record(backend, "clock", clock_rounds)
        record(backend, "do_bench-3", do_bench)
        time.sleep(args.idle_s)
        record(backend, "engine-after-idle", engine)
        time.sleep(args.idle_s)
        record(backend, "do_bench-after-idle", do_bench)
        return pacer_state(timer.pacer)
    # "isolated": each phase starts after idle_s of an idle GPU, so each starts from one state
    phases = {
        "do_bench": do_bench,
        "do_bench-nowarmup": lambda: do_bench(0),
        "engine": engine,
        "engine-1batch": one_batch,
        "warm50+engine-1batch": lambda: (warm_50ms(), one_batch())[1],
        "engine-1s": lambda: one_batch(per_second),
        "noflush-1s": lambda: one_batch(per_second, flush=False),
        "clock": clock_rounds,
        "warm50+clock": lambda: (warm_50ms(), clock_rounds())[1],
    }
    for name, run in phases.items():
        time.sleep(args.idle_s)
        record(backend, name, run)
    return pacer_state(timer.pacer)


def pacer_state(pacer: Any) -> dict[str, float]:
    state = {"launch_us": pacer.launch_s * 1e6, "flush_us": pacer.flush_s * 1e6,
             "gemm_us": pacer.gemm_s * 1e6, "spin_us": pacer.spin_s() * 1e6}
    print("pacer: " + ", ".join(f"{key} {value:.1f}" for key, value in state.items()), flush=True)
    return state


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("outdir", type=Path)
    parser.add_argument("--backend", action="append",
                        help="CUDA backend (default: torch, cupy, triton-grouped)")
    parser.add_argument("--size", type=int, default=4096)
    parser.add_argument("--dtype", default="float16")
    parser.add_argument("--rep-ms", type=int, default=300, help="do_bench's rep (ms)")
    parser.add_argument("--idle-s", type=float, default=3.0)
    parser.add_argument("--plan", choices=["order", "isolated"], default="isolated",
                        help="order: phases back to back; isolated: each after idle-s of idle GPU")
    args = parser.parse_args(argv)
    args.outdir.mkdir(parents=True, exist_ok=True)

    import torch
    import triton
    import triton.testing

    import gemmzoo
    from gemmzoo.device import device_info
    from gemmzoo.grids import GridPoint

    smi_path = args.outdir / "nvidia_smi.csv"
    smi = start_smi_log(smi_path)
    names = args.backend or ["torch", "cupy", "triton-grouped"]
    backends = [b for b in (gemmzoo.get_backend(n) for n in names) if b.unavailable_reason() is None]
    point = GridPoint(args.size, args.size, args.size, args.dtype)
    info = device_info("cuda")
    phases: list[dict[str, Any]] = []

    def record(backend: Any, name: str, run: Any) -> None:
        started = time.time()
        samples = [float(s) for s in run()]
        phase = {"backend": backend.name, "phase": name, "start": started, "end": time.time(),
                 "samples_ms": samples, **summarise(samples)}
        phases.append(phase)
        print(f"{backend.name:>15} {name:>22} median {phase['median_ms']:.4f} ms "
              f"deciles {' '.join(f'{d:.4f}' for d in phase['decile_medians_ms'])}", flush=True)

    pacers = {backend.name: probe(backend, point, args, record) for backend in backends}

    time.sleep(0.5)
    if smi is not None:
        smi.terminate()
        smi.wait()
    log = read_smi_log(smi_path)
    for phase in phases:
        inside = [row for row in log if phase["start"] <= row[0] <= phase["end"]]
        phase["smi_lines"] = len(inside)
        if inside:
            phase["sm_mhz"] = statistics.mean(r[1] for r in inside)
            phase["sm_mhz_min"] = min(r[1] for r in inside)
            phase["watts"] = statistics.mean(r[2] for r in inside)
            phase["temp_c"] = max(r[3] for r in inside)
            phase["reasons"] = sorted({r[4] for r in inside})

    report = {"device": info, "torch": torch.__version__, "triton": triton.__version__,
              "point": point.id, "command": " ".join([sys.executable, *sys.argv]),
              "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "pacers": pacers,
              "phases": phases}
    (args.outdir / "timing_probe.json").write_text(json.dumps(report) + "\n")
    lines = [f"# Timing probe: {point.id} on {info['device_name']} (driver {info['driver']})", "",
             f"torch {torch.__version__}, triton {triton.__version__}; {report['date']}", "",
             "| backend | phase | n | median ms | first tenth | last tenth | SM MHz (min) | W | max °C "
             "| reasons |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for p in phases:
        deciles = p["decile_medians_ms"]
        nan = float("nan")
        lines.append(f"| {p['backend']} | {p['phase']} | {p['n']} | {p['median_ms']:.4f} | "
                     f"{deciles[0]:.4f} | {deciles[-1]:.4f} | "
                     f"{p.get('sm_mhz', nan):.0f} ({p.get('sm_mhz_min', nan):.0f}) | "
                     f"{p.get('watts', nan):.0f} | {p.get('temp_c', nan):.0f} | "
                     f"{' '.join(p.get('reasons', []))} |")
    lines += ["", "Launch pacer (µs): " + "; ".join(
        f"{name}: " + ", ".join(f"{k} {v:.1f}" for k, v in state.items()) for name, state in pacers.items())]
    (args.outdir / "timing_probe.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
