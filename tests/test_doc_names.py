"""The README and docs/ name only what exists: every dotted name of gemmzoo or a bundled plugin
they cite in backticks imports or is an attribute, and every ``benchmarks/*.py`` they cite is a
file."""

from __future__ import annotations

import functools
import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
DOTTED = re.compile(r"`((?:gemmzoo|gemmzoo_[a-z]+)(?:\.[A-Za-z_]\w*)+)")
BENCHMARK = re.compile(r"benchmarks/\w+\.py")
SOURCE_FILE = re.compile(r"`([\w/]+\.py)`")
# Files the docs show as examples for a plugin author to write, not files of this repository.
EXAMPLES = {"gemmzoo_einsum/__init__.py"}


def resolves(name: str) -> bool:
    """Whether ``name`` is an importable module or an attribute reached from the longest one."""
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            found = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError as error:
            if error.name and not error.name.startswith("gemmzoo"):  # a framework not installed here
                pytest.skip(f"{name} needs {error.name}")
            continue
        except ImportError:
            continue
        try:
            for attribute in parts[cut:]:
                found = getattr(found, attribute)
        except AttributeError:
            return False
        return True
    return False


def cited(pattern: re.Pattern[str]) -> list[tuple[str, str]]:
    found = {(match.group(1) if match.groups() else match.group(0), doc.name)
             for doc in DOCS for match in pattern.finditer(doc.read_text())}
    return sorted(found)


@pytest.mark.parametrize(("name", "doc"), cited(DOTTED))
def test_a_dotted_name_the_docs_cite_exists(name, doc):
    assert resolves(name), f"{doc} cites `{name}`, which does not import"


@pytest.mark.parametrize(("path", "doc"), cited(BENCHMARK))
def test_a_benchmark_the_docs_cite_exists(path, doc):
    assert (ROOT / path).is_file(), f"{doc} cites {path}, which is not in benchmarks/"


@functools.cache
def _source_files() -> tuple[str, ...]:
    return tuple(path.relative_to(ROOT).as_posix() for folder in ("gemmzoo", "plugins", "benchmarks", "tests")
                 for path in (ROOT / folder).rglob("*.py"))


@pytest.mark.parametrize(("path", "doc"), [pair for pair in cited(SOURCE_FILE) if pair[0] not in EXAMPLES])
def test_a_source_file_the_docs_cite_exists(path, doc):
    # a file is cited by its path below some package (``grouped/split_wave.py``), or by its name
    assert any(("/" + known).endswith("/" + path) for known in _source_files()), (
        f"{doc} cites `{path}`, which no file of the repository's ends with")


def test_a_name_that_is_gone_is_found():
    assert resolves("gemmzoo.conformance.check_backend")
    assert not resolves("gemmzoo_torch.backend.cuda_matmul_precision")
    assert not resolves("gemmzoo.no_such_module.thing")
