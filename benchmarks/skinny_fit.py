#!/usr/bin/env python3
"""Fit the split-K time model's constants to a config sweep (``skinny_configs.py``'s JSON).

    python benchmarks/skinny_fit.py SWEEP.json [SWEEP.json ...]

For each problem the model ranks the variants that were measured; its regret is the measured
time of the variant it ranks first over the measured time of the fastest. A search over the
constants of :mod:`gemmzoo_triton.splitk_plan` (coordinate descent from the module's values)
minimizes the mean regret (then the worst) and prints the constants, with each problem's pick
under them. Runs on any machine: it only reads the JSON.
"""

from __future__ import annotations

import json
import re
import statistics
import sys
from pathlib import Path

from gemmzoo_triton import splitk_plan as plan

LABEL = re.compile(r"(\d+)x(\d+)x(\d+) s(\d+) w(\d+) split (\d+) (direct|serial|separate)( tma)?")
#: Each constant is searched over its start value times these factors, one at a time, in rounds.
FACTORS = (0.25, 0.4, 0.6, 0.8, 1.0, 1.25, 1.6, 2.5, 4.0)
NAMES = ("MEMORY_BW", "SM_BW", "TMA_SM_BW", "L2_BW", "SM_FLOPS", "STEP_S", "WAVE_S", "LAUNCH_S",
         "ROUND_TRIP_S")


def problems(paths: list[Path]) -> dict[tuple[int, int, int, str], list[tuple[plan.SplitConfig, float]]]:
    """Measured variants per problem (M, N, K, name), fp16, from sweep files."""
    found: dict[tuple[int, int, int, str], list[tuple[plan.SplitConfig, float]]] = {}
    for path in paths:
        for row in json.loads(path.read_text())["rows"]:
            match = LABEL.fullmatch(row["variant"])
            if not match:
                continue
            bm, bn, bk, stages, warps, splits = (int(v) for v in match.groups()[:6])
            reduce = ("direct", "serial", "separate").index(match.group(7))
            m, n, k = (int(v) for v in row["shape"].split()[0].split("x"))
            tma = match.group(8) is not None
            config = plan.SplitConfig(bm, bn, bk, stages, warps, splits, 0, reduce, tma)
            found.setdefault((m, n, k, row["shape"]), []).append((config, row["ms"]))
    return found


def regrets(found: dict[tuple[int, int, int, str], list[tuple[plan.SplitConfig, float]]],
            sms: int = 132) -> dict[str, tuple[float, str]]:
    """Each problem's regret under the current constants, and the variant picked."""
    out = {}
    for (m, n, k, name), variants in found.items():
        best = min(ms for _, ms in variants)
        def model(v: tuple[plan.SplitConfig, float], m: int = m, n: int = n, k: int = k) -> float:
            return plan.split_time(v[0], m, n, k, v[0].splits, sms, 2, v[0].reduce)

        picked = min(variants, key=model)
        out[name] = (picked[1] / best, picked[0].label)
    return out


Found = dict[tuple[int, int, int, str], list[tuple[plan.SplitConfig, float]]]


def score(found: Found) -> tuple[float, float]:
    r = [ratio for ratio, _ in regrets(found).values()]
    return round(statistics.mean(r), 4), max(r)


def main(argv: list[str]) -> int:
    found = problems([Path(p) for p in argv])
    current = score(found)
    print(f"module constants: mean regret {current[0]:.3f}, worst {current[1]:.3f}")
    for _ in range(3):  # coordinate descent: one constant at a time over a range of factors
        for name in NAMES:
            start = getattr(plan, name)
            trials = []
            for factor in FACTORS:
                setattr(plan, name, start * factor)
                trials.append((score(found), factor))
            best, factor = min(trials)
            setattr(plan, name, start * factor)
            current = best
    print(f"fitted: mean regret {current[0]:.3f}, worst {current[1]:.3f}")
    print("constants: " + ", ".join(f"{name} = {getattr(plan, name):.3g}" for name in NAMES))
    for name, (ratio, label) in regrets(found).items():
        print(f"  {name:>26}: {label:>36} {ratio:.3f}x the fastest measured")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
