"""``gemmzoo tune --import`` against a corpus of malformed tuning files: every one is rejected
whole (exit 2, one line naming the file, the entry and the field, no traceback) and the database
is unchanged; and a bad row already in a database does not break selection."""

from __future__ import annotations

import copy
import json
import sqlite3
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from sessions import restart

import gemmzoo
from gemmzoo.cli import main
from gemmzoo.plugins.registry import get_registry
from gemmzoo.tuning import TuningCacheWarning, explain, portable, state
from gemmzoo.tuning.db import DB_NAME
from gemmzoo.tuning.fingerprint import device_fingerprint, library_versions

pytestmark = pytest.mark.usefixtures("empty_cache")


def _row(m: int = 24, n: int = 16, k: int = 8, median: Any = 2e-6, backend: str = "numpy") -> dict[str, Any]:
    """A measurement of this machine, as an export writes it."""
    return {
        "device": json.loads(device_fingerprint("cpu")),
        "versions": json.loads(library_versions(backend, get_registry())),
        "backend": backend, "m": m, "n": n, "k": k, "dtype": "float64", "layout": "NN", "status": "ok",
        "median_s": median, "spread_s": 1e-7, "error_ratio": 0.01, "samples": 100, "detail": "",
        "created": time.time() - 60, "host_s": 1e-6, "host_spread_s": 1e-8,
    }


def _verdict(backend: str = "numpy", passed: Any = True) -> dict[str, Any]:
    return {"device": json.loads(device_fingerprint("cpu")), "versions": {"gemmzoo": "0"},
            "backend": backend, "dtype": "float64", "passed": passed, "checks": 40, "failures": 0,
            "detail": "", "created": time.time() - 60}


def _document(*rows: dict[str, Any]) -> dict[str, Any]:
    return {"format": portable.FORMAT, "version": portable.VERSION, "exported": "2026-11-25T00:00:00+00:00",
            "gemmzoo": gemmzoo.__version__, "measurements": list(rows) or [_row()],
            "conformance": [_verdict()]}


def _set(path: str, value: Any, index: int = 0) -> Any:
    """A mutation setting ``measurements[index].path`` (dots go into objects) to ``value``."""
    def mutate(doc: dict[str, Any]) -> None:
        target = doc["measurements"][index]
        *parents, last = path.split(".")
        for part in parents:
            target = target[part]
        target[last] = value
    return mutate


def _drop(field: str) -> Any:
    return lambda doc: doc["measurements"][0].pop(field)


def _nested(depth: int) -> dict[str, Any]:
    inner: dict[str, Any] = {}
    for _ in range(depth):
        inner = {"x": inner}
    return inner


def _top(key: str, value: Any) -> Any:
    return lambda doc: doc.__setitem__(key, value)


def _verdict_field(field: str, value: Any) -> Any:
    return lambda doc: doc["conformance"][0].__setitem__(field, value)


def _second_row_bad(doc: dict[str, Any]) -> None:
    doc["measurements"].append(_row(40, 8, 16, median="fast"))


