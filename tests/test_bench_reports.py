"""gemmzoo bench and its report writers, with real runs of numpy and torch-cpu on the smoke grid."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest

import gemmzoo
from gemmzoo.cli import main
from gemmzoo.problems.grids import GridPoint, get_grid
from gemmzoo.results.report import (
    plain_table,
    results_table,
    summaries,
    summary_lines,
    verdicts,
    winner,
    write_csv,
    write_json,
    write_plot,
)
from gemmzoo.scale.bench import OK, UNSUPPORTED, WRONG, BenchResult, bench_one, run_bench


class _WrongNumpy(gemmzoo.Backend):
    """Fast and wrong: drops the last term of the K sum."""

    name, device, dtypes = "wrong-numpy", "cpu", frozenset({"float32"})

    def from_numpy(self, x, dtype):
        self.check_dtype(dtype, np.shape(x))
        return np.array(x, dtype=np.float32)

    def to_numpy(self, y):
        return np.array(y, copy=True)

    def matmul(self, a, b):
        self.check_operands(a, b)
        return a[:, :-1] @ b[:-1, :]


def _available(*names):
    found = [gemmzoo.get_backend(n) for n in names]
    return [b for b in found if b.unavailable_reason() is None]


@pytest.fixture(scope="module")
def smoke_results():
    backends = [*_available("numpy", "torch-cpu"), _WrongNumpy()]
    points = [*get_grid("smoke", dtypes=["float32"]), GridPoint(8, 8, 8, "bfloat16", "TN")]
    heard = []
    results = run_bench(backends, points, budget_s=0.005, on_result=heard.append)
    assert heard == results
    return results


def test_statuses(smoke_results):
    by = {(r.backend, r.point.id): r for r in smoke_results}
    for point in get_grid("smoke", dtypes=["float32"]):
        numpy_result = by[("numpy", point.id)]
        assert numpy_result.status == OK and numpy_result.tflops > 0
        assert 0 <= numpy_result.measurement.error_ratio <= 1
        assert numpy_result.measurement.timing.samples >= 3
        assert by[("wrong-numpy", point.id)].status == WRONG
        assert by[("wrong-numpy", point.id)].tflops is None
    assert by[("numpy", "8x8x8-bfloat16-TN")].status == UNSUPPORTED


def test_a_crashing_backend_is_an_error_not_a_crash():
    class Crashing(_WrongNumpy):
        name = "crashing"

        def matmul(self, a, b):
            raise RuntimeError("kernel launch failed")

    result = bench_one(Crashing(), GridPoint(4, 4, 4))
    assert result.status == "error" and "kernel launch failed" in result.detail


def test_table_marks_wrong_and_winner(smoke_results):
    from rich.console import Console

    console = Console(record=True, width=250)
    console.print(results_table(smoke_results, baseline="numpy"))
    text = console.export_text()
    assert "over the baseline ('base': numpy)" in text
    for point in get_grid("smoke", dtypes=["float32"]):
        row = {r.backend: r for r in smoke_results if r.point == point}
        lines = [line for line in text.splitlines() if line.startswith(f"{point.m}x{point.n}x{point.k} ")]
        assert len(lines) == 3
        numpy_fields = next(line for line in lines if " numpy " in line).split()
        mark = verdicts(row).get("numpy")  # best or tie here, unless a loaded machine made it noisy
        if mark:
            assert numpy_fields[-2:] == ["base", mark]
        else:
            assert numpy_fields[-1] == "base"
        wrong = next(line for line in lines if "wrong-numpy" in line)
        assert "WRONG" in wrong and "best" not in wrong and "tie" not in wrong
        marks = verdicts(row)
        assert marks and "wrong-numpy" not in marks
        for name, verdict in marks.items():
            assert verdict in next(line for line in lines if f" {name}" in line)
        best = winner(row)
        assert best.backend in marks


def _ok(name, point, device_s, host_s, spread=0.0):
    from gemmzoo.measure import Measurement, Timing

    device = Timing(device_s, device_s - spread / 2, device_s + spread / 2, 10, "test")
    host = Timing(host_s, host_s, host_s, 5, "test")
    return BenchResult(name, "cuda", point, OK, Measurement(name, point, device, 0.5, 1e-7, host))


def test_ties_launch_bound_rows_and_the_caller_time_ranking():
    point, other = GridPoint(128, 128, 128, "float16"), GridPoint(512, 512, 512, "float16")
    results = [
        _ok("torch", point, 6.2e-6, 17e-6), _ok("triton-grouped", point, 5.6e-6, 73e-6),  # launch-bound
        _ok("torch", other, 20e-6, 17e-6, spread=2e-6), _ok("cupy", other, 20.5e-6, 15e-6, spread=2e-6),
    ]
    assert verdicts({r.backend: r for r in results[:2]}) == {"torch": "best"}  # 17 us beats 73 us
    assert verdicts({r.backend: r for r in results[2:]}) == {"torch": "tie", "cupy": "tie"}
    lines = plain_table(results).splitlines()
    assert lines[0].split()[:4] == ["MxNxK", "dtype", "layout", "backend"]
    grouped = next(line for line in lines if "triton-grouped" in line)
    assert "launch" in grouped and "73" in grouped and "5.6" in grouped
    assert all(len(line.split()) >= 10 for line in lines[1:])
    [torch, grouped_summary] = [s for s in summaries(results, "torch") if s.backend != "cupy"]
    assert torch.geomean_speedup == pytest.approx(1.0) and torch.fast_p == 1.0 and torch.points == 2
    assert grouped_summary.geomean_speedup == pytest.approx(17 / 73) and grouped_summary.fast_p == 0.0
    assert grouped_summary.points == 1
    cupy = next(s for s in summaries(results, "torch") if s.backend == "cupy")
    assert cupy.geomean_speedup == pytest.approx(20 / 20.5) and cupy.fast_p == 0.0
    assert any(line.startswith("triton-grouped: geomean x0.233") for line in summary_lines(results, "torch"))


def test_json_and_csv(tmp_path, smoke_results):
    write_json(smoke_results, tmp_path / "r.json", {"cpu": {"device_name": "x"}}, "gemmzoo bench")
    data = json.loads((tmp_path / "r.json").read_text())
    assert data["command"] == "gemmzoo bench" and data["environment"]["cpu"]["device_name"] == "x"
    assert len(data["results"]) == len(smoke_results)
    for record, result in zip(data["results"], smoke_results, strict=True):
        assert record["backend"] == result.backend and record["point"] == result.point.id
        assert record["status"] == result.status
        if result.status == OK:
            assert record["tflops"] == pytest.approx(result.point.flops / record["median_s"] / 1e12)
            assert record["caller_s"] == max(record["median_s"], record["host_s"])
            # every verdict a row can get from measured times (undecided: a noisy row measured faster)
            assert record["verdict"] in ("best", "tie", "noisy", "undecided", "")
        else:
            assert record["tflops"] is None and record["median_s"] is None
    write_csv(smoke_results, tmp_path / "r.csv")
    with open(tmp_path / "r.csv") as handle:
        rows = list(csv.DictReader(handle))
    assert [(r["backend"], r["point"], r["status"]) for r in rows] == [
        (r.backend, r.point.id, r.status) for r in smoke_results
    ]
    assert all(float(r["tflops"]) > 0 and float(r["caller_s"]) > 0 for r in rows if r["status"] == OK)
    assert {s["backend"] for s in data["summary"]} == {r.backend for r in smoke_results}
    assert all(r["tflops"] == "" for r in rows if r["status"] != OK)


def test_plot_is_a_png(tmp_path, smoke_results):
    path = tmp_path / "plot.png"
    write_plot(smoke_results, path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 10_000


def test_bench_command_end_to_end(tmp_path, capsys):
    args = ["bench", "--grid", "smoke", "--shape", "40x24x56", "--backend", "numpy", "--budget", "0.005",
            "--json", str(tmp_path / "b.json"), "--csv", str(tmp_path / "b.csv"),
            "--plot", str(tmp_path / "b.png")]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "gemmzoo bench" in out and "40x24x56" in out
    data = json.loads((tmp_path / "b.json").read_text())
    assert {r["point"] for r in data["results"]} == {p.id for p in get_grid("smoke", ["float32"])} | {
        "40x24x56-float32-NN"}
    assert all(r["status"] == OK for r in data["results"])
    assert data["environment"]["cpu"]["libraries"]["numpy"] == np.__version__
    assert (tmp_path / "b.png").stat().st_size > 0 and (tmp_path / "b.csv").stat().st_size > 0


def test_bench_command_errors(capsys):
    assert main(["bench", "--shape", "1x2"]) == 2
    assert "MxNxK" in capsys.readouterr().err
    assert main(["bench", "--backend", "no-such-backend"]) == 2
    assert "no-such-backend" in capsys.readouterr().err
    assert main(["bench", "--backend", "numpy", "--baseline", "torch-cpu", "--grid", "smoke"]) == 2
    assert main(["bench", "--list-grids"]) == 0
    assert "llm" in capsys.readouterr().out


def test_rounds_interleave_and_merge_and_check_once(monkeypatch):
    import gemmzoo.scale.bench as bench_module

    calls = []
    real = bench_module.measure

    def spy(backend, point, **kwargs):
        calls.append((backend.name, point.id, kwargs["verify"]))
        return real(backend, point, **kwargs)

    monkeypatch.setattr(bench_module, "measure", spy)
    backends = _available("numpy", "torch-cpu")
    points = [GridPoint(16, 8, 24), GridPoint(9, 7, 5)]
    single = run_bench(backends, points, budget_s=0.004)
    calls.clear()
    merged = run_bench(backends, points, budget_s=0.006, rounds=3)
    assert len(calls) == 3 * len(backends) * len(points)
    assert [verify for *_, verify in calls] == [True] * 4 + [False] * 8  # checked in the first round only
    first_round = [name for name, *_ in calls[:2]]
    second_round = [name for name, *_ in calls[4:6]]
    assert first_round == [b.name for b in backends] and second_round == first_round[::-1]  # rotated
    for result in merged:
        assert result.status == OK and 0 <= result.measurement.error_ratio <= 1
        assert result.measurement.timing.samples >= 9  # three rounds of at least three samples
    assert [(r.backend, r.point) for r in merged] == [(r.backend, r.point) for r in single]


def test_bench_output_keeps_every_column_without_a_terminal(capsys):
    args = ["bench", "--shape", "24x16x8", "--backend", "numpy", "--budget", "0.005"]
    assert main(args) == 0
    out = capsys.readouterr().out
    header = next(line for line in out.splitlines() if "MxNxK" in line)
    for column in ("dtype", "layout", "caller us", "TFLOPS", "GB/s", "x base", "verdict"):
        assert column in header
    for column in ("device us", "host us", "limit", "roofline"):  # on the CPU: one time, no known peak
        assert column not in header
    assert "24x16x8  " in out and "float32" in out and "…" not in out
    assert main([*args, "--plain"]) == 0
    plain = capsys.readouterr().out.splitlines()
    header = next(line for line in plain if "MxNxK" in line)
    assert header.split("\t")[:6] == ["MxNxK", "dtype", "layout", "backend", "device us", "±"]
    row = next(line for line in plain if line.startswith("24x16x8"))
    fields = row.split("\t")
    assert fields[3] == "numpy" and "│" not in row
    # one backend: best, unless a loaded machine kept its measurement off the noise target
    assert fields[-1] in ("best", "noisy")
    assert any(line.startswith("numpy: geomean") for line in plain)


def test_best_never_goes_to_a_row_slower_than_a_noisy_one():
    from gemmzoo.measure import Measurement, Timing

    point = GridPoint(1, 1024, 1024, "float32")
    noisy_timing = Timing(81.5e-6, 70e-6, 95e-6, 40, "test", noise=0.2, converged=False, target=0.02)
    clean_timing = Timing(116e-6, 115e-6, 117e-6, 40, "test", noise=0.005, converged=True, target=0.02)
    row = {"numpy": BenchResult("numpy", "cpu", point, OK, Measurement("numpy", point, noisy_timing, 0.5)),
           "jax": BenchResult("jax", "cpu", point, OK, Measurement("jax", point, clean_timing, 0.5))}
    assert verdicts(row) == {"numpy": "noisy", "jax": "undecided"}
    faster_clean = Timing(60e-6, 59e-6, 61e-6, 40, "test", noise=0.005, converged=True, target=0.02)
    row["jax"] = BenchResult("jax", "cpu", point, OK, Measurement("jax", point, faster_clean, 0.5))
    assert verdicts(row) == {"numpy": "noisy", "jax": "best"}
