"""The conformance suite's checks on the shapes that reach triton-grouped's TMA routes.

``gemmzoo check`` poses small shapes and a few large ones; the aligned route (rows not 16-byte
aligned, over ``grouped_plan.ALIGNED_MIN_WORK`` multiply-adds) and the tf32 route need larger
problems. This runs gemmzoo's own conformance cases (random values against a float64 reference
with the suite's error bounds, every layout, and the repeat case's three bitwise-identical calls)
on such shapes, prints each route taken and result, and exits 1 on any failure.

    python benchmarks/triton_route_conformance.py [OUTFILE.json]
"""

from __future__ import annotations

import json
import sys

CASES = [
    # (kind, M, N, K, dtypes, layouts)
    ("random", 4097, 4097, 4097, ("float16", "bfloat16"), ("NN",)),
    ("random", 2049, 2051, 2053, ("float16",), ("NN", "TN", "NT", "TT", "SN", "ST")),
    ("random", 1030, 2050, 4097, ("bfloat16",), ("NN",)),  # K alone odd: A copied
    ("random", 2304, 1031, 4100, ("float16",), ("NN",)),  # N alone odd: B copied, C padded
    ("repeat", 2049, 2051, 2053, ("float16", "bfloat16"), ("NN",)),
    ("random", 2112, 2080, 2064, ("tf32",), ("NN", "TN", "NT")),  # the tf32 route
    ("random", 2049, 2051, 2053, ("tf32",), ("NN",)),
    ("repeat", 2112, 2080, 2064, ("tf32",), ("NN",)),
]


def main(argv: list[str]) -> int:
    import gemmzoo
    from gemmzoo.conformance import Case, run_case
    from gemmzoo_triton import grouped_plan

    backend = gemmzoo.get_backend("triton-grouped")
    reason = backend.unavailable_reason()
    if reason is not None:
        print(f"triton-grouped unavailable: {reason}")
        return 1
    routes: list[str] = []
    original = grouped_plan.route

    def recording(x, y, precision):
        taken = original(x, y, precision)
        routes.append(taken)
        return taken

    grouped_plan.route = recording
    results = []
    try:
        for kind, m, n, k, dtypes, layouts in CASES:
            for dtype in dtypes:
                for layout in layouts:
                    routes.clear()
                    result = run_case(backend, Case(kind, m, n, k, dtype, layout))
                    taken = ",".join(sorted(set(routes)))
                    results.append({"case": result.check, "route": taken, "passed": result.passed,
                                    "detail": result.detail})
                    verdict = "ok  " if result.passed else "FAIL"
                    print(f"{verdict} {result.check} route={taken}: {result.detail}", flush=True)
    finally:
        grouped_plan.route = original
    if len(argv) > 1:
        with open(argv[1], "w") as out:
            json.dump(results, out, indent=1)
    failed = [r for r in results if not r["passed"]]
    print(f"{len(results) - len(failed)} of {len(results)} cases conform")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
