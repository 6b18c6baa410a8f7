"""On a GPU: the timing engine against ``triton.testing.do_bench``, and ``best_backend`` against
fresh caller times.

As tests (``gpu`` marker) a few shapes are checked. As a script,
``python tests/test_gpu_timing.py OUT_DIR [--quick | I:J[,I:J] | --shape=MxNxK ...] [--skip-best]
[--skip-tables] [--seconds=S] [--rounds=R]``
runs the whole check recorded in docs/results/2026-11-23-timing-engine.md: every GPU backend,
float16 and bfloat16, on the shapes of :data:`OFF_GRID` (in none of the named grids; ``I:J``
slices take some of them; ``--shape=MxNxK``, repeatable, times those instead), backend by
backend timed by do_bench, ``gemmzoo bench``'s engine,
pytest-benchmark (the benchmarks, run in this process) and do_bench again (``--rounds=R``: R
rounds of the first three, then do_bench, medians compared); ``best_backend`` at
128³ and 512³ float16 against every candidate's caller time measured afresh in interleaved
rounds; and two ``gemmzoo bench`` tables. It writes JSON under OUT_DIR and prints a summary.
"""

from __future__ import annotations

import functools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest
from sessions import restart

#: Shapes in none of the named grids: squares above 4096, projections of other LLMs (Qwen2-7B,
#: Gemma-7B, Phi-3-mini, Mixtral's experts), misaligned sizes, skinny and tall-thin problems.
OFF_GRID: tuple[tuple[int, int, int], ...] = (
    (4608, 4608, 4608), (5120, 5120, 5120),
    (64, 18944, 3584), (256, 3584, 18944), (32, 24576, 3072), (512, 8192, 3072), (2048, 3072, 8192),
    (3000, 3000, 3000), (2047, 4093, 1021), (1531, 2999, 777),
    (8, 8192, 8192), (16384, 128, 1024), (4096, 64, 4096),
)
DTYPES = ("float16", "bfloat16")
AGREEMENT = 0.05  # medians within 5% of do_bench's
#: Idle seconds before each timer of a row: each starts from a GPU at rest, as the first does,
#: instead of from the heat the timer before it left (a large GEMM's clock sinks as it runs).
REST_S = 0.2
#: triton-naive (a baseline kernel without tl.dot) is checked up to this size: beyond it a call
#: takes several milliseconds and the whole check would take many minutes.
NAIVE_FLOPS = 2e10
CALLER_SLACK = 0.03  # best_backend's pick within 3% of the fastest caller time
REPO = Path(__file__).resolve().parent.parent


def _cuda_backends(dtype: str, selectable_only: bool = False) -> list[Any]:
    """The available CUDA backends of ``dtype`` (narrowed by ``GEMMZOO_BACKENDS``)."""
    from gemmzoo.session import current

    return [b for b in current().select()
            if b.device == "cuda" and dtype in b.dtypes and b.unavailable_reason() is None
            and (getattr(b, "selectable", True) or not selectable_only)]


def _timed_call(backend: Any, point: Any) -> Any:
    """The call the engine and pytest-benchmark time: the backend's plan on ``point``'s operands."""
    from gemmzoo.measure import make_problem, planned

    problem = make_problem(backend, point)
    a, b = problem.a, problem.b
    run = planned(backend, a, b)
    return lambda: run(a, b)


def _do_bench_s(backend: Any, point: Any, budget_s: float) -> float:
    from gemmzoo.measure import do_bench_timing

    return do_bench_timing(_timed_call(backend, point), budget_s).median_s


def _graph_do_bench_s(backend: Any, point: Any, budget_s: float) -> float | None:
    """do_bench of the call replayed as a CUDA graph: one launch per replay, so the host cannot
    fall behind the GPU between do_bench's events; ``None`` when the call cannot be captured
    (CuPy launches on its own stream)."""
    from gemmzoo.errors import GemmError
    from gemmzoo.measure import do_bench_timing, graph_call

    try:
        replay = graph_call(_timed_call(backend, point))
    except GemmError:
        return None
    return do_bench_timing(replay, budget_s).median_s


