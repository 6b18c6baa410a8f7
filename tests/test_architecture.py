"""docs/architecture.md names every module of the core and of the bundled plugins."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = (ROOT / "docs" / "architecture.md").read_text()
NAMED = set(re.findall(r"`([^`]+)`", DOC))


def _named(path: Path, package_root: Path) -> bool:
    """Whether the doc names ``path``: its file name, its path within its package, or (for a
    package's ``__init__.py``) its folder, in backticks."""
    relative = path.relative_to(package_root)
    if path.name == "__init__.py":
        folder = relative.parent
        return str(folder) in (".", "") or f"{folder}/" in NAMED or str(folder) in NAMED \
            or f"{folder.name}/" in NAMED or folder.name in NAMED
    return path.name in NAMED or str(relative) in NAMED or path.stem in NAMED


def _missing(package_root: Path) -> list[str]:
    return [str(path.relative_to(ROOT)) for path in sorted(package_root.rglob("*.py"))
            if "__pycache__" not in path.parts and not _named(path, package_root)]


def test_every_core_module_is_in_the_architecture():
    assert _missing(ROOT / "gemmzoo") == []


def test_every_bundled_plugin_module_is_in_the_architecture():
    assert _missing(ROOT / "plugins") == []


def test_a_module_the_doc_does_not_name_is_found_missing():
    assert not _named(ROOT / "gemmzoo" / "undescribed_module.py", ROOT / "gemmzoo")
    assert not _named(ROOT / "gemmzoo" / "undescribed" / "__init__.py", ROOT / "gemmzoo")
    assert _named(ROOT / "gemmzoo" / "session.py", ROOT / "gemmzoo")


def test_the_root_holds_the_public_face_only():
    root_modules = sorted(path.name for path in (ROOT / "gemmzoo").glob("*.py"))
    assert len(root_modules) <= 12, root_modules
