"""cuBLAS's default pick against cuBLASLt's best: ``torch.matmul``, gemmzoo's ``torch`` backend, and
``nvmath-cublaslt`` with the heuristic's first algorithm and with its autotuned one, in one run.

    python benchmarks/cublaslt_peer.py [--shape MxNxK ...] [--dtype float16,bfloat16,tf32]
                                       [--budget S] [--iterations N] [--json PATH]

Per problem and dtype (default: aligned LLM projections and misaligned odd sizes, in float16,
bfloat16 and tf32), four ways of running cuBLAS:

- ``torch.matmul``: what a caller gets, under torch's defaults (float16 and bfloat16 may reduce
  split-K partial sums in the 16-bit type) and, for tf32, ``allow_tf32`` switched on for the run;
- ``torch``: gemmzoo's cuBLAS backend (fp32 reduction held where it changes the product);
- ``heuristic``: ``nvmath-cublaslt`` planned only (cuBLASLt's heuristic's first algorithm);
- ``autotuned``: ``nvmath-cublaslt`` (the heuristic's candidates timed, the fastest kept).

Each is judged once against the float64 reference as the conformance suite judges (every element),
then timed by gemmzoo's engine (:func:`gemmzoo.measure.timers.run_timing`: CUDA events around each
call, L2 flushed, median under the stopping rule) and its last timed result checked again
(Freivalds). Printed per row: device time of ``torch.matmul`` in µs, then each one's speed-up over it
(``torch.matmul``'s time / its time: above 1 is faster), the autotuned plan's over the heuristic's,
the seconds the autotuned ``prepare`` took, and the host µs per call of ``torch.matmul`` and of the
autotuned plan; then geometric means per dtype over the aligned and the misaligned problems.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

#: Aligned products of LLM layers (Llama-style projections at 4096 tokens and at decode sizes).
ALIGNED = ((4096, 4096, 4096), (16, 4096, 4096), (128, 11008, 4096), (4096, 14336, 4096),
           (4096, 4096, 14336), (8192, 8192, 8192))
#: Sizes whose rows are not 16-byte aligned in 16-bit types (where cuBLAS loses most).
MISALIGNED = ((4097, 4097, 4097), (1023, 1023, 1023), (2047, 4093, 1531), (3001, 3001, 3001),
              (1111, 2222, 3333), (1024, 50257, 768))
DTYPES = ("float16", "bfloat16", "tf32")
COLUMNS = ("torch.matmul", "torch", "heuristic", "autotuned")


def misaligned(shape: tuple[int, int, int]) -> bool:
    """Whether a 16-bit row of A, B or C is not a whole number of 16 bytes (K or N not a multiple of 8)."""
    return shape[1] % 8 != 0 or shape[2] % 8 != 0


def parse_shape(text: str) -> tuple[int, int, int]:
    """``--shape``'s value, read as ``gemmzoo bench --shape`` reads it
    (:func:`gemmzoo.problems.grids.parse_point`)."""
    from gemmzoo.problems.grids import GridError, parse_point

    try:
        shape, _dtype, _layout = parse_point(text)
    except GridError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    return shape


def torch_matmul_backend() -> Any:
    """``torch.matmul`` itself as a backend (its plan is ``torch.matmul``), on CUDA tensors."""
    import torch

    from gemmzoo import Backend, TF32Array
    from gemmzoo.arrays.torch_tensors import TorchTensors

    class TorchMatmul(TorchTensors, Backend):
        name = "torch-matmul"
        device = "cuda"
        dtypes = frozenset({"float16", "bfloat16", "float32", "tf32"})

        def matmul(self, a: Any, b: Any) -> Any:
            if isinstance(a, TF32Array):
                return TF32Array(torch.matmul(a.data, b.data))
            return torch.matmul(a, b)

        def prepare(self, a: Any, b: Any) -> Callable[[Any, Any], Any]:
            self.check_operands(a, b)
            return self.matmul

        def synchronize(self) -> None:
            torch.cuda.synchronize()

    return TorchMatmul()


def versions() -> dict[str, str]:
    import torch

    found = {"python": platform.python_version(), "torch": torch.__version__,
             "device": torch.cuda.get_device_name(), "cuda": str(torch.version.cuda)}
    try:
        from importlib.metadata import version

        found["nvmath-python"] = version("nvmath-python")
        from nvmath.bindings import cublasLt  # the library's own version, for the record

        found["cublaslt"] = str(cublasLt.get_version())
    except Exception as error:  # recorded, not fatal
        found["nvmath-python"] = f"unknown ({type(error).__name__})"
    return found


def measure(backend: Any, point: Any, budget_s: float, strict: bool = True) -> dict[str, Any]:
    """Judge, time and check one backend on one point; device and host seconds per call, and the
    seconds its ``prepare`` took (autotuning, for the autotuned plan). A result outside the suite's
    bound raises, unless not ``strict`` (``torch.matmul``, whose 16-bit split-K reductions may add
    in the 16-bit type): then it is noted and the timing goes on."""
    from gemmzoo.measure.problems import make_problem
    from gemmzoo.measure.reference import WrongResultError, check, spot_check
    from gemmzoo.measure.timers import run_timing

    problem = make_problem(backend, point, seed=1)
    backend.synchronize()
    start = time.perf_counter()
    backend.prepare(problem.a, problem.b)
    backend.synchronize()
    prepare_s = time.perf_counter() - start
    found: dict[str, Any] = {"prepare_s": prepare_s}
    try:
        found["error_ratio"] = check(problem)  # every element within the suite's bound, or raises
    except WrongResultError as wrong:
        if strict:
            raise
        found["outside_bound"] = str(wrong)
    timed = run_timing(problem, budget_s)
    if timed.last is not None:
        try:
            spot_check(problem, *timed.last)
        except WrongResultError as wrong:
            if strict:
                raise
            found["outside_bound"] = str(wrong)
    found.update(device_s=timed.device.median_s, host_s=timed.host.median_s)
    return found


def geomean(values: list[float]) -> float:
    return math.exp(statistics.fmean(math.log(v) for v in values)) if values else float("nan")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", type=parse_shape, action="append", default=None,
                        help="MxNxK (repeatable); default: the aligned and misaligned sets")
    parser.add_argument("--dtype", default=",".join(DTYPES), help="comma-separated: float16, bfloat16, tf32")
    parser.add_argument("--budget", type=float, default=0.5, help="seconds of samples per timing")
    parser.add_argument("--iterations", type=int, default=None, help="autotuning runs per candidate")
    parser.add_argument("--json", default=None, help="write the figures to this file")
    args = parser.parse_args(argv)

    import torch

    if not torch.cuda.is_available():
        print("needs a CUDA GPU", file=sys.stderr)
        return 2
    import gemmzoo
    from gemmzoo.problems.grids import GridPoint
    from gemmzoo_torch.nvmath_cublaslt import NvmathCublasLtBackend

    reason = NvmathCublasLtBackend().unavailable_reason()
    if reason is not None:
        print(f"nvmath-cublaslt unavailable: {reason}", file=sys.stderr)
        return 2
    torch.backends.cuda.matmul.allow_tf32 = True  # torch.matmul's tf32 rows; no IEEE fp32 row runs
    tuned_options = {} if args.iterations is None else {"iterations": args.iterations}
    backends = {
        "torch.matmul": torch_matmul_backend(),
        "torch": gemmzoo.get_backend("torch"),
        "heuristic": NvmathCublasLtBackend(autotune=False, name="nvmath-cublaslt-heuristic"),
        "autotuned": NvmathCublasLtBackend(**tuned_options),
    }
    shapes = args.shape or [*ALIGNED, *MISALIGNED]
    dtypes = [d.strip() for d in args.dtype.split(",") if d.strip()]
    found = versions()
    print(f"{found['device']}; torch {found['torch']} (CUDA {found['cuda']}); nvmath-python "
          f"{found.get('nvmath-python')}, cuBLASLt {found.get('cublaslt', '?')}")
    header = (f"{'dtype':9} {'M x N x K':>20} {'matmul µs':>10} {'torch':>7} {'heur.':>7} {'tuned':>7} "
              f"{'tuned/heur.':>11} {'tune s':>7} {'host µs matmul/tuned':>21}")
    print(header)
    rows = []
    for dtype in dtypes:
        for shape in shapes:
            point = GridPoint(*shape, dtype)
            row: dict[str, Any] = {"dtype": dtype, "shape": list(shape), "misaligned": misaligned(shape)}
            for label, backend in backends.items():
                try:
                    row[label] = measure(backend, point, args.budget, strict=label != "torch.matmul")
                except Exception as error:  # one failure is a row's note, not the end of the run
                    row[label] = {"error": f"{type(error).__name__}: {error}"}
            base = row["torch.matmul"].get("device_s")
            for label in COLUMNS[1:]:
                time_s = row[label].get("device_s")
                row[label]["speedup"] = base / time_s if base and time_s else None
            heur, tuned = row["heuristic"].get("device_s"), row["autotuned"].get("device_s")
            row["autotuned_over_heuristic"] = heur / tuned if heur and tuned else None
            rows.append(row)

            def text(value: float | None, width: int = 7) -> str:
                return f"{value:{width}.3f}" if value is not None else f"{'ERR':>{width}}"

            host = f"{row['torch.matmul'].get('host_s', float('nan')) * 1e6:.1f}/" \
                   f"{row['autotuned'].get('host_s', float('nan')) * 1e6:.1f}"
            print(f"{dtype:9} {'x'.join(map(str, shape)):>20} "
                  f"{(base or float('nan')) * 1e6:10.1f} {text(row['torch']['speedup'])} "
                  f"{text(row['heuristic']['speedup'])} {text(row['autotuned']['speedup'])} "
                  f"{text(row['autotuned_over_heuristic'], 11)} "
                  f"{row['autotuned'].get('prepare_s', float('nan')):7.2f} {host:>21}", flush=True)
            for label in COLUMNS:
                for note in ("error", "outside_bound"):
                    if note in row[label]:
                        print(f"    {label}: {note}: {row[label][note]}")
    summary = []
    print("\ngeomean speed-up over torch.matmul (tuned/heuristic in the last column)")
    for dtype in dtypes:
        for group, wanted in (("aligned", False), ("misaligned", True)):
            chosen = [r for r in rows if r["dtype"] == dtype and r["misaligned"] == wanted]
            means = {label: geomean([r[label]["speedup"] for r in chosen if r[label].get("speedup")])
                     for label in COLUMNS[1:]}
            means["autotuned_over_heuristic"] = geomean(
                [r["autotuned_over_heuristic"] for r in chosen if r["autotuned_over_heuristic"]])
            if not chosen:
                continue
            summary.append({"dtype": dtype, "group": group, "problems": len(chosen), **means})
            print(f"{dtype:9} {group:>10} ({len(chosen)}): torch {means['torch']:.3f}  heuristic "
                  f"{means['heuristic']:.3f}  autotuned {means['autotuned']:.3f}  tuned/heuristic "
                  f"{means['autotuned_over_heuristic']:.3f}")
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"date": time.strftime("%Y-%m-%d"), "command": " ".join(["benchmarks/cublaslt_peer.py",
                                                                                *(argv or sys.argv[1:])]),
                       "versions": found, "budget_s": args.budget, "rows": rows, "summary": summary}, out,
                      indent=1)
    return 0 if all("error" not in r[label] for r in rows for label in COLUMNS) else 1


if __name__ == "__main__":
    sys.exit(main())