def engine_rows(points: list[Any], budget_s: float, verify_limit: int = 2**28,
                sink: Path | None = None, deadline: float = float("inf"),
                pytest_out: Path | None = None, rounds: int = 1) -> list[dict[str, Any]]:
    """For each point and GPU backend, ``rounds`` rounds of: do_bench, the bench engine,
    pytest-benchmark (in this process, when ``pytest_out`` is given); then do_bench once more.
    Each timer's median over the rounds is compared with the median of the do_bench reads (with
    one round, the mean of the two around it). The timers of one backend run within about a
    second a round: the GPU's clock under its power cap moves by more than 5% over longer spans,
    and a timer compared with a reference taken elsewhere in time would measure that drift; the
    rounds interleave the timers, so that such drift reaches each of them alike.

    Each timer starts after :data:`REST_S` of idle GPU. Where the engine finds the call
    launch-bound (host time above device time), do_bench's events hold the GPU's wait for the
    host, and the device time is compared with do_bench of the call replayed as a CUDA graph
    instead (``reference`` says which); the caller time is compared with plain do_bench there
    (``caller_ratio``)."""
    from gemmzoo.measure import measure, stream_ordered

    rows = []
    for point in points:
        if time.perf_counter() > deadline:
            print(f"out of time: {point.id} and later points not timed", flush=True)
            break
        for backend in _cuda_backends(point.dtype):
            row: dict[str, Any] = {"point": point.id, "backend": backend.name}
            if backend.name == "triton-naive" and point.flops > NAIVE_FLOPS:
                continue
            if not stream_ordered(backend):  # do_bench's events on torch's stream do not see its work
                continue
            try:
                do_bench_reads, results, pytest_reads = [], [], []
                for number in range(rounds):
                    do_bench_reads.append(_do_bench_s(backend, point, budget_s))
                    verify = number == 0 and point.m * point.n * point.k <= verify_limit
                    time.sleep(REST_S)
                    results.append(measure(backend, point, budget_s=budget_s, verify=verify))
                    time.sleep(REST_S)
                    if pytest_out is not None:
                        pytest_reads.append(pytest_median(point, backend.name, pytest_out))
                        time.sleep(REST_S)
                do_bench_reads.append(_do_bench_s(backend, point, budget_s))
                result = results[0]
                graph_s = None
                if result.launch_bound:
                    time.sleep(REST_S)
                    graph_s = _graph_do_bench_s(backend, point, budget_s)
            except Exception as error:  # one failing backend must not end the check
                row["error"] = f"{type(error).__name__}: {error}"
                rows.append(row)
                continue
            do_bench_s = statistics.median(do_bench_reads)
            bench_s = statistics.median(r.timing.median_s for r in results)
            reference = graph_s or do_bench_s
            row.update(do_bench_s=do_bench_s, do_bench_reads=do_bench_reads,
                       do_bench_drift=(max(do_bench_reads) - min(do_bench_reads)) / do_bench_s,
                       graph_s=graph_s, reference="do_bench of a CUDA graph" if graph_s else "do_bench",
                       bench_s=bench_s, bench_reads=[r.timing.median_s for r in results],
                       bench_iqr_s=result.timing.spread_s,
                       host_s=result.host_s, caller_s=result.caller_s, method=result.timing.method,
                       launch_bound=result.launch_bound, caller_ratio=result.caller_s / do_bench_s,
                       bench_ratio=bench_s / reference, rounds=rounds)
            found = [t for t in pytest_reads if t is not None]
            if pytest_out is not None and len(found) == len(pytest_reads):
                pytest_s = statistics.median(found)
                row.update(pytest_s=pytest_s, pytest_reads=found, pytest_ratio=pytest_s / reference)
            rows.append(row)
            if sink is not None:
                sink.write_text(json.dumps(rows, indent=1))
            graph = f"  graph {graph_s * 1e6:9.1f} us  caller {row['caller_ratio']:.3f}" if graph_s else ""
            print(f"{point.id:28} {backend.name:15} do_bench {do_bench_s * 1e6:9.1f} us  bench "
                  f"{bench_s * 1e6:9.1f} us ({row['bench_ratio']:.3f})  pytest "
                  f"{row.get('pytest_ratio', float('nan')):.3f}  host {result.host_s * 1e6:7.1f} us"
                  f"  do_bench drift {row['do_bench_drift']:.3f}{graph}", flush=True)
    return rows


