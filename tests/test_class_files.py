"""Problems of the classes beyond gemm in result files, the tuning store and the command line."""

from __future__ import annotations

import json

import numpy as np
import pytest

from gemmzoo.cli import main
from gemmzoo.problems.classes import parse_problem
from gemmzoo.results.runs import load_run
from gemmzoo.results.schema import FieldError, check_result, load_document, result_class

pytestmark = pytest.mark.usefixtures("empty_cache")


def _record(**fields):
    row = {"backend": "numpy", "m": 24, "n": 32, "k": 16, "dtype": "float32", "status": "ok",
           "median_s": 1e-5}
    row.update(fields)
    return row


def test_a_result_without_a_class_is_a_gemm_one():
    assert result_class(check_result(_record())) == "gemm"


def test_a_class_result_names_a_problem_that_agrees_with_its_sizes():
    row = check_result(_record(**{"class": "grouped", "problem": "grouped:32x16:m=4,0,20"}))
    assert result_class(row) == "grouped"
    with pytest.raises(FieldError, match="names its problem"):
        check_result(_record(**{"class": "batched"}))
    with pytest.raises(FieldError, match="is not the grouped problem"):
        check_result(_record(**{"class": "grouped", "problem": "grouped:32x16:m=4,0,21"}))
    with pytest.raises(FieldError, match="must be one of"):
        check_result(_record(**{"class": "sparse", "problem": "24x32x16"}))


