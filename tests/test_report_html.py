"""``gemmzoo report`` / ``bench --html``: one self-contained page, escaped, checked in a real
headless browser (Debian's chromium; skipped where it is not installed)."""

from __future__ import annotations

import json
import random
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from gemmzoo.cli import main
from gemmzoo.results.runs import load_run

HOSTILE = '<script>alert("x")</script>'
BACKENDS = ("numpy", "torch-cpu", "alpha", "beta", HOSTILE)


def _result_file(path: Path, points: int, seed: int, slower: str | None = None) -> Path:
    """A result file of ``points`` problems × 5 backends with random, plausible times (one
    backend ``slower`` by half, if given); one backend's name and details try to inject markup."""
    rng = random.Random(seed)
    results = []
    for number in range(points):
        m, n, k = (rng.choice((64, 96, 128, 192, 256, 384, 512)) + number for _ in range(3))
        dtype = ("float32", "float64")[number % 2]
        for index, backend in enumerate(BACKENDS):
            status = "wrong" if (backend == "beta" and number % 7 == 3) else "ok"
            rate = 1e9 * (5 + index) * rng.uniform(0.9, 1.1)
            median = 2 * m * n * k / rate * (1.5 if backend == slower else 1)
            record = {"backend": backend, "device": "cpu", "m": m, "n": n, "k": k, "dtype": dtype,
                      "layout": "NN", "status": status, "detail": '"><img src=x onerror=alert(1)>'}
            if status == "ok":
                record.update(median_s=median, q1_s=median * 0.99, q3_s=median * 1.01, samples=50,
                              method="host", tflops=2 * m * n * k / median / 1e12, peak_tflops=0.08,
                              bandwidth_gbps=20.0,
                              conformance="passed", worker_device={"kind": "cpu", "name": f"cpu {HOSTILE}"})
            results.append(record)
    document = {"format": "gemmzoo-results", "version": 1, "created": "2026-11-27T12:00:00+00:00",
                "command": f"gemmzoo bench {HOSTILE}",
                "environment": {"cpu": {"device_name": f"Test CPU {HOSTILE}", "libraries": {"numpy": "2"}}},
                "results": results}
    path.write_text(json.dumps(document))
    return path


def test_report_has_every_figure_and_escapes_what_files_say(tmp_path: Path) -> None:
    one = _result_file(tmp_path / "one.json", 12, seed=1)
    two = _result_file(tmp_path / "two.json", 12, seed=1, slower="alpha")
    out = tmp_path / "report.html"
    assert main(["report", str(one), str(two), "-o", str(out)]) == 0
    page = out.read_text()
    assert "<script>alert" not in page and "<img src=x" not in page  # escaped, every time
    assert page.count("&lt;script&gt;alert") >= 3
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", page)  # nothing fetched from anywhere
    assert page.count('class="figure heatmap"') == 4  # per run and dtype
    assert page.count('class="figure winners"') == 4
    assert page.count('class="figure roofline"') == 2
    assert "Runs side by side" in page and "SLOWER" in page and "SAME" in page
    assert "gemmzoo bench --backend numpy --shape" in page  # the command to reproduce a cell
    assert "fast_1" in page and "geomean" in page and "conformance suite on the worker" in page
    assert page.count("<polyline") == 2 * 2  # the roof of each dtype, from the files' peak and bandwidth


def test_report_refuses_a_bad_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"results": [{"backend": "x", "status": "ok"}]}))
    assert main(["report", str(bad), "-o", str(tmp_path / "r.html")]) == 2
    assert not (tmp_path / "r.html").exists()


def test_bench_html_writes_the_report_of_the_run(tmp_path: Path, empty_cache: Path) -> None:
    out = tmp_path / "bench.html"
    code = main(["bench", "--backend", "numpy", "--shape", "24x40x32", "--shape", "48x16x8",
                 "--budget", "0.01", "--rounds", "1", "--html", str(out), "--format", "plain"])
    assert code == 0
    page = out.read_text()
    assert page.count('class="figure heatmap"') == 1 and "24x40x32" in page


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def test_report_loads_in_headless_chromium_without_console_errors(tmp_path: Path) -> None:
    browser = _chromium()
    if browser is None:
        pytest.skip("chromium is not installed (apt-get install chromium)")
    big = _result_file(tmp_path / "big.json", 100, seed=2)  # 500 rows
    assert len(load_run(big).results) == 500
    other = _result_file(tmp_path / "other.json", 100, seed=3)
    out = tmp_path / "report.html"
    assert main(["report", str(big), str(other), "-o", str(out)]) == 0
    began = time.perf_counter()
    done = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--enable-logging=stderr",
                           "--v=0", "--dump-dom", out.as_uri()], capture_output=True, text=True, timeout=120)
    wall = time.perf_counter() - began
    assert done.returncode == 0, done.stderr[-2000:]
    console = [line for line in done.stderr.splitlines() if ":CONSOLE" in line]
    assert console == [], console
    figures = re.search(r'data-figures="(\d+)"', done.stdout)
    assert figures and int(figures.group(1)) == 2 * (2 + 2 + 1)  # heatmaps and winners per dtype, roofline
    loaded = re.search(r'data-loaded-ms="(\d+)"', done.stdout)
    assert loaded, "the page's load event never came"
    print(f"500-row report: load event at {loaded.group(1)} ms in the page; chromium run {wall:.1f} s")
    assert int(loaded.group(1)) <= 3000
