"""``gemmzoo tune`` and ``gemmzoo best`` from the command line."""

from __future__ import annotations

import pytest
from sessions import restart

from gemmzoo.cli import main

pytestmark = pytest.mark.usefixtures("empty_cache")


def test_tune_stores_and_best_explains(capsys, tmp_path):
    assert main(["tune", "--shape", "24x16x8", "--shape", "32x32x32", "--dtype", "float64",
                 "--backend", "numpy", "--budget", "0.01"]) == 0
    out = capsys.readouterr().out
    assert "24x16x8 float64 cpu" in out and "32x32x32 float64 cpu" in out and "numpy" in out
    assert f"stored 2 measurements in {tmp_path}" in out
    restart()
    assert main(["best", "24", "16", "8", "--dtype", "float64", "--device", "cpu", "--no-measure"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("numpy for 24x16x8 float64 on cpu") and "source: database" in out
    assert "runner-up: none measured" in out
    assert main(["best", "30", "30", "30", "--dtype", "float64", "--device", "cpu", "--no-measure"]) == 0
    out = capsys.readouterr().out
    assert "source: nearest shape" in out and "nearest measured shape 32x32x32" in out


def test_best_measures_on_a_miss_and_names_the_runner_up(capsys, monkeypatch):
    pytest.importorskip("torch")  # the runner-up is torch-cpu
    monkeypatch.setenv("GEMMZOO_BACKENDS", "numpy,torch-cpu")
    assert main(["best", "40", "20", "10"]) == 0
    out = capsys.readouterr().out
    assert "source: measured now" in out and "runner-up: " in out and "tie: " in out


def test_bad_arguments(capsys):
    assert main(["tune", "--shape", "12x12"]) == 2
    assert "MxNxK" in capsys.readouterr().out
    assert main(["tune", "--shape", "8x8x8", "--backend", "no-such-backend"]) == 2
    assert "unknown backend 'no-such-backend'" in capsys.readouterr().out
    assert main(["best", "8", "8", "8", "--dtype", "tf32", "--device", "cpu"]) == 2
    assert "no available backend computes tf32 on cpu" in capsys.readouterr().err  # errors: stderr