def test_bench_and_tune_take_class_problems_and_tune_stores_the_winner(tmp_path, capsys):
    out = tmp_path / "classes.json"
    shapes = ["--shape", "bmm:2x3x8x8x4", "--shape", "grouped:g3:8x12:m=5",
              "--shape", "scaled:rowwise:8x16x32"]
    assert main(["bench", *shapes, "--backend", "numpy", "--format", "plain", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "grouped:g3:8x12:m=5" in printed and "scaled:rowwise:8x16x32" in printed
    document = load_document(out)
    assert {r["class"] for r in document["results"]} == {"batched", "grouped", "scaled"}
    assert all(r["status"] == "ok" and r["median_s"] > 0 for r in document["results"])
    run = load_run(out)
    assert {r.backend for r in run.results} >= {"numpy [grouped:g3:8x12:m=5]"}

    assert main(["tune", "--shape", "grouped:g3:8x12:m=5", "--backend", "numpy", "--format", "plain"]) == 0
    from gemmzoo.tuning.class_store import stored_winner

    assert stored_winner("grouped:g3:8x12:m=5", "float32", "cpu") == "numpy"
    import gemmzoo

    a, b = np.ones((15, 12), np.float32), np.ones((3, 12, 8), np.float32)
    assert gemmzoo.grouped_mm(a, b, np.array([5, 10, 15], np.int32)).shape == (15, 8)


def test_a_wrong_backend_is_reported_and_not_timed(tmp_path, capsys):
    out = tmp_path / "wrong.json"
    code = main(["bench", "--shape", "grouped:g3:8x12:m=5", "--backend", "numpy", "--format", "plain",
                 "--json", str(out)])
    assert code == 0
    from test_problem_classes import DropsLastGroup

    from gemmzoo.scale.class_bench import run_class_bench

    rows = run_class_bench([parse_problem("grouped:g3:8x12:m=5")], [DropsLastGroup()])
    assert rows[0]["status"] == "wrong" and rows[0]["median_s"] is None and "group" in rows[0]["detail"]
    assert json.loads(out.read_text())["results"][0]["backend"] == "numpy"


def test_bad_class_text_is_bad_usage(capsys):
    assert main(["bench", "--shape", "grouped:g2:8x12:m=1,2,3", "--backend", "numpy"]) == 2
    assert "g2 but 3 values" in capsys.readouterr().err


def test_pytest_runs_the_class_cases_with_readable_ids(tmp_path):
    import subprocess
    import sys

    from fake_distributions import subprocess_env

    module = "from gemmzoo.testing import test_class_conformance  # noqa: F401\n"
    (tmp_path / "test_mine.py").write_text(module)
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--gemmzoo-backend", "numpy",
               "-rA"]
    run = subprocess.run(command, capture_output=True, text=True, cwd=tmp_path, env=subprocess_env(tmp_path),
                         timeout=300, check=False)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    assert "test_class_conformance[numpy-scaled-blockwise-70x260x300-bfloat16-N]" in run.stdout
    assert "test_class_conformance[numpy-grouped-float32-one-row-16x40-m=1,1,1]" in run.stdout


def test_class_grids_run_by_name(capsys):
    assert main(["bench", "--grid", "classes-smoke", "--backend", "numpy", "--format", "plain"]) == 0
    printed = capsys.readouterr().out
    from gemmzoo.problems.grids import CLASS_GRIDS

    assert all(text in printed for text in CLASS_GRIDS["classes-smoke"])


def test_a_model_grid_splits_into_gemm_shapes_and_class_problems():
    import argparse

    from gemmzoo.cli.class_shapes import expand_grid, model_summary_line

    args = argparse.Namespace(grid="model:mixtral-8x7b@16", shape=[], dtype=None)
    points = expand_grid(args)
    assert args.grid is None and args.dtype == ["bfloat16"]
    assert "16x6144x4096" in args.shape and "grouped:g8:28672x4096:m=4" in args.class_shapes
    rows = [{"problem": p.problem.text(), "backend": b, "status": "ok", "median_s": s}
            for p in points if p.problem.kind != "gemm" for b, s in (("base", 2.0), ("fast", 1.0))]
    line = model_summary_line(points, [], rows, "base", "mixtral")
    assert "2.000x" in line and f"of {len(points)} points" in line
    with pytest.raises(ValueError, match="known"):
        expand_grid(argparse.Namespace(grid="model:nope", shape=[], dtype=None))


def test_best_class_backend_answers_without_measuring():
    from gemmzoo.dispatch.classes import best_class_backend

    assert best_class_backend("grouped:g3:8x12:m=5", device="cpu", library="numpy").name == "numpy"
    assert best_class_backend("scaled:rowwise:8x16x32", device="cpu", library="numpy").name == "numpy"
    with pytest.raises(ValueError, match="problem"):
        best_class_backend("grouped:8x12")


def test_best_answers_class_problems_from_the_store_or_the_default_order(capsys):
    import gemmzoo
    from gemmzoo.tuning.class_store import stored_winner

    problem = "bmm:3x9x7x5"
    untuned = gemmzoo.best_backend(problem, "float64", "cpu")
    assert "batched" in untuned.classes
    assert main(["best", "--problem", problem, "--dtype", "float64", "--device", "cpu",
                 "--format", "plain"]) == 0
    assert "default order" in capsys.readouterr().out

    assert main(["tune", "--shape", problem, "--dtype", "float64", "--backend", "numpy",
                 "--format", "plain"]) == 0
    assert stored_winner(problem, "float64", "cpu") == "numpy"
    chosen = gemmzoo.best_backend(problem, "float64", "cpu")
    assert chosen.name == "numpy"
    capsys.readouterr()
    assert main(["best", "--problem", problem, "--dtype", "float64", "--device", "cpu"]) == 0
    printed = capsys.readouterr().out
    assert "numpy" in printed and "measured" in printed

    rng = np.random.default_rng(7)
    a, b = rng.standard_normal((3, 9, 5)), rng.standard_normal((3, 5, 7))
    np.testing.assert_allclose(gemmzoo.matmul(a, b, backend=chosen), a @ b, rtol=1e-12, atol=1e-12)

    assert main(["best", "--problem", problem, "7", "--dtype", "float64"]) == 2
    assert main(["best", "--problem", "bmm:3x9", "--dtype", "float64"]) == 2
    with pytest.raises(TypeError, match="apply to"):
        gemmzoo.best_backend(problem, "float64", "cpu", layout="NT")


def test_tune_export_and_import_carry_class_measurements(tmp_path, monkeypatch, capsys):
    from sessions import restart

    from gemmzoo.tuning.class_store import stored_winner

    problem = parse_problem("grouped:g3:8x12:m=5,0,7").text()  # the stored (text) form
    assert main(["tune", "--shape", problem, "--backend", "numpy", "--format", "plain"]) == 0
    exported = tmp_path / "tuning.json"
    assert main(["tune", "--export", str(exported)]) == 0
    document = json.loads(exported.read_text())
    rows = [r for r in document["class_measurements"] if r["problem"] == problem]
    assert len(rows) == 1 and rows[0]["problem_class"] == "grouped" and rows[0]["backend"] == "numpy"
    assert rows[0]["status"] == "ok" and rows[0]["median_s"] > 0

    monkeypatch.setenv("GEMMZOO_CACHE_DIR", str(tmp_path / "another-machine"))
    restart()
    assert stored_winner(problem, "float32", "cpu") is None
    assert main(["tune", "--import", str(exported)]) == 0
    assert "imported" in capsys.readouterr().out
    restart()
    assert stored_winner(problem, "float32", "cpu") == "numpy"
    a = np.random.default_rng(3).standard_normal((12, 12)).astype(np.float32)
    b = np.random.default_rng(4).standard_normal((3, 12, 8)).astype(np.float32)
    offsets = np.array([5, 5, 12], np.int32)
    expected = np.concatenate([a[:5] @ b[0], a[5:5] @ b[1], a[5:12] @ b[2]])
    np.testing.assert_allclose(gemmzoo_grouped(a, b, offsets), expected, rtol=1e-5, atol=1e-5)

    tampered = json.loads(exported.read_text())
    tampered["class_measurements"][0]["problem_class"] = "batched"  # the row names another class
    bad = tmp_path / "tampered.json"
    bad.write_text(json.dumps(tampered))
    monkeypatch.setenv("GEMMZOO_CACHE_DIR", str(tmp_path / "third-machine"))
    restart()
    capsys.readouterr()
    assert main(["tune", "--import", str(bad)]) == 2
    assert "class_measurements[0].problem" in capsys.readouterr().out
    assert stored_winner(problem, "float32", "cpu") is None

    older = json.loads(exported.read_text())
    del older["class_measurements"]
    old_file = tmp_path / "older.json"
    old_file.write_text(json.dumps(older))
    assert main(["tune", "--import", str(old_file)]) == 0


def gemmzoo_grouped(a, b, offsets):
    import gemmzoo

    return gemmzoo.grouped_mm(a, b, offsets)
