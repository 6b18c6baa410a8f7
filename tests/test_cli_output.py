"""Every command's output at 80 and 120 terminal columns and piped, and in each ``--format``:
tables fit the terminal, names are never split or cut, piped lines never wrap, data formats parse.

A terminal is simulated with ``TTY_COMPATIBLE=1`` (rich then writes as to a terminal of
``COLUMNS`` columns); escape sequences are removed before the lines are measured."""

from __future__ import annotations

import csv
import functools
import io
import json
import re

import numpy as np
import pytest
from cli_forks import DEPENDENCIES, FRAMEWORKS, CliForks
from fake_distributions import run_gemmzoo

ESCAPES = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
LIGHT = {"GEMMZOO_DISABLE_PLUGINS": "torch,triton,cupy,jax"}  # numpy only: quick subprocesses


def shown(raw: str) -> list[str]:
    """The lines a reader sees: after the last erase of a progress display, escapes removed."""
    if "\x1b[2K" in raw:
        raw = raw[raw.rindex("\x1b[2K") + len("\x1b[2K"):]
    return ESCAPES.sub("", raw).splitlines()


def terminal(gemmzoo, columns: int, *args: str, **env: str):
    result = gemmzoo(*args, COLUMNS=str(columns), TTY_COMPATIBLE="1", NO_COLOR="1", **env)
    return result, shown(result.stdout)


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    return tmp_path_factory.mktemp("site")


@pytest.fixture(scope="module")
def gemmzoo(site):
    """``run_gemmzoo(site, ...)`` for this module's many runs, each forked from a started
    interpreter (tests/cli_forks.py): what they print is under test here, not the start.
    ``list -v`` runs come from a server that has the frameworks it probes imported."""
    servers: dict[bool, CliForks] = {}

    def run(*args: str, **env: str):
        probes = args[:2] == ("list", "-v")
        if probes not in servers:
            servers[probes] = CliForks(site, DEPENDENCIES + (FRAMEWORKS if probes else ()))
        return servers[probes].run(*args, **env)

    yield run
    for server in servers.values():
        server.close()


@pytest.fixture(scope="module")
def runs(tmp_path_factory, gemmzoo):
    """Two bench result files of the same grid, for compare."""
    folder = tmp_path_factory.mktemp("runs")
    files = []
    for number in range(2):
        path = folder / f"run{number}.json"
        result = gemmzoo("bench", "--shape", "24x16x8", "--shape", "9x7x5", "--budget", "0.01",
                         "--json", str(path), **LIGHT)
        assert result.returncode == 0, result.stdout + result.stderr
        files.append(str(path))
    return files


COMMANDS = {
    "list": (("list", "-v"), {}),
    "check": (("check", "numpy", "--dtype", "float32"), LIGHT),
    "bench": (("bench", "--shape", "24x16x8", "--shape", "9x7x5", "--budget", "0.01"), LIGHT),
    "grids": (("bench", "--list-grids"), LIGHT),
    "tune": (("tune", "--shape", "24x16x8", "--budget", "0.01"), LIGHT),
    "best": (("best", "16", "16", "16", "--no-measure"), LIGHT),
    "cache": (("cache",), LIGHT),
}
# Names each command's table must show whole, on one line.
NAMES = {"list": ("triton-grouped", "float16,float32,float64,float8_e4m3fn"), "check": ("numpy", "conforms"),
         "bench": ("24x16x8", "numpy"), "grids": ("smoke",), "tune": ("24x16x8", "numpy"), "best": ("numpy",),
         "cache": ("tuning.sqlite3",)}


def _args(name, tmp_path):
    args, env = COMMANDS[name]
    return args, {**env, "GEMMZOO_CACHE_DIR": str(tmp_path / "cache")}


