"""Files in the cache directory are data: a tuning database carrying triggers or views gemmzoo did
not create is refused (moved aside, with a warning), and its triggers never run."""

from __future__ import annotations

import sqlite3
import warnings
from pathlib import Path

import pytest

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
    monkeypatch.delenv(native.ENV_SWITCH, raising=False)
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
