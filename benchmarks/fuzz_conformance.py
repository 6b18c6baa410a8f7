#!/usr/bin/env python3
"""The conformance suite's checks on random problems that are in no list of gemmzoo's own.

    python benchmarks/fuzz_conformance.py [OUT.json] [--backends NAME ...] [--cases 40] [--seed 0]
                                          [--max-work 2e10]

``gemmzoo check`` poses fixed shapes; a backend's routes (split-K, decode blocks, TMA, aligned
copies, padding) switch on sizes and strides, so a wrong route can pass every fixed shape. This
draws, per backend, ``--cases`` problems from a seeded generator — shapes of five profiles
(square-ish, decode M <= 64, long K, tall or wide, near powers of two and multiples of 64, each
dimension often odd), every operand layout of the suite (plain, transposed, strided slice), the
value kinds of the suite (random, scaled, cancelling, integers, repeat, non-finite) and the
backend's dtypes — and judges each through :func:`gemmzoo.conformance.run_case`: every element
against the float64 reference within the suite's bound, operands unchanged, and for repeat cases
three calls bitwise identical. Prints one line per case and exits 1 on any failure; the seed and
the case id reproduce a failure. Not a pytest file.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
from pathlib import Path
from typing import Any

PROFILES = ("square", "decode", "long_k", "tall_wide", "near_pow2")
KINDS = ("random", "random", "random", "scaled", "cancel", "integers", "repeat", "nonfinite")
LAYOUTS = tuple(a + b for a in "NTS" for b in "NTS")
#: Largest operand, in elements: the host draws the values in float64.
MAX_OPERAND = 1 << 25


def _log_uniform(rng: random.Random, low: int, high: int) -> int:
    return round(math.exp(rng.uniform(math.log(low), math.log(high))))


def _near_pow2(rng: random.Random, low: int, high: int) -> int:
    base = rng.choice([1 << p for p in range(low.bit_length(), high.bit_length())] +
                      [64 * rng.randint(max(1, low // 64), max(1, high // 64))])
    return max(1, base + rng.choice((-8, -3, -1, 0, 0, 1, 2, 7, 8)))


def draw_shape(rng: random.Random, profile: str, max_work: float) -> tuple[int, int, int]:
    """(M, N, K) of ``profile`` with M·N·K at most ``max_work`` and operands of at most
    :data:`MAX_OPERAND` elements."""
    while True:
        if profile == "square":
            side = _log_uniform(rng, 1, 6000)
            m, n, k = (max(1, side + rng.randint(-side // 8, side // 8)) for _ in range(3))
        elif profile == "decode":
            m, n, k = rng.choice((1, 2, 7, 8, 16, 31, 33, 64)), _log_uniform(rng, 512, 20000), \
                _log_uniform(rng, 512, 20000)
        elif profile == "long_k":
            m, n, k = _log_uniform(rng, 1, 600), _log_uniform(rng, 1, 600), _log_uniform(rng, 8000, 70000)
        elif profile == "tall_wide":
            m, n, k = _log_uniform(rng, 2000, 30000), _log_uniform(rng, 1, 300), _log_uniform(rng, 16, 5000)
            if rng.random() < 0.5:
                m, n = n, m
        else:
            m, n, k = (_near_pow2(rng, 16, 8192) for _ in range(3))
        if m * n * k <= max_work and m * k <= MAX_OPERAND and k * n <= MAX_OPERAND:
            return m, n, k


def draw_cases(dtypes: list[str], count: int, seed: int, max_work: float) -> list[Any]:
    """``count`` cases over ``dtypes``, the same for a given seed, dtypes and bound."""
    from gemmzoo.conformance import Case

    rng = random.Random(seed)
    cases = []
    for index in range(count):
        profile = PROFILES[index % len(PROFILES)]
        m, n, k = draw_shape(rng, profile, max_work)
        kind = rng.choice(KINDS)
        if kind == "nonfinite" and (m < 8 or n < 9 or k < 6):  # the suite plants them up to A[7, 4], B[5, 8]
            kind = "random"
        dtype = rng.choice(dtypes)
        cases.append(Case(kind, m, n, k, dtype, rng.choice(LAYOUTS)))
    return cases


def main(argv: list[str] | None = None) -> int:
    import gemmzoo
    from gemmzoo.conformance import run_case

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?", type=Path, help="write every case's result here (JSON)")
    parser.add_argument("--backends", nargs="+", help="default: every available backend")
    parser.add_argument("--cases", type=int, default=40, help="cases per backend")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-work", type=float, default=2e10, help="largest M·N·K")
    args = parser.parse_args(argv)
    names = args.backends or [b.name for b in gemmzoo.backends() if b.unavailable_reason() is None]
    results: list[dict[str, Any]] = []
    for name in names:
        backend = gemmzoo.get_backend(name)
        dtypes = sorted(backend.dtypes)
        for case in draw_cases(dtypes, args.cases, args.seed, args.max_work):
            result = run_case(backend, case)
            results.append({"backend": name, "case": case.id, "passed": result.passed,
                            "detail": result.detail})
            print(f"{'ok  ' if result.passed else 'FAIL'} {name} {case.id}: {result.detail}", flush=True)
            if args.out:
                args.out.write_text(json.dumps({"seed": args.seed, "results": results}, indent=1))
    failed = [r for r in results if not r["passed"]]
    print(f"{len(results) - len(failed)} of {len(results)} cases conform (seed {args.seed})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