@pytest.mark.parametrize("columns", [80, 120])
@pytest.mark.parametrize("name", list(COMMANDS))
def test_tables_fit_the_terminal_and_keep_names_whole(gemmzoo, tmp_path, name, columns):
    args, env = _args(name, tmp_path)
    result, lines = terminal(gemmzoo, columns, *args, **env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert lines, result.stdout
    too_long = [line for line in lines if len(line) > columns]
    assert not too_long, "\n".join(lines)
    assert not [line for line in lines if "…" in line], "\n".join(lines)
    if name == "cache":  # a path longer than the terminal folds; nothing of it is lost
        assert str(tmp_path / "cache" / "tuning.sqlite3") in "".join(line.strip() for line in lines)
        return
    title = " ".join(" ".join(lines[:3]).split())  # the title may wrap
    for wanted in NAMES[name]:
        if wanted.startswith("float16,") and "dtypes left out to fit" in title:
            continue  # a machine whose list has more to say (a GPU's) drops the column, and says so
        assert any(wanted in line for line in lines), (wanted, "\n".join(lines))


def test_list_at_80_columns_is_short_and_says_each_long_reason_once(gemmzoo):
    result, lines = terminal(gemmzoo, 80, "list")
    assert result.returncode == 0
    backends = [line.split()[0] for line in lines if line.split() and line.split()[0] in
                {"numpy", "torch-cpu", "torch", "triton-naive", "triton-grouped", "triton-fp8"}]
    assert len(backends) >= 6
    assert len(lines) < 40, "\n".join(lines)
    reason_lines = [line for line in lines if "TRITON_INTERPRET=1" in line]
    assert len(reason_lines) <= 1, "\n".join(lines)  # the hint once, not once per Triton backend


def test_bench_compact_and_wide_columns(gemmzoo, tmp_path):
    args, env = _args("bench", tmp_path)
    _result, compact = terminal(gemmzoo, 80, *args, **env)
    header = next(line for line in compact if "backend" in line).split()
    assert header == ["MxNxK", "backend", "caller", "us", "±", "TFLOPS", "x", "base", "verdict"]
    assert any("float32, NN" in line for line in compact)  # the same on every row: said in the title
    verdicts = ("best", "tie", "noisy")  # numpy alone: best, or noisy where a loaded machine kept it
    assert any(line.split()[-2:] in (["base", verdict] for verdict in verdicts) for line in compact)
    _result, wide = terminal(gemmzoo, 120, *args, "--wide", **env)
    header = next(line for line in wide if "backend" in line)
    assert "GB/s" in header and "device us" not in header  # on the CPU: one time column
    row = next(line for line in wide if line.startswith("24x16x8"))
    assert float(row.split()[-3 if row.split()[-1] in verdicts else -2].replace(",", "")) > 0  # GB/s


@pytest.mark.parametrize("name", list(COMMANDS))
def test_piped_tables_never_wrap_or_cut(gemmzoo, tmp_path, name):
    args, env = _args(name, tmp_path)
    result = gemmzoo(*args, COLUMNS="80", **env)  # a pipe, though the terminal is narrow
    assert result.returncode == 0, result.stdout + result.stderr
    assert "\x1b" not in result.stdout and "…" not in result.stdout
    lines = result.stdout.splitlines()
    for wanted in NAMES[name]:
        assert any(wanted in line for line in lines), (wanted, result.stdout)
    if name == "list":  # each reason whole on its backend's line, however long
        row = next(line for line in lines if line.startswith("triton-grouped "))
        assert "TRITON_INTERPRET=1" in row or "yes" in row
        assert any(len(line) > 80 for line in lines)


def _data(gemmzoo, tmp_path, name, fmt):
    args, env = _args(name, tmp_path)
    result = gemmzoo(*args, "--format", fmt, **env)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


@pytest.mark.parametrize("name", list(COMMANDS))
def test_json_csv_and_plain_formats_parse(gemmzoo, tmp_path, name):
    document = json.loads(_data(gemmzoo, tmp_path, name, "json"))
    assert document, name
    rows = list(csv.reader(io.StringIO(_data(gemmzoo, tmp_path, name, "csv"))))
    assert len(rows) >= 2 and all(len(row) == len(rows[0]) for row in rows)
    plain = _data(gemmzoo, tmp_path, name, "plain").splitlines()
    assert "\x1b" not in "".join(plain) and "│" not in "".join(plain)
    for wanted in NAMES[name]:
        if name == "cache" or wanted.startswith("float16,"):
            continue
        assert any(wanted in cell for line in plain for cell in line.split("\t")), (wanted, plain)


def test_bench_json_format_is_the_results_document(gemmzoo, tmp_path):
    args, env = _args("bench", tmp_path)
    result = gemmzoo(*args, "--format", "json", **env)
    document = json.loads(result.stdout)
    assert {r["point"] for r in document["results"]} == {"24x16x8-float32-NN", "9x7x5-float32-NN"}
    assert all(r["status"] == "ok" and r["caller_s"] > 0 for r in document["results"])


@pytest.mark.parametrize("fmt", ["table", "plain", "json", "csv"])
def test_compare_takes_every_format(gemmzoo, runs, fmt):
    result = gemmzoo("compare", *runs, "--all", "--format", fmt)
    assert result.returncode in (0, 1), result.stdout + result.stderr  # 1: a regression beyond noise
    if fmt == "json":
        rows = json.loads(result.stdout)["rows"]
        text = " ".join(f"{r['m']}x{r['n']}x{r['k']} {r['backend']}" for r in rows)
    elif fmt == "csv":
        rows = list(csv.DictReader(io.StringIO(result.stdout)))
        assert len(rows) >= 2 and all(None not in row for row in rows)
        text = " ".join(f"{r['m']}x{r['n']}x{r['k']} {r['backend']}" for r in rows)
    else:
        text = result.stdout
        assert "\x1b" not in text and "…" not in text
    assert "24x16x8" in text and "9x7x5" in text and "numpy" in text


def test_text_from_plugins_is_never_markup(site, tmp_path):
    from fake_distributions import write_distribution

    write_distribution(tmp_path, "bracket-dist", "1.0", {"bracket": "bracket_mod"}, {"bracket_mod": """
        import gemmzoo
        from gemmzoo_numpy import NumpyBackend

        class NeedsExtra(NumpyBackend):
            name = "needs-extra"

            def unavailable_reason(self):
                return "install libfoo[cuda] and [bold]x[/bold] first"

        @gemmzoo.hookimpl
        def gemmzoo_register_backends(register):
            register(NeedsExtra())
    """})
    for columns in (80, 200):
        _result, lines = terminal(functools.partial(run_gemmzoo, tmp_path), columns, "list", **LIGHT)
        text = " ".join(" ".join(lines).split())
        assert "libfoo[cuda]" in text and "[bold]x[/bold]" in text


def _gpu_results():
    from gemmzoo.measure import Measurement, Timing
    from gemmzoo.measure.roofline import Roofline
    from gemmzoo.problems.grids import GridPoint
    from gemmzoo.scale.bench import OK, BenchResult

    rng = np.random.default_rng(7)
    points = [GridPoint(4096, 4096, 4096, "float16"), GridPoint(16, 14336, 4096, "bfloat16", "NT")]
    results = []
    for point in points:
        for name in ("torch", "triton-grouped", "torch-compile-cuda"):
            device, host = rng.uniform(1e-5, 3e-4, size=2)
            timing = Timing(device, device * 0.98, device * 1.03, 10, "test")
            measured = Measurement(name, point, timing, 0.5, 1e-7, Timing(host, host, host * 1.01, 5, "test"))
            roof = Roofline(float(rng.uniform(1, 3000)), 989.0, 3350.0, device * 0.8, "compute", 0.8)
            results.append(BenchResult(name, "cuda", point, OK, measured, roof=roof))
    return results


@pytest.mark.parametrize("wide", [False, True], ids=["compact", "wide"])
@pytest.mark.parametrize("columns", [80, 120])
def test_gpu_bench_rows_fit_and_say_what_was_left_out(columns, wide):
    from rich.console import Console

    from gemmzoo.cli.output import emit
    from gemmzoo.results.report import bench_listing

    results = _gpu_results()
    console = Console(width=columns, file=io.StringIO(), force_terminal=True, color_system=None)
    emit(bench_listing(results, "torch"), "table", wide, console=console)
    lines = console.file.getvalue().splitlines()
    assert all(len(line) <= columns for line in lines) and "…" not in "".join(lines)
    rows = [line.split() for line in lines if line.startswith(("4096x4096x4096 ", "16x14336x4096 "))]
    assert len(rows) == len(results)
    assert [row[3] for row in rows] == [r.backend for r in results]  # every name whole
    header = next(line for line in lines if line.startswith("MxNxK"))
    for title in ("caller us", "x base", "verdict"):
        assert title in header
    if columns == 120 and not wide:
        assert "TFLOPS" in header and "left out" not in lines[0]  # the compact table loses nothing
    if wide:
        assert "device us" in header or "left out to fit" in "".join(lines[:2])


def test_compare_at_80_columns_cuts_no_shape_name_or_verdict(gemmzoo, tmp_path):
    """Long shapes, and cells with flags: every shape, backend and verdict whole, the shared
    dtype and layout said once in the title."""
    files = []
    for number in range(2):
        path = tmp_path / f"wide{number}.json"
        result = gemmzoo("bench", "--shape", "1280x1024x16", "--shape", "9x7x5", "--budget", "0.01",
                         "--json", str(path), **LIGHT)
        assert result.returncode == 0, result.stdout + result.stderr
        files.append(str(path))
    result, lines = terminal(gemmzoo, 80, "compare", *files, "--all", **LIGHT)
    assert result.returncode in (0, 1), result.stdout + result.stderr
    boxed = [line for line in lines if line[:1] in "┏┃┡│└"]
    assert boxed and all(len(line) <= 80 for line in boxed), lines
    text = "\n".join(lines)
    assert "…" not in text
    assert "(float32, NN)" in text
    table = [line for line in lines if line.startswith("│")]
    for shape in ("1280x1024x16", "9x7x5"):
        assert any(f"│ {shape} " in line for line in table), text
    assert sum("│ numpy " in line for line in table) == 2
    verdicts = re.findall(r"x[0-9.]+ (SAME|FASTER|SLOWER|AMBIGUOUS)", text)
    assert len(verdicts) == 2, text
