"""Files in the cache directory are data: a tuning database carrying triggers or views gemmzoo did
not create is refused (moved aside, with a warning), and its triggers never run."""

from __future__ import annotations

import sqlite3
import warnings
from pathlib import Path

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
    assert any(issubclass(w.category, TuningCacheWarning) and "did not create" in str(w.message) for w in caught)
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
