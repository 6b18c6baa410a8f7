"""Every JSON file in docs/results is a result file in gemmzoo's one format: it passes the
validated loader whole, and ``gemmzoo compare`` reads it."""

from __future__ import annotations

from pathlib import Path

import pytest

from gemmzoo.results.runs import load_run
from gemmzoo.results.schema import FORMAT, VERSION, load_document

RESULTS = Path(__file__).resolve().parent.parent / "docs" / "results"
FILES = sorted(RESULTS.rglob("*.json"))


def test_there_are_result_files():
    assert len(FILES) >= 10


@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_each_result_file_loads(path):
    data = load_document(path)
    assert data["format"] == FORMAT and data["version"] == VERSION
    run = load_run(path)
    assert run.results and len(run.results) == len(data["results"])
    assert run.created and run.environment


def test_the_readme_lists_every_file():
    readme = (RESULTS / "README.md").read_text()
    listed = [p for p in RESULTS.rglob("*") if p.is_file() and p.name != "README.md"]
    names = [p.relative_to(RESULTS).as_posix() for p in listed]
    missing = [name for name in names if f"]({name})" not in readme]
    assert not missing
