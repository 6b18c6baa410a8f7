"""``bench`` and ``tune`` on problems of the classes beyond gemm (``--shape bmm:...``,
``--shape scaled:...``, ``--shape grouped:...``): see :mod:`gemmzoo.scale.class_bench`."""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from typing import Any

from gemmzoo.cli.console import errors, messages
from gemmzoo.problems.classes import Problem, parse_problem


def split_shapes(shapes: list[str]) -> tuple[list[str], list[str]]:
    """``--shape`` values as (gemm shapes, class problems): a class problem has a ``:``."""
    gemm = [s for s in shapes if ":" not in s]
    return gemm, [s for s in shapes if ":" in s]


def expand_grid(args: argparse.Namespace) -> list[Any]:
    """Take a class grid (``--grid attention``, see :data:`gemmzoo.problems.grids.CLASS_GRIDS`) or a model's
    (``--grid model:NAME[@TOKENS]``) apart: its gemm problems join ``args.shape``, its class
    problems are returned as text in ``args.class_shapes``, ``args.grid`` is cleared. Returns the
    model's points (with their counts) for a model grid, else ``[]``; ``ValueError`` for an unknown
    model or token count."""
    from gemmzoo.problems.grids import CLASS_GRIDS

    name = getattr(args, "grid", None) or ""
    args.class_shapes = []
    if name in CLASS_GRIDS:
        args.grid = None
        args.class_shapes = list(CLASS_GRIDS[name])
        return []
    if not name.startswith("model:"):
        return []
    from gemmzoo.problems.model_grids import model_grid

    model, _, tokens = name[len("model:"):].partition("@")
    if tokens and not tokens.isdigit():
        raise ValueError(f"--grid {name}: the token count after @ must be a whole number")
    if not args.dtype:
        args.dtype = ["bfloat16"]
    points = model_grid(model, int(tokens) if tokens else 4096, args.dtype[0])
    args.model_name = name
    args.grid = None
    for point in points:
        if point.problem.kind == "gemm":
            args.shape.append(point.problem.text())
        else:
            args.class_shapes.append(point.problem.text())
    return points


def model_summary_line(points: list[Any], gemm_results: list[Any], class_results: list[dict[str, Any]],
                       baseline: str | None, name: str) -> str:
    """One line: the model's GEMM time per forward pass with the fastest backend of each point,
    against ``baseline``'s, each point weighted by its count
    (:func:`gemmzoo.problems.model_grids.weighted_summary`)."""
    from gemmzoo.problems.model_grids import weighted_summary

    times: dict[str, dict[str, float]] = {}
    for result in gemm_results:
        timing = result.measurement.timing if result.measurement is not None else None
        if result.status == "ok" and timing is not None:
            p = result.point
            times.setdefault(f"{p.m}x{p.n}x{p.k}", {})[result.backend] = timing.median_s
    for row in class_results:
        if row["status"] == "ok" and row.get("median_s"):
            times.setdefault(row["problem"], {})[row["backend"]] = row["median_s"]
    summary = weighted_summary(points, times, baseline or "")
    return (f"{name}: GEMM time per forward pass {summary.best_s * 1e3:.3f} ms with the best backend of "
            f"each point, {summary.baseline_s * 1e3:.3f} ms with {baseline}: {summary.ratio:.3f}x over "
            f"{summary.points} of {len(points)} points ({len(summary.missing)} without a {baseline} time)")


def problems_of(texts: list[str], dtypes: list[str] | None, device: str | None = None) -> list[Problem]:
    """The class problems of ``texts`` in each dtype of ``dtypes`` (when none: bfloat16 on the GPU,
    else float32, the GPU's being ``device``'s or, without one, whether this machine has a GPU;
    scaled problems are float8_e4m3fn whatever it says); ``ValueError`` for a text that is not one."""
    if not dtypes:
        from gemmzoo.problems.grids import default_grid_name

        dtypes = ["bfloat16" if default_grid_name(device) == "gpu" else "float32"]
    found: dict[Problem, None] = {}
    for text in texts:
        for dtype in dtypes:
            found[parse_problem(text, dtype=dtype)] = None
    return list(found)


def _table(results: list[dict[str, Any]]) -> list[str]:
    lines = [f"{'problem':44s} {'dtype':14s} {'backend':18s} {'status':7s} {'time':>12s} {'TFLOPS':>9s}"]
    for row in results:
        seconds = row.get("median_s")
        time_text = f"{seconds * 1e6:10.1f} us" if seconds else "-"
        tflops = f"{row['tflops']:9.3g}" if row.get("tflops") else "-"
        lines.append(f"{row['problem']:44s} {row['dtype']:14s} {row['backend']:18s} {row['status']:7s} "
                     f"{time_text:>12s} {tflops:>9s}")
        if row["status"] != "ok":
            lines.append(f"    {row['detail']}")
    return lines


def run_class_shapes(args: argparse.Namespace, texts: list[str], verb: str,
                     kept: list[dict[str, Any]] | None = None) -> int:
    """Check and time the class problems of ``texts`` (``verb`` "bench" or "tune": tune stores
    each problem's measurements; ``kept`` receives the results); the exit status (1 when a
    backend was WRONG or ERROR, 2 for bad input)."""
    from gemmzoo.errors import UnknownBackendError
    from gemmzoo.problems.grids import backends_device
    from gemmzoo.scale.class_bench import run_class_bench
    from gemmzoo.session import current

    say = messages(getattr(args, "format", "table"))
    try:
        backends = current().select(getattr(args, "backend", None))
        problems = problems_of(texts, getattr(args, "dtype", None), backends_device(backends))
    except (ValueError, UnknownBackendError) as error:
        errors.print(f"gemmzoo {verb}: {error}", style="red", markup=False)
        return 2
    results = run_class_bench(problems, backends)
    if kept is not None:
        kept.extend(results)
    if not results:
        errors.print(f"gemmzoo {verb}: no available backend computes these problems", style="red",
                     markup=False)
        return 2
    if getattr(args, "format", "table") == "json":
        print(json.dumps(results, indent=1))
    else:
        for line in _table(results):
            print(line)
    if verb == "tune":
        from gemmzoo.tuning.class_store import store_measurements

        for problem in problems:
            for device in ("cpu", "cuda"):
                rows = [(r["backend"], r["status"], r["median_s"]) for r in results
                        if (r["problem"], r["dtype"], r["device"]) == (problem.text(), problem.dtype, device)]
                if rows:
                    store_measurements(device, problem, rows)
        say.print(f"stored {len(results)} measurements of {len(problems)} class problems", markup=False)
    path = getattr(args, "json", None)
    if path:
        _write(path, results)
        say.print(f"wrote {path}", markup=False)
    return 1 if any(r["status"] != "ok" for r in results) else 0


def _write(path: str, results: list[dict[str, Any]]) -> None:
    """A result file (:mod:`gemmzoo.results.schema`) of class results, checked whole first."""
    import datetime

    from gemmzoo.results.schema import FORMAT, VERSION, check_document

    document = {"format": FORMAT, "version": VERSION,
                "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                "command": "gemmzoo " + " ".join(shlex.quote(a) for a in sys.argv[1:]),
                "environment": {}, "results": results}
    check_document(json.loads(json.dumps(document)), path)
    with open(path, "w") as out:
        json.dump(document, out, indent=1)
