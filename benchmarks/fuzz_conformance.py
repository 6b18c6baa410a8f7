#!/usr/bin/env python3
"""The conformance suite's checks on random problems that are in no list of gemmzoo's own.

    python benchmarks/fuzz_conformance.py [OUT.json] [--backends NAME ...] [--cases 40] [--seed 0]
                                          [--max-work 2e10]

``gemmzoo check NAME --random N --seed S --max-work W`` runs the same kind of problems after the
fixed suite; this script runs only them, draws them over the backend's dtypes in name order, and
writes every case's result to OUT.json. Per backend, ``--cases`` problems from
:func:`gemmzoo.conformance.random_cases` (five shape profiles: square-ish, decode M <= 64, long K,
tall or wide, near powers of two; every layout and value kind of the suite), each judged by
:func:`gemmzoo.conformance.run_case`: every element against the float64 reference within the
suite's bound, operands unchanged, and for repeat cases three calls bitwise identical. Prints one
line per case and exits 1 on any failure; the case id alone reproduces a failure
(``run_case(backend, Case(kind, m, n, k, dtype, layout))``). Not a pytest file.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any


def main(argv: list[str] | None = None) -> int:
    import gemmzoo
    from gemmzoo.conformance import random_cases, run_case

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
        for case in random_cases(dtypes, args.cases, args.seed, args.max_work):
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