# (id, mutation of a valid document or raw text, the words the one-line message must hold)
CORPUS: list[tuple[str, Any, str]] = [
    ("median-is-text", _set("median_s", "fast"), "measurements[0].median_s"),
    ("m-is-text", _set("m", "abc"), "measurements[0].m"),
    ("m-is-huge", _set("m", 10**30), "measurements[0].m"),
    ("m-is-zero", _set("m", 0), "measurements[0].m"),
    ("m-is-negative", _set("m", -5), "measurements[0].m"),
    ("m-is-fractional", _set("m", 3.5), "measurements[0].m"),
    ("m-is-bool", _set("m", True), "measurements[0].m"),
    ("median-is-zero", _set("median_s", 0), "measurements[0].median_s"),
    ("median-is-negative", _set("median_s", -1e-3), "measurements[0].median_s"),
    ("median-is-huge", _set("median_s", 1e300), "measurements[0].median_s"),
    ("median-missing-on-ok", _set("median_s", None), "measurements[0].median_s"),
    ("spread-is-negative", _set("spread_s", -1.0), "measurements[0].spread_s"),
    ("host-is-text", _set("host_s", "x"), "measurements[0].host_s"),
    ("error-ratio-is-text", _set("error_ratio", "x"), "measurements[0].error_ratio"),
    ("samples-is-huge", _set("samples", 10**12), "measurements[0].samples"),
    ("unknown-dtype", _set("dtype", "float128"), "measurements[0].dtype"),
    ("unknown-layout", _set("layout", "XY"), "measurements[0].layout"),
    ("unknown-status", _set("status", "great"), "measurements[0].status"),
    ("backend-is-markup", _set("backend", "[/]"), "measurements[0].backend"),
    ("backend-is-a-number", _set("backend", 7), "measurements[0].backend"),
    ("missing-field", _drop("k"), "measurements[0].k"),
    ("unknown-field", _set("extra", 1), "measurements[0].'extra'"),
    ("device-is-text", _set("device", "cpu"), "measurements[0].device"),
    ("unknown-device-kind", _set("device.kind", "tpu"), "measurements[0].device.kind"),
    ("device-nested", _set("device.cache", _nested(50)), "measurements[0].device.cache"),
    ("versions-too-many-keys", _set("versions", {f"lib{i}": "1" for i in range(1000)}),
     "measurements[0].versions"),
    ("detail-is-huge", _set("detail", "x" * 10**6), "measurements[0].detail"),
    ("created-in-the-future", _set("created", 1e12), "measurements[0].created"),
    ("created-is-text", _set("created", "yesterday"), "measurements[0].created"),
    ("escape-in-device-name", _set("device.model", "\x1b[2J\x1b[31mowned"), "measurements[0].device.model"),
    ("escape-in-detail", _set("detail", "line\n\x1b]0;title\x07"), "measurements[0].detail"),
    ("escape-in-version-key", _set("versions.\x1b[1m", "1"), "measurements[0].versions"),
    ("row-is-a-number", lambda doc: doc["measurements"].__setitem__(0, 5), "measurements[0]"),
    ("second-row-bad", _second_row_bad, "measurements[1].median_s"),
    ("measurements-not-a-list", _top("measurements", {"a": 1}), "measurements: must be an array"),
    ("version-is-text", _top("version", "1"), "version"),
    ("newer-version", _top("version", portable.VERSION + 1), "upgrade gemmzoo"),
    ("unknown-top-level-key", _top("rows", []), "'rows'"),
    ("verdict-passed-is-text", _verdict_field("passed", "no"), "conformance[0].passed"),
    ("verdict-checks-negative", _verdict_field("checks", -1), "conformance[0].checks"),
    ("top-level-array", "[]", "not a gemmzoo tuning file"),
    ("empty-file", "", "not valid JSON"),
    ("truncated", "TRUNCATE", "not valid JSON"),
    ("nan-literal", "NAN", "not valid JSON"),
    ("infinity-literal", "INFINITY", "not valid JSON"),
    ("overflowing-number", "OVERFLOW", "measurements[0].median_s"),
    ("duplicate-keys", "DUPLICATE", "duplicate key"),
    ("deep-arrays", "[" * 100_000 + "]" * 100_000, "'[' characters"),
    ("deep-objects", '{"a":' * 100_000 + "1" + "}" * 100_000, "nested too deeply"),
    ("many-arrays", '{"format": "gemmzoo-tuning", "version": 1, "measurements": [' + "[]," * 20_000 + "[]]}",
     "'[' characters"),
    ("not-utf8", b"\xff\xfe{\x00", "not valid JSON"),
]


