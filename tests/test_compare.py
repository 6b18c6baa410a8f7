"""``gemmzoo compare``: runs side by side, ties within noise, regressions beyond it fail."""

from __future__ import annotations

import json

import pytest

from gemmzoo.cli import main
from gemmzoo.results.compare import AMBIGUOUS, BROKEN, FASTER, MISSING, SAME, SLOWER, compare_runs, labels
from gemmzoo.results.runs import load_run


@pytest.fixture(autouse=True)
def wide(wide_tables):
    """Every test here prints wide tables."""


def _result(m, backend, median, spread=0.0, status="ok", dtype="float16"):
    return {"backend": backend, "device": "cuda", "point": f"{m}x{m}x{m}-{dtype}-NN", "m": m, "n": m, "k": m,
            "dtype": dtype, "layout": "NN", "status": status,
            "median_s": median if status == "ok" else None,
            "q1_s": median - spread / 2 if status == "ok" else None,
            "q3_s": median + spread / 2 if status == "ok" else None,
            "samples": 100, "method": "cuda-events", "tflops": None, "peak_tflops": None,
            "peak_percent": None, "error_ratio": 0.1, "rel_error": 1e-4, "detail": ""}


def _write(path, results, torch="2.11.0", device="NVIDIA H200", created="2026-11-23T10:00:00+00:00"):
    environment = {"cuda": {"device_name": device, "driver": "570.86.15", "cuda_driver": "12.8",
                            "libraries": {"torch": torch, "numpy": "2.4.0"}}}
    path.write_text(json.dumps({"created": created, "command": "gemmzoo bench", "environment": environment,
                                "results": results}))
    return str(path)


@pytest.fixture
def files(tmp_path):
    base = _write(tmp_path / "base.json", [
        _result(1024, "torch", 1.00e-3, 0.02e-3), _result(1024, "cupy", 1.00e-3, 0.02e-3),
        _result(2048, "torch", 8.00e-3, 0.10e-3), _result(2048, "cupy", 8.00e-3, 0.10e-3),
        _result(4096, "torch", 60e-3, 0.5e-3),
    ])
    new = _write(tmp_path / "new.json", [
        _result(1024, "torch", 1.03e-3, 0.02e-3),          # 3% slower: within the 5% drift
        _result(1024, "cupy", 1.30e-3, 0.02e-3),           # 30% slower: a regression
        _result(2048, "torch", 6.00e-3, 0.10e-3),          # faster
        _result(2048, "cupy", None, status="wrong"),       # was right, now wrong
    ], torch="2.12.0")
    return base, new


def test_verdicts(files):
    runs = [load_run(path) for path in files]
    rows = {(row.point.m, row.backend): row for row in compare_runs(runs)}
    verdicts = {key: row.cells[1].verdict for key, row in rows.items()}
    assert verdicts == {(1024, "torch"): SAME, (1024, "cupy"): SLOWER, (2048, "torch"): FASTER,
                        (2048, "cupy"): BROKEN, (4096, "torch"): MISSING}
    assert rows[(1024, "cupy")].cells[1].ratio == pytest.approx(1.0 / 1.3)
    assert rows[(2048, "torch")].cells[1].ratio == pytest.approx(8 / 6)
    # a tighter drift allowance turns the 3% into a regression: the IQR bands (2%) are apart
    strict = {(r.point.m, r.backend): r.cells[1].verdict for r in compare_runs(runs, threshold=0.001)}
    assert strict[(1024, "torch")] == SLOWER


def test_noise_bands_decide(tmp_path):
    base = _write(tmp_path / "a.json", [_result(1024, "torch", 1.0e-3, 0.3e-3)])
    new = _write(tmp_path / "b.json", [_result(1024, "torch", 1.2e-3, 0.15e-3)])
    [row] = compare_runs([load_run(base), load_run(new)], threshold=0.01)
    # 0.2 ms apart: more than the new run's IQR (0.15 ms), less than the baseline's, bands overlap
    assert row.cells[1].verdict == AMBIGUOUS
    wide = _write(tmp_path / "c.json", [_result(1024, "torch", 1.2e-3, 0.3e-3)])
    [row] = compare_runs([load_run(base), load_run(wide)], threshold=0.01)
    assert row.cells[1].verdict == SAME  # within both runs' IQRs (0.3 ms)


def test_labels_name_the_device_and_the_versions_that_differ(files, tmp_path):
    runs = [load_run(path) for path in files]
    assert labels(runs) == ["NVIDIA H200, torch 2.11.0, 2026-11-23", "NVIDIA H200, torch 2.12.0, 2026-11-23"]
    same = [load_run(files[0]), load_run(files[0])]
    first, second = labels(same)
    assert first != second and files[0] in first


def test_compare_command_flags_regressions(files, tmp_path, capsys):
    plot = tmp_path / "compare.png"
    code = main(["compare", *files, "--plot", str(plot), "--allow-missing"])
    captured = capsys.readouterr()
    out = captured.out
    assert code == 1
    assert "baseline: NVIDIA H200, torch 2.11.0" in out and "run 1: NVIDIA H200, torch 2.12.0" in out
    assert "SLOWER" in out and "BROKEN" in out and "2 regressions beyond noise" in captured.err
    assert "compared 4 rows: 1 same, 1 faster, 1 slower, 1 broken, 1 missing" in out
    # without --allow-missing the lost row is an error
    assert main(["compare", *files]) == 2
    assert "1 rows are missing" in capsys.readouterr().err
    pytest.importorskip("matplotlib")
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_compare_of_a_real_run_with_itself_passes(tmp_path, capsys):
    path = tmp_path / "run.json"
    assert main(["bench", "--grid", "smoke", "--backend", "numpy", "--budget", "0.01", "--json", str(path)]) \
        == 0
    capsys.readouterr()
    assert main(["compare", str(path), str(path), "--all"]) == 0
    out = capsys.readouterr().out
    assert "compared 4 rows: 4 same" in out and "x1 SAME" in out


def test_compare_reads_pytest_benchmark_files(tmp_path, capsys):
    def bench(median):
        timed = ("median_s", "q1_s", "q3_s")
        info = {k: v for k, v in _result(512, "torch", median).items() if k not in timed}
        info.update(device_name="NVIDIA H100 80GB HBM3", libraries={"torch": "2.11.0"}, timing="cuda events")
        return {"name": "test_gemm[512x512x512-float16-NN-torch]", "extra_info": info,
                "stats": {"median": median, "q1": median * 0.99, "q3": median * 1.01, "rounds": 50}}

    old, new = tmp_path / "old.json", tmp_path / "new.json"
    old.write_text(json.dumps({"datetime": "2026-11-22T09:00:00", "benchmarks": [bench(1e-4)]}))
    new.write_text(json.dumps({"datetime": "2026-11-23T09:00:00", "benchmarks": [bench(2e-4)]}))
    assert main(["compare", str(old), str(new)]) == 1
    assert "1 slower" in capsys.readouterr().out
    (tmp_path / "bad.json").write_text("{}")
    assert main(["compare", str(old), str(tmp_path / "bad.json")]) == 2