def pytest_median(point: Any, backend: str, out: Path, max_time_s: float = 0.05) -> float | None:
    """pytest-benchmark's median seconds for one backend on one point: the benchmarks
    (``pytest --pyargs gemmzoo.benchmarks``) run in this process, so that it is timed right beside
    the other timers; ``None`` if it did not run."""
    report = out / f"pytest-{point.id}-{backend}.json"
    pytest.main(["--pyargs", "gemmzoo.benchmarks", "-q", "-p", "no:cacheprovider", "--benchmark-only",
                 "-n", "0", f"--benchmark-max-time={max_time_s}", f"--benchmark-json={report}",
                 "--gemmzoo-shape", point.id, "--gemmzoo-backend", backend])
    if not report.exists():
        return None
    found = json.loads(report.read_text())["benchmarks"]
    return found[0]["stats"]["median"] if len(found) == 1 else None


def caller_loop_times(backends: list[Any], point: Any, rounds: int = 7,
                      calls: int = 1000) -> dict[str, float]:
    """Each backend's caller time on ``point``, measured as a program gets it: its plan called
    ``calls`` times in a loop, then one synchronisation, divided by ``calls``; ``rounds`` rounds
    taking the backends in turn, the median kept."""
    from gemmzoo.measure import loop_per_call_s, make_problem, planned

    loops = []
    for backend in backends:
        problem = make_problem(backend, point)
        run, a, b = planned(backend, problem.a, problem.b), problem.a, problem.b
        for _ in range(20):
            run(a, b)
        loops.append((backend, run, a, b))
    times: dict[str, list[float]] = {backend.name: [] for backend in backends}
    for number in range(rounds):
        for backend, run, a, b in (loops if number % 2 == 0 else loops[::-1]):
            call = functools.partial(run, a, b)
            times[backend.name].append(loop_per_call_s(call, calls, backend.synchronize))
    return {name: statistics.median(values) for name, values in times.items()}


def best_backend_rows(shapes: list[tuple[int, int, int]], rounds: int = 7) -> list[dict[str, Any]]:
    """``best_backend``'s pick (measured now, in a fresh database) against every candidate's caller
    time measured afresh (:func:`caller_loop_times`)."""
    from gemmzoo.problems.grids import GridPoint
    from gemmzoo.tuning import explain

    rows = []
    with tempfile.TemporaryDirectory() as cache:
        old = os.environ.get("GEMMZOO_CACHE_DIR")
        os.environ["GEMMZOO_CACHE_DIR"] = cache
        restart()
        try:
            for shape in shapes:
                started = time.perf_counter()
                choice = explain(shape, "float16", "cuda")
                decided_s = time.perf_counter() - started
                point = GridPoint(*shape, "float16")
                candidates = _cuda_backends("float16", selectable_only=True)
                caller = caller_loop_times(candidates, point, rounds)
                fastest = min(caller, key=caller.__getitem__)
                picked = choice.backend.name
                rows.append({
                    "shape": list(shape), "picked": picked, "source": choice.source,
                    "decided_s": decided_s,
                    "ranking": [[t.backend, t.median_s, t.bound] for t in choice.ranking],
                    "fresh_caller_s": caller, "fastest": fastest, "ratio": caller[picked] / caller[fastest],
                })
                print(f"best_backend {shape}: picked {picked} ({caller[picked] * 1e6:.1f} us caller), "
                      f"fastest {fastest} ({caller[fastest] * 1e6:.1f} us): "
                      f"{caller[picked] / caller[fastest]:.3f}", flush=True)
        finally:
            if old is None:
                os.environ.pop("GEMMZOO_CACHE_DIR", None)
            else:
                os.environ["GEMMZOO_CACHE_DIR"] = old
            restart()
    return rows


