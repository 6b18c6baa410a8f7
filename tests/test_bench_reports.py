"""gemmzoo bench and its report writers, with real runs of numpy and torch-cpu on the smoke grid."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest

import gemmzoo
from gemmzoo.bench import OK, UNSUPPORTED, WRONG, bench_one, run_bench
from gemmzoo.cli import main
from gemmzoo.grids import GridPoint, get_grid
from gemmzoo.report import results_table, winner, write_csv, write_json, write_plot


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

    console = Console(record=True, width=200)
    console.print(results_table(smoke_results, baseline="numpy"))
    text = console.export_text()
    assert "WRONG" in text and "numpy*" in text and "relative to numpy" in text
    for point in get_grid("smoke", dtypes=["float32"]):
        row = next(line for line in text.splitlines() if f"{point.m}x{point.n}x{point.k} " in line)
        best = winner({r.backend: r for r in smoke_results if r.point == point})
        assert best.backend in row and best.backend != "wrong-numpy"
        assert row.count("WRONG") == 1


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
        else:
            assert record["tflops"] is None and record["median_s"] is None
    write_csv(smoke_results, tmp_path / "r.csv")
    with open(tmp_path / "r.csv") as handle:
        rows = list(csv.DictReader(handle))
    assert [(r["backend"], r["point"], r["status"]) for r in rows] == [
        (r.backend, r.point.id, r.status) for r in smoke_results
    ]
    assert all(float(r["tflops"]) > 0 for r in rows if r["status"] == OK)
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
