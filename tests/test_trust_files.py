"""Files in the cache directory are data: a tuning database carrying triggers or views gemmzoo did
not create is refused (moved aside, with a warning), and its triggers never run."""

from __future__ import annotations

import sqlite3
import warnings
from pathlib import Path

import pytest
from sessions import reconfigure

from gemmzoo.tuning.db import DB_NAME, TuningCacheWarning, open_store


def _forged(directory: Path, sql: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    open_store(directory).close()  # a genuine database first
    path = directory / DB_NAME
    db = sqlite3.connect(path)
    db.execute(sql)
    db.commit()
    db.close()
    return path


def test_a_database_with_a_trigger_is_refused_and_its_trigger_never_fires(tmp_path: Path) -> None:
    path = _forged(tmp_path, "CREATE TRIGGER forge AFTER INSERT ON measurements BEGIN "
                             "UPDATE conformance SET passed = 1; END")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        store = open_store(tmp_path)
    refused = [w for w in caught if issubclass(w.category, TuningCacheWarning)]
    assert any("did not create" in str(w.message) for w in refused)
    kinds = {row[0] for row in store._db.execute("SELECT type FROM sqlite_master").fetchall()}
    assert "trigger" not in kinds
    store.close()
    assert list(path.parent.glob(f"{DB_NAME}.corrupt-*"))  # the forged file is kept aside, not deleted


def test_a_database_with_a_view_is_refused(tmp_path: Path) -> None:
    _forged(tmp_path, "CREATE VIEW everything AS SELECT * FROM measurements")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        open_store(tmp_path).close()
    assert any("view 'everything'" in str(w.message) for w in caught)


def test_a_genuine_database_opens_without_a_warning(tmp_path: Path) -> None:
    open_store(tmp_path).close()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        open_store(tmp_path).close()


def test_a_shared_object_planted_in_the_cache_directory_is_never_loaded(tmp_path: Path, monkeypatch) -> None:
    pytest.importorskip("torch")
    from gemmzoo import native

    monkeypatch.setenv("GEMMZOO_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv(native.ENV_SWITCH, "on")
    reconfigure()  # a session of this cache directory: settings are read once per session
    imported: list[Path] = []
    monkeypatch.setattr(native, "_import", lambda name, library: imported.append(library) or object())
    monkeypatch.setattr(native, "_loaded", {})
    name, directory = native._identity(native._torch_version())
    library = native._library(name, directory)
    directory.mkdir(parents=True)
    library.write_bytes(b"\x7fELF planted")
    library.chmod(0o644)
    assert native.load() is None and imported == []
    status = native.status()
    assert not status.built and "did not build it" in status.reason
    record = native._manifest(library)
    record.write_text("0" * 64)  # a record that does not match
    record.chmod(0o644)
    assert native.load() is None and imported == []
    record.write_text(native._digest(library))  # as build() records it: then, and only then, loaded
    assert native.load() is not None and imported == [library]


def test_control_characters_from_a_plugin_leave_the_result_file_readable(tmp_path: Path) -> None:
    from misbehaving_plugins import Plain

    from gemmzoo.problems.grids import GridPoint
    from gemmzoo.results.compare import compare_runs
    from gemmzoo.results.report import write_json
    from gemmzoo.results.runs import load_run
    from gemmzoo.scale.bench import ERROR, bench_one

    class Shouting(Plain):
        name = "shouting"

        def matmul(self, a, b):
            raise RuntimeError("\x1b[2J\rALL BACKENDS CONFORM "
                               "\x1b]8;;http://x\x07link\x1b]8;;\x07 \u202eevil")

    result = bench_one(Shouting(), GridPoint(8, 8, 8, "float32"), budget_s=0.01)
    assert result.status == ERROR
    assert "\x1b" not in result.detail and "\r" not in result.detail and "\u202e" not in result.detail
    assert "\\x1b[2J\\rALL BACKENDS CONFORM" in result.detail  # written out, still readable
    paths = [tmp_path / "a.json", tmp_path / "b.json"]
    for path in paths:
        write_json([result], path)
    [row] = compare_runs([load_run(p) for p in paths])
    assert row.cells[0].result.detail == result.detail


def test_a_bad_output_path_is_refused_before_the_run(tmp_path: Path) -> None:
    from fake_distributions import run_gemmzoo

    for option, path in (("--json", tmp_path / "missing" / "r.json"), ("--csv", tmp_path)):
        done = run_gemmzoo(tmp_path, "bench", "--backend", "numpy", "--shape", "64x64x64", option, str(path),
                           GEMMZOO_CACHE_DIR=str(tmp_path / "cache"))
        assert done.returncode == 2 and "nothing was run" in done.stderr, done.stdout + done.stderr
        assert "Traceback" not in done.stderr


def test_results_are_written_atomically(tmp_path: Path, monkeypatch) -> None:
    from gemmzoo.results import atomic_file

    target = tmp_path / "r.json"
    target.write_text("previous, whole\n")

    def broken_fsync(_fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(atomic_file.os, "fsync", broken_fsync)
    with pytest.raises(OSError):
        atomic_file.write_atomically(target, "new" * 1000)
    assert target.read_text() == "previous, whole\n"
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]  # no temporary left behind


def _verdict_stored(cache: Path) -> bool:
    """Whether the tuning cache in ``cache`` holds a conformance verdict (read only; False while
    there is none to read)."""
    try:
        db = sqlite3.connect(f"{(cache / DB_NAME).as_uri()}?mode=ro", uri=True, timeout=0.1)
        try:
            return db.execute("SELECT COUNT(*) FROM conformance").fetchone()[0] > 0
        finally:
            db.close()
    except sqlite3.Error:
        return False


def test_sigterm_during_bench_writes_the_results_so_far(tmp_path: Path) -> None:
    import json
    import signal
    import subprocess
    import sys
    import time

    from fake_distributions import subprocess_env

    out = tmp_path / "r.json"
    shapes = [f"{512 + 8 * i}x512x512" for i in range(40)]  # each spends its whole 0.5 s
    child = subprocess.Popen([sys.executable, "-m", "gemmzoo", "bench", "--backend", "numpy",
                              "--budget", "0.5", "--rounds", "1", "--max-noise", "0",  # each spends 0.5 s
                              "--json", str(out), "--format", "plain",
                              *[x for shape in shapes for x in ("--shape", shape)]],
                             env=subprocess_env(tmp_path, GEMMZOO_CACHE_DIR=str(tmp_path / "cache")),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # SIGTERM once the bench is measuring: its suite's verdict is stored first, then each shape
    # takes its 0.5 s (8 s in all where the verdict is not seen)
    deadline = time.monotonic() + 8
    while time.monotonic() < deadline and child.poll() is None and not _verdict_stored(tmp_path / "cache"):
        time.sleep(0.05)
    time.sleep(2.5 if time.monotonic() < deadline else 0)
    child.send_signal(signal.SIGTERM)
    stdout, stderr = child.communicate(timeout=120)
    assert child.returncode == 130, stdout + stderr
    written = json.loads(out.read_text())
    assert written.get("interrupted") is True and 0 < len(written["results"]) < len(shapes), stderr


@pytest.mark.parametrize("content", [b"\xff\xfe[[1, 2, 3]]", ("[" * 100_000 + "]" * 100_000).encode()])
def test_a_grid_file_not_utf8_or_nested_too_deeply_is_exit_2(tmp_path: Path, content: bytes, capsys) -> None:
    from gemmzoo.cli import main

    grid = tmp_path / "grid.json"
    grid.write_bytes(content)
    assert main(["bench", "--backend", "numpy", "--file", str(grid)]) == 2
    assert "grid file" in capsys.readouterr().err


def test_best_of_a_size_past_any_row_is_exit_2(capsys, empty_cache: Path) -> None:
    from gemmzoo.cli import main

    assert main(["best", "9223372036854775808", "1", "1", "--no-measure"]) == 2
    assert "at most 2147483647" in capsys.readouterr().err


def test_cache_clear_during_a_tune_keeps_the_rows_stored_after_it(empty_cache: Path) -> None:
    import time

    from gemmzoo.cli import main
    from gemmzoo.tuning import Record
    from gemmzoo.tuning.db import TuningStore

    def row(m: int) -> Record:
        return Record("cpu-fp", "{}", "numpy", m, 8, 8, "float32", "NN", "ok", 1e-5, 1e-7, 0.5, 10, "",
                      time.time())

    empty_cache.mkdir(parents=True, exist_ok=True)
    tuning = TuningStore(empty_cache / DB_NAME)  # a running tune's own connection
    tuning.add([row(8)])
    assert main(["cache", "--clear"]) == 0
    tuning.add([row(16)])  # stored, as tune reports, after the clear
    tuning.close()
    reader = TuningStore(empty_cache / DB_NAME)
    assert [r.m for r in reader.all_records()] == [16]
    reader.close()
