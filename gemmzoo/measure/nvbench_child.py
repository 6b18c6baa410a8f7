"""nvbench timings, each in a process of its own.

``cuda-bench`` runs its registered benchmarks once per process: after
``run_all_benchmarks`` it refuses to register another. So ``--timer nvbench`` times each
(backend, point) in a child process: the child looks the backend up by name, makes the problem
from the same grid point, warms the call up and hands it to
:func:`gemmzoo.measure.adaptors.nvbench_timing`; it prints the timing as one JSON line, which the
parent turns back into a :class:`~gemmzoo.measure.stats.Timing`.

    python -m gemmzoo.measure.nvbench_child < request.json
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from typing import Any

from gemmzoo.config import process_environment
from gemmzoo.errors import GemmError
from gemmzoo.measure.stats import Timing

#: Seconds a child may take beyond its timing budget (imports, CUDA context, compiles, warm-up).
START_ALLOWANCE_S = 120.0


def request(backend_name: str, point: Any, budget_s: float, target: float, device: int) -> dict[str, Any]:
    """What the child needs to make and time the problem."""
    return {"backend": backend_name, "m": point.m, "n": point.n, "k": point.k, "dtype": point.dtype,
            "layout": point.layout, "budget_s": budget_s, "target": target, "device": device}


def timing_in_child(backend_name: str, point: Any, budget_s: float, target: float, device: int) -> Timing:
    """nvbench's timing of ``backend_name`` on ``point``, measured in a child process."""
    asked = json.dumps(request(backend_name, point, budget_s, target, device))
    try:
        done = subprocess.run([sys.executable, "-m", "gemmzoo.measure.nvbench_child"], input=asked,
                              capture_output=True, text=True, timeout=budget_s * 4 + START_ALLOWANCE_S,
                              env=dict(process_environment()), check=False)
    except subprocess.TimeoutExpired:
        raise GemmError(f"nvbench: the child timing {backend_name} on {point.id} did not finish") from None
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        why = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise GemmError(f"nvbench: timing {backend_name} on {point.id} failed: {why}")
    return timing_from_record(json.loads(lines[-1]))


def timing_record(timing: Timing) -> dict[str, Any]:
    """A :class:`Timing` as JSON (NaN as null)."""
    def clean(value: float | None) -> float | None:
        return value if value is not None and math.isfinite(value) else None

    return {"median_s": timing.median_s, "q1_s": timing.q1_s, "q3_s": timing.q3_s, "samples": timing.samples,
            "method": timing.method, "data": list(timing.data), "noise": clean(timing.noise),
            "converged": timing.converged, "target": timing.target}


def timing_from_record(record: dict[str, Any]) -> Timing:
    """The :class:`Timing` that :func:`timing_record` wrote."""
    if record.get("error"):
        raise GemmError(f"nvbench: {record['error']}")
    data = [float(x) for x in record.get("data") or ()]
    target = record.get("target")
    if data:
        return Timing.of(data, str(record["method"]), target)
    noise = record.get("noise")
    return Timing(float(record["median_s"]), float(record["q1_s"]), float(record["q3_s"]),
                  int(record["samples"]), str(record["method"]),
                  noise=math.nan if noise is None else float(noise), converged=record.get("converged"),
                  target=target)


def main() -> int:
    """The child: read the request, time it, print one JSON line."""
    from gemmzoo.measure.adaptors import nvbench_timing
    from gemmzoo.measure.problems import make_problem, planned
    from gemmzoo.problems.grids import GridPoint
    from gemmzoo.tuning.state import current

    asked = json.loads(sys.stdin.read())
    backend = current().get_backend(asked["backend"])
    point = GridPoint(asked["m"], asked["n"], asked["k"], asked["dtype"], asked["layout"])
    problem = make_problem(backend, point)
    run = planned(backend, problem.a, problem.b)

    def call() -> Any:
        return run(problem.a, problem.b)

    for _ in range(2):
        call()
    backend.synchronize()
    try:
        timing = nvbench_timing(call, asked["budget_s"], asked["target"], device=asked["device"])
    except GemmError as error:
        print(json.dumps({"error": str(error)}), flush=True)
        return 0
    print(json.dumps(timing_record(timing)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
