"""``gemmzoo tune --export`` / ``--import``: tuning results that travel between machines."""

from __future__ import annotations

import json

import pytest
from sessions import restart, scoped

from gemmzoo.cli import main
from gemmzoo.tuning import state
from gemmzoo.tuning.portable import FORMAT, VERSION


@pytest.fixture(autouse=True)
def fresh(tmp_path, monkeypatch, wide_tables):
    monkeypatch.setenv("GEMMZOO_CACHE_DIR", str(tmp_path / "machine-a"))
    monkeypatch.delenv("GEMMZOO_BACKENDS", raising=False)
    monkeypatch.delenv("GEMMZOO_TUNE", raising=False)
    with scoped():
        yield


def _use_cache(monkeypatch, path):
    monkeypatch.setenv("GEMMZOO_CACHE_DIR", str(path))
    restart()


def _tune_and_export(capsys, path, *shapes):
    args = ["tune", "--dtype", "float64", "--backend", "numpy", "--budget", "0.005"]
    for shape in shapes:
        args += ["--shape", shape]
    assert main([*args, "--export", str(path)]) == 0
    out = capsys.readouterr().out
    assert f"wrote {path}" in out
    return json.loads(path.read_text())


def test_export_then_import_answers_best_without_measuring(tmp_path, capsys, monkeypatch):
    exported = tmp_path / "tuning.json"
    data = _tune_and_export(capsys, exported, "24x16x8")
    assert data["format"] == FORMAT and data["version"] == VERSION
    [row] = data["measurements"]
    assert row["backend"] == "numpy" and (row["m"], row["n"], row["k"]) == (24, 16, 8)
    assert row["device"]["kind"] == "cpu" and row["versions"]["numpy"] and row["median_s"] > 0
    verdicts = data["conformance"]
    assert any(v["backend"] == "numpy" and v["dtype"] == "float64" and v["passed"] for v in verdicts)

    _use_cache(monkeypatch, tmp_path / "machine-b")  # a fresh cache directory
    assert main(["tune", "--import", str(exported)]) == 0
    out = capsys.readouterr().out
    assert "imported 1 measurements" in out and "1 conformance verdicts not taken in" in out
    assert "conformance suite passed here: numpy float64" in out  # the verdict is earned here
    assert state.store().count() == 1
    restart()
    assert main(["best", "24", "16", "8", "--dtype", "float64", "--device", "cpu", "--no-measure"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("numpy for 24x16x8 float64 on cpu") and "source: database" in out
    assert f"{row['median_s'] * 1e6:,.1f} us median" in out  # the imported measurement answered


def test_importing_twice_changes_nothing(tmp_path, capsys, monkeypatch):
    exported = tmp_path / "tuning.json"
    _tune_and_export(capsys, exported, "24x16x8", "8x8x8")
    _use_cache(monkeypatch, tmp_path / "machine-b")
    assert main(["tune", "--import", str(exported), "--import", str(exported)]) == 0
    out = capsys.readouterr().out
    assert "imported 2 measurements" in out and "imported 0 measurements" in out
    assert "0 rows already known" in out and "2 rows already known" in out
    assert out.count("conformance suite passed here") == 1  # the suite ran once, for the first file
    assert state.store().count() == 2


def test_files_from_several_machines_merge(tmp_path, capsys, monkeypatch):
    first, second = tmp_path / "a.json", tmp_path / "b.json"
    _tune_and_export(capsys, first, "24x16x8")
    _use_cache(monkeypatch, tmp_path / "machine-c")
    _tune_and_export(capsys, second, "40x8x16", "24x16x8")  # newer than the first file's 24x16x8
    newer = next(r for r in json.loads(second.read_text())["measurements"] if r["m"] == 24)

    _use_cache(monkeypatch, tmp_path / "fresh")
    assert main(["tune", "--import", str(second), "--import", str(first)]) == 0
    out = capsys.readouterr().out
    assert "imported 2 measurements" in out and "imported 0 measurements" in out  # the older row lost
    for shape, median in (("24 16 8", newer["median_s"]), ("40 8 16", None)):
        restart()
        assert main(["best", *shape.split(), "--dtype", "float64", "--device", "cpu", "--no-measure"]) == 0
        out = capsys.readouterr().out
        assert "source: database" in out
        if median is not None:
            assert f"{median * 1e6:,.1f} us median" in out


def test_rows_of_another_device_or_versions_are_ignored_with_one_line(tmp_path, capsys, monkeypatch):
    exported = tmp_path / "tuning.json"
    data = _tune_and_export(capsys, exported, "24x16x8", "8x8x8")
    data["measurements"][0]["device"]["model"] = "Some Other CPU"
    data["measurements"][1]["versions"]["numpy"] = "0.0.1"
    for verdict in data["conformance"]:
        verdict["device"] = {"kind": "cuda", "name": "NVIDIA H200", "capability": "9.0", "sms": 132}
    exported.write_text(json.dumps(data))

    _use_cache(monkeypatch, tmp_path / "machine-b")
    assert main(["tune", "--import", str(exported)]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if line.strip()]
    assert len(lines) == 1, lines
    line = lines[0]
    assert "imported 0 measurements" in line and "ignored" in line
    assert "1 on another device" in line and "1 with other library versions" in line
    assert state.store().count() == 0


def test_a_bad_or_newer_file_is_a_clear_error(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text('{"rows": []}')
    assert main(["tune", "--import", str(bad)]) == 2
    assert "not a gemmzoo tuning file" in capsys.readouterr().out
    bad.write_text(json.dumps({"format": FORMAT, "version": VERSION + 1, "measurements": []}))
    assert main(["tune", "--import", str(bad)]) == 2
    assert "upgrade gemmzoo" in capsys.readouterr().out