def _text(kind: Any) -> str | bytes:
    """The file's content: the valid document mutated, or raw text."""
    valid = json.dumps(_document(), indent=1)
    if callable(kind):
        doc = copy.deepcopy(_document())
        kind(doc)
        return json.dumps(doc)
    if kind == "TRUNCATE":
        return valid[: len(valid) // 2]
    if kind == "NAN":
        return valid.replace('"median_s": 2e-06', '"median_s": NaN')
    if kind == "INFINITY":
        return valid.replace('"median_s": 2e-06', '"median_s": Infinity')
    if kind == "OVERFLOW":
        return valid.replace('"median_s": 2e-06', '"median_s": 1e999')
    if kind == "DUPLICATE":
        return valid.replace('"m": 24,', '"m": 24, "m": 2400,')
    return kind


def _database(cache: Path) -> tuple[list[Any], list[Any]]:
    with sqlite3.connect(cache / DB_NAME) as raw:
        return (raw.execute("SELECT * FROM measurements ORDER BY id").fetchall(),
                raw.execute("SELECT * FROM conformance ORDER BY id").fetchall())


@pytest.fixture
def seeded(empty_cache, tmp_path, capsys):
    """A database holding one imported row (and the verdict the import earned), and its content."""
    good = tmp_path / "good.json"
    good.write_text(json.dumps(_document(_row(8, 8, 8))))
    assert main(["tune", "--import", str(good)]) == 0
    capsys.readouterr()
    restart()
    before = _database(empty_cache)
    assert len(before[0]) == 1 and len(before[1]) == 1
    return before


def test_the_corpus_is_large_and_its_valid_document_imports(tmp_path, capsys):
    assert len({name for name, _, _ in CORPUS}) == len(CORPUS) >= 30
    good = tmp_path / "good.json"
    good.write_text(json.dumps(_document()))
    assert main(["tune", "--import", str(good)]) == 0
    assert "imported 1 measurements" in capsys.readouterr().out


@pytest.mark.parametrize(("kind", "expected"), [(kind, expected) for _, kind, expected in CORPUS],
                         ids=[name for name, _, _ in CORPUS])
def test_a_malformed_file_is_rejected_whole(seeded, empty_cache, tmp_path, capsys, kind, expected):
    bad = tmp_path / "bad.json"
    content = _text(kind)
    if isinstance(content, bytes):
        bad.write_bytes(content)
    else:
        bad.write_text(content)
    assert main(["tune", "--import", str(bad)]) == 2
    captured = capsys.readouterr()
    output = captured.out + captured.err
    assert "Traceback" not in output and "\x1b" not in output  # plain text: no escape reaches the terminal
    lines = [line for line in captured.out.splitlines() if line.strip()]
    assert len(lines) == 1, lines
    assert str(bad) in lines[0] and expected in lines[0], lines[0]
    assert len(lines[0]) < 600  # no 200 MB detail copied into the message
    restart()
    assert _database(empty_cache) == seeded


def test_a_file_over_the_size_limit_is_not_read(seeded, empty_cache, tmp_path):
    big = tmp_path / "big.json"
    big.write_text(json.dumps(_document()))
    with pytest.raises(portable.TuningFileError, match=r"big\.json: rejected, nothing imported: \d+ "
                       r"bytes, more than the 100 a tuning file may have"):
        portable.import_tuning(state.store(), big, max_bytes=100)
    assert _database(empty_cache) == seeded
    assert portable.load(big, max_bytes=big.stat().st_size)["format"] == portable.FORMAT  # at the limit: read


def test_too_many_rows_are_refused(seeded, empty_cache, tmp_path):
    many = tmp_path / "many.json"
    many.write_text(json.dumps(_document(_row(1, 1, 1), _row(2, 2, 2), _row(3, 3, 3))))
    with pytest.raises(portable.TuningFileError, match=r"many\.json: rejected, nothing imported: "
                       r"measurements: more than 2 rows \(3\)"):
        portable.import_tuning(state.store(), many, max_rows=2)
    assert _database(empty_cache) == seeded
    assert len(portable.load(many, max_rows=3)["measurements"]) == 3  # at the limit: read


def test_the_poisoned_file_of_the_report_leaves_matmul_working(tmp_path, capsys):
    poisoned = tmp_path / "poison.json"
    poisoned.write_text(json.dumps(_document(_row(), _row(64, 64, 64, median="fast"))))
    assert main(["tune", "--import", str(poisoned)]) == 2
    capsys.readouterr()
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((60, 70)), rng.standard_normal((70, 50))
    assert np.allclose(gemmzoo.matmul(a, b), a @ b)
    assert state.store().count() == 0


def _insert_raw(cache: Path, **changes: Any) -> None:
    """A row written past every check, as an older gemmzoo might have: a valid numpy row of this
    machine with ``changes``."""
    row = _row()
    row.update(device=device_fingerprint("cpu"), versions=library_versions("numpy", get_registry()),
               created=time.time())
    row.update(changes)
    with sqlite3.connect(cache / DB_NAME) as raw:
        columns = ", ".join(row)
        raw.execute(f"INSERT INTO measurements ({columns}) VALUES ({', '.join('?' * len(row))})",
                    tuple(row.values()))


@pytest.mark.parametrize("changes", [{"median_s": "fast"}, {"m": "abc"}, {"median_s": 0.0},
                                     {"dtype": "float128"}, {"median_s": float("nan")}],
                         ids=["text-time", "text-size", "zero-time", "unknown-dtype", "nan-time"])
def test_a_bad_row_in_the_database_is_skipped_with_one_warning(empty_cache, tmp_path, capsys, changes):
    state.store()  # the database exists
    restart()
    _insert_raw(empty_cache, **changes)
    _insert_raw(empty_cache, m=32, n=32, k=32, median_s=5e-6)  # a good row nearby
    assert conformance_passes("numpy", "float64")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        choice = explain((20, 20, 20), "float64", "cpu", measure=False)
        again = explain((30, 30, 30), "float64", "cpu", measure=False)
        exported = tmp_path / "out.json"
        assert main(["tune", "--export", str(exported)]) == 0
    ours = [w for w in caught if issubclass(w.category, TuningCacheWarning)]
    assert len(ours) == 1 and "skipped" in str(ours[0].message)
    assert choice.backend.name == "numpy" and choice.basis == (32, 32, 32) and again.basis == (32, 32, 32)
    rows = json.loads(exported.read_text())["measurements"]
    assert [(r["m"], r["median_s"]) for r in rows] == [(32, 5e-6)]  # the bad row is not copied out


def conformance_passes(name: str, dtype: str) -> bool:
    from gemmzoo.tuning.tune import conformance_verdict

    return bool(conformance_verdict(state.store(), gemmzoo.get_backend(name), dtype))


def test_a_huge_detail_in_the_database_is_cut_when_shown(empty_cache, capsys):
    state.store()
    restart()
    _insert_raw(empty_cache, status="failed", median_s=None, detail="E" * 1_000_000)
    assert conformance_passes("numpy", "float64")
    assert main(["best", "24", "16", "8", "--dtype", "float64", "--device", "cpu", "--no-measure"]) == 0
    out = capsys.readouterr().out
    assert "E" * 100 in out and len(out) < 10_000


@pytest.mark.parametrize(("limit", "content", "expected"), [
    ("MAX_OBJECTS", '{"measurements": [' + ", ".join(["{}"] * 50) + "]}", "more than 20 objects"),
    ("MAX_NUMBERS", '{"measurements": [' + ", ".join(["1.5"] * 50) + "]}", "more than 20 numbers"),
])
def test_a_parse_stops_at_the_objects_and_numbers_a_file_may_hold(seeded, empty_cache, tmp_path, capsys,
                                                                   monkeypatch, limit, content, expected):
    monkeypatch.setattr(portable, limit, 20)
    bomb = tmp_path / "bomb.json"
    bomb.write_text(content)
    assert main(["tune", "--import", str(bomb)]) == 2
    assert expected in capsys.readouterr().out
    assert _database(empty_cache) == seeded