def hold_rows(pause_s: float = 0.02) -> list[dict[str, Any]]:
    """For each hold kernel that builds here: events queued behind a hold with the host paused
    between them must not have run before the release, and must then run back to back."""
    from gemmzoo.measure.gpu_stream import CudaGpu

    rows = []
    for name in ("cupy", "triton"):
        try:
            gpu = CudaGpu(holder=name)
        except Exception as error:
            rows.append({"holder": name, "error": f"{type(error).__name__}: {error}"})
            continue
        start, end = gpu.pair()
        hold = gpu.hold()
        start.record()
        time.sleep(pause_s)
        end.record()
        waiting = not start.query()
        hold.release()
        gpu.synchronize()
        rows.append({"holder": name, "held": waiting, "expired": hold.expired,
                     "gap_s": gpu.elapsed_s(start, end)})
    return rows


# The tests (gpu marker: skipped without a CUDA GPU) ---------------------------------------------


@pytest.mark.gpu
def test_the_stream_hold_keeps_host_pauses_out_of_device_time():
    rows = [row for row in hold_rows() if "error" not in row]
    assert rows, hold_rows()
    for row in rows:
        assert row["held"] and not row["expired"] and row["gap_s"] < 1e-3, row


@pytest.mark.gpu
def test_a_graph_of_a_call_on_another_stream_is_refused():
    import gemmzoo
    from gemmzoo.errors import GemmError
    from gemmzoo.measure import graph_call, make_problem, planned, time_calls
    from gemmzoo.problems.grids import GridPoint

    cupy = gemmzoo.get_backend("cupy")
    if cupy.unavailable_reason() is not None:
        pytest.skip(cupy.unavailable_reason())
    problem = make_problem(cupy, GridPoint(256, 128, 64, "float16"))
    run = planned(cupy, problem.a, problem.b)
    with pytest.raises(GemmError, match=r"empty|not a torch tensor"):
        graph_call(lambda: run(problem.a, problem.b))
    with pytest.raises(GemmError, match=r"empty|not a torch tensor"):
        time_calls(problem, 0.01, timer="graph")
    torch_problem = make_problem(gemmzoo.get_backend("torch"), GridPoint(256, 128, 64, "float16"))
    assert time_calls(torch_problem, 0.01, timer="graph")[0].median_s > 1e-6


@pytest.mark.gpu
def test_engine_agrees_with_do_bench_off_the_grids():
    from gemmzoo.problems.grids import GridPoint

    points = [GridPoint(*shape, "float16") for shape in ((3000, 3000, 3000), (2047, 4093, 1021))]
    for row in engine_rows(points, budget_s=0.1):
        assert "error" not in row, row
        assert abs(row["bench_ratio"] - 1) <= AGREEMENT, row


@pytest.mark.gpu
def test_best_backend_picks_within_3_percent_of_the_fastest_caller_time():
    for row in best_backend_rows([(128, 128, 128)]):
        assert row["ratio"] <= 1 + CALLER_SLACK, row


def test_the_off_grid_shapes_are_in_no_named_grid():
    from gemmzoo.problems.grids import grids

    named = {shape for grid in grids().values() for shape in grid.shapes}
    assert len(OFF_GRID) >= 12 and not named & set(OFF_GRID)


