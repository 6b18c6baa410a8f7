"""Result files of ``gemmzoo bench --json``: read back, and the parts of a split sweep merged.

The format is :mod:`gemmzoo.results.schema`'s; every file is checked whole before it is used. A
``"shard"`` (``{"index", "count", "grid", "points"}``: the part, the number of parts, the grid's
digest and its number of points) marks one part of a split grid, ``"devices"`` the workers on
several GPUs that measured it. Each result may carry ``"gpu"``: the GPU that measured it and its
state at that moment.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gemmzoo.errors import GemmError
from gemmzoo.measure import Measurement, Timing
from gemmzoo.problems.grids import GridPoint
from gemmzoo.results.schema import (
    RESULT_FIELDS,
    FieldError,
    ResultFileError,
    check_document,
    check_result,
    describe,
    free,
    parse_document,
    shown,
)
from gemmzoo.scale.bench import OK, BenchResult

_KNOWN = {"backend", "device", "point", "m", "n", "k", "dtype", "layout", "accuracy", "status", "median_s",
          "q1_s", "q3_s", "samples", "method", "tflops", "peak_tflops", "peak_percent", "error_ratio",
          "rel_error", "detail"}


#: A file that is not a gemmzoo result file, or parts that do not belong together.
RunFileError = ResultFileError


@dataclass
class Run:
    """One result file: its results and what it says about where and how they were measured.

    ``extras[i]`` holds the keys of ``results[i]`` that :class:`BenchResult` has no field for
    (``gpu``, for example), so merging and rewriting keep them."""

    path: str
    created: str | None
    command: str | None
    environment: dict[str, Any]
    results: list[BenchResult]
    extras: list[dict[str, Any]] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)


def _float(value: Any) -> float:
    return float("nan") if value is None else float(value)


def result_from_dict(record: dict[str, Any]) -> BenchResult:
    """The :class:`BenchResult` that ``BenchResult.as_dict`` wrote (``null`` read back as NaN); a
    result of a problem class beyond gemm is the backend's name followed by ``[problem]``, so
    that runs side by side pair it only with the same problem.
    ``record`` must have passed :func:`gemmzoo.results.schema.check_result`."""
    point = GridPoint(int(record["m"]), int(record["n"]), int(record["k"]), record["dtype"],
                      record.get("layout") or "NN")
    backend = record["backend"]
    if record.get("class") not in (None, "gemm"):  # a class problem: its rows never meet a gemm point's
        backend = f"{backend} [{record.get('problem')}]"
    measurement = None
    if record.get("median_s") is not None:
        median = float(record["median_s"])
        q1, q3 = record.get("q1_s"), record.get("q3_s")
        timing = Timing(median, median if q1 is None else float(q1), median if q3 is None else float(q3),
                        int(record.get("samples") or 0), str(record.get("method") or ""))
        host = None
        if isinstance(record.get("host_s"), (int, float)) and record["host_s"] > 0:  # caller time = max(both)
            low, high = record.get("host_q1_s"), record.get("host_q3_s")
            host_median = float(record["host_s"])
            host = Timing(host_median, host_median if low is None else float(low),
                          host_median if high is None else float(high), int(record.get("samples") or 0),
                          str(record.get("method") or ""))
        measurement = Measurement(backend, point, timing, _float(record.get("error_ratio")),
                                  _float(record.get("rel_error")), host=host)
    return BenchResult(backend, record.get("device") or "cpu", point, record["status"], measurement,
                       record.get("detail") or "", record.get("peak_tflops"),
                       accuracy=record.get("accuracy") or "componentwise")


def load_run(path: str | Path) -> Run:
    """Read one result file, checked whole first (:mod:`gemmzoo.results.schema`); raises
    :class:`RunFileError` naming the file, the entry and the field when it is not one."""
    data = parse_document(path)
    if isinstance(data, dict) and "benchmarks" in data and "results" not in data:
        return _from_pytest_benchmark(data, str(path))
    return _run_of(data, path)


def run_from_text(text: str, name: str) -> Run:
    """A result document held in memory (the JSON text :func:`gemmzoo.results.report.json_document`
    makes), checked as a file would be; ``name`` stands for its path in messages."""
    import json

    return _run_of(json.loads(text), name)


def _run_of(data: Any, path: str | Path) -> Run:
    data = check_document(data, path)
    results, extras = [], []
    for number, record in enumerate(data["results"]):
        try:
            results.append(result_from_dict(record))
        except (GemmError, KeyError, TypeError, ValueError) as error:
            raise RunFileError(f"{path}: {describe(number, record)}: {error}") from None
        extras.append({key: value for key, value in record.items() if key not in _KNOWN})
    meta = {key: data[key] for key in ("shard", "devices", "settings", "executor") if key in data}
    return Run(str(path), data.get("created"), data.get("command"), data.get("environment") or {}, results,
               extras, meta)


def merge_runs(runs: Sequence[Run]) -> tuple[Run, list[str]]:
    """The parts of one sweep as one run, and the notes worth telling the user (a missing part).

    Parts of a ``--shard`` split must come from the same grid (its digest) and number of parts,
    and each part may appear once. A backend measured on the same point by two files is an
    error: the parts were meant to be disjoint. Environments are combined per device kind.
    """
    if not runs:
        raise RunFileError("nothing to merge")
    notes: list[str] = []
    shards = [run.meta.get("shard") for run in runs]
    if any(shards):
        if not all(shards):
            plain = [run.path for run, shard in zip(runs, shards, strict=True) if not shard]
            raise RunFileError(f"cannot merge shards with whole runs: {', '.join(plain)} "
                               "hold no --shard part")
        grids = {(s["grid"], s["count"]) for s in shards}  # type: ignore[index]
        if len(grids) > 1:
            raise RunFileError("these parts come from different grids or splits: "
                               + ", ".join(f"{run.path} ({s['index']}/{s['count']}, grid {s['grid']})"
                                           for run, s in zip(runs, shards, strict=True)))  # type: ignore[index]
        seen: dict[int, str] = {}
        for run, shard in zip(runs, shards, strict=True):
            index = shard["index"]  # type: ignore[index]
            if index in seen:
                raise RunFileError(f"part {index} appears twice: {seen[index]} and {run.path}")
            seen[index] = run.path
        ((_grid, count),) = grids
        missing = [i for i in range(1, count + 1) if i not in seen]
        if missing:
            notes.append(f"parts {_ranges(missing)} of {count} are missing: the merged result covers "
                         "part of the grid only")
    owner: dict[tuple[GridPoint, str], str] = {}
    results: list[BenchResult] = []
    extras: list[dict[str, Any]] = []
    environment: dict[str, Any] = {}
    for run in runs:
        for result, extra in zip(run.results, run.extras, strict=True):
            key = (result.point, result.backend)
            if key in owner:
                raise RunFileError(f"{result.backend} on {result.point.id} is in both {owner[key]} "
                                   f"and {run.path}")
            owner[key] = run.path
            results.append(result)
            extras.append(extra)
        for device, info in run.environment.items():
            environment.setdefault(device, info)
    meta: dict[str, Any] = {"merged_from": [run.path for run in runs]}
    settings = [run.meta.get("settings") for run in runs]
    if settings[0] is not None and all(one == settings[0] for one in settings):
        meta["settings"] = settings[0]  # parts measured alike; otherwise each result says its own
    devices = [d for run in runs for d in run.meta.get("devices", [])]
    if devices:
        meta["devices"] = devices
    order = {point: i for i, point in enumerate(sorted({r.point for r in results}, key=_point_key))}
    paired = sorted(zip(results, extras, strict=True), key=lambda pair: order[pair[0].point])
    merged = Run("merged", None, None, environment, [r for r, _ in paired], [e for _, e in paired], meta)
    return merged, notes


def _ranges(numbers: Sequence[int], most: int = 8) -> str:
    """``1-3, 7, 9-12`` for sorted ``numbers``; at most ``most`` runs, then how many more."""
    runs: list[list[int]] = []
    for number in numbers:
        if runs and number == runs[-1][1] + 1:
            runs[-1][1] = number
        else:
            runs.append([number, number])
    texts = [f"{a}-{b}" if b > a else str(a) for a, b in runs]
    return ", ".join(texts[:most]) + (f" and {len(texts) - most} more" if len(texts) > most else "")


def _point_key(point: GridPoint) -> tuple[Any, ...]:
    return (point.flops, point.shape, point.dtype, point.layout)


def ok_results(run: Run) -> list[BenchResult]:
    """The timed, conforming results of ``run``."""
    return [r for r in run.results if r.status == OK and r.measurement is not None]


def _from_pytest_benchmark(data: dict[str, Any], path: str) -> Run:
    """A pytest-benchmark ``--benchmark-json`` file of :mod:`gemmzoo.benchmarks` as a run (other
    benchmarks in it, without gemmzoo's ``extra_info``, are left out); checked like a result file."""
    try:
        free(dict)(data)
    except FieldError as error:
        raise RunFileError(f"{path}: {error.message}") from None
    benchmarks = data["benchmarks"]
    if not isinstance(benchmarks, list):
        raise RunFileError(f"{path}: field 'benchmarks': must be a list")
    created = data.get("datetime")
    results, extras = [], []
    environment: dict[str, Any] = {}
    for number, bench in enumerate(benchmarks):
        name = bench.get("name") if isinstance(bench, dict) else None
        where = f"benchmark {number}" + (f" ({shown(name)})" if isinstance(name, str) else "")
        if not isinstance(bench, dict):
            raise RunFileError(f"{path}: {where}: must be an object")
        info, stats = bench.get("extra_info") or {}, bench.get("stats") or {}
        if not isinstance(info, dict) or not isinstance(stats, dict):
            raise RunFileError(f"{path}: {where}: 'extra_info' and 'stats' must be objects")
        if not {"backend", "m", "n", "k", "dtype", "layout"} <= set(info) or "median" not in stats:
            continue
        record = {key: value for key, value in info.items() if key in RESULT_FIELDS}
        record.update(status=OK, median_s=stats["median"], q1_s=stats.get("q1"), q3_s=stats.get("q3"),
                      samples=stats.get("rounds"), method=info.get("timing"))
        try:
            check_result(record)
            results.append(result_from_dict(record))
        except FieldError as error:
            raise RunFileError(f"{path}: {where}{''.join(f' {w}' for w in error.where)}: {error.message}") \
                from None
        except (GemmError, KeyError, TypeError, ValueError) as error:
            raise RunFileError(f"{path}: {where}: {error}") from None
        extras.append({"gpu": info["gpu"]} if isinstance(info.get("gpu"), dict) else {})
        environment.setdefault(results[-1].device, {
            key: info.get(key) for key in ("device_name", "driver", "cuda_driver", "libraries")})
    if not results:
        raise RunFileError(f"{path}: a pytest-benchmark file without gemmzoo GEMM benchmarks")
    return Run(path, created if isinstance(created, str) else None, None, environment, results, extras)