def main(argv: list[str]) -> int:
    from gemmzoo.measure.device import device_info
    from gemmzoo.measure.gpu_stream import default_gpu
    from gemmzoo.problems.grids import GridPoint, parse_point

    os.environ.setdefault("TRITON_CACHE_AUTOTUNING", "1")  # the pytest run reuses the autotuning
    started = time.perf_counter()
    seconds = float(next((a.split("=")[1] for a in argv if a.startswith("--seconds=")), "1e9"))
    deadline = started + seconds
    rounds = int(next((a.split("=")[1] for a in argv if a.startswith("--rounds=")), "1"))
    out = Path(argv[0])
    out.mkdir(parents=True, exist_ok=True)
    quick = "--quick" in argv
    slices = next((a for a in argv if ":" in a and not a.startswith("--")), "0:99").split(",")
    picked = [shape for part in slices
              for shape in OFF_GRID[slice(*(int(x) for x in part.split(":")))]]
    given = [parse_point(a.split("=", 1)[1])[0] for a in argv if a.startswith("--shape=")]
    picked = given or picked
    info = device_info("cuda")
    print(f"device {info['device_name']}, driver {info['driver']} (CUDA {info['cuda_driver']}), "
          f"{info['libraries']}; stream hold from {default_gpu().holder_name}", flush=True)
    holds = hold_rows()
    print("holds:", holds, flush=True)
    (out / "holds.json").write_text(json.dumps(holds, indent=1))
    best = [] if "--skip-best" in argv else best_backend_rows([(128, 128, 128), (512, 512, 512)])
    for row in best:
        print(f"best_backend {row['shape']}: {row['picked']} vs fastest {row['fastest']}: {row['ratio']:.3f}",
              flush=True)
    (out / "best_backend.json").write_text(json.dumps(best, indent=1))
    tables = [] if "--skip-tables" in argv else [("bench_table.txt", [])]
    for name, extra in tables:
        command = [sys.executable, "-m", "gemmzoo", "bench", "--shape", "128x128x128",
                   "--shape", "512x512x512", "--dtype", "float16", "--budget", "0.1",
                   "--rounds", "2", "--json", str(out / name.replace(".txt", ".json")), *extra]
        table = subprocess.run(command, capture_output=True, text=True, cwd=REPO)
        (out / name).write_text(table.stdout + table.stderr[-5000:])
        print(table.stdout, flush=True)
    shapes = OFF_GRID[:4] if quick else picked
    points = [GridPoint(*shape, dtype) for shape in shapes for dtype in DTYPES]
    rows: list[dict[str, Any]] = []
    pytest_out = out / "pytest"
    pytest_out.mkdir(exist_ok=True)
    for start in range(0, len(points), len(DTYPES)):
        chunk = points[start:start + len(DTYPES)]
        left = deadline - time.perf_counter()
        if left < 30:
            print(f"out of time: {chunk[0].id} and later points not timed", flush=True)
            break
        rows += engine_rows(chunk, budget_s=0.05, verify_limit=0, deadline=deadline - 20,
                            pytest_out=pytest_out, rounds=rounds)
        (out / "engine_rows.json").write_text(json.dumps(rows, indent=1))
    (out / "agreement.json").write_text(json.dumps({"environment": info, "rows": rows}, indent=1))
    ratios = [(r["point"], r["backend"], r.get("bench_ratio"), r.get("pytest_ratio")) for r in rows]
    misses = [r for r in ratios if any(x is None or abs(x - 1) > AGREEMENT for x in r[2:])]
    print(f"\n{len(rows)} backend x point; bench ratio median "
          f"{statistics.median([r[2] for r in ratios if r[2]] or [float('nan')]):.3f}, pytest ratio median "
          f"{statistics.median([r[3] for r in ratios if r[3]] or [float('nan')]):.3f}; "
          f"outside {AGREEMENT:.0%} (or missing): {len(misses)}")
    for miss in misses:
        print("  MISS", miss)
    for row in best:
        print(f"best_backend {row['shape']}: {row['picked']} vs fastest {row['fastest']}: {row['ratio']:.3f}")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(REPO / "tests"))
    sys.exit(main(sys.argv[1:]))
