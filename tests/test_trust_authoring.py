"""Authoring mistakes are reported: a plugin whose hook lacks ``@gemmzoo.hookimpl``, or whose hook
registers nothing, is named in ``gemmzoo list`` and fails strict mode."""

from __future__ import annotations

from pathlib import Path

import pytest
from fake_distributions import run_gemmzoo, write_distribution

MODULES = {
    "gemmzoo_unmarked": ("def gemmzoo_register_backends(register):\n"
                         "    raise AssertionError('never called')\n"),
    "gemmzoo_empty": ("import gemmzoo\n\n@gemmzoo.hookimpl\n"
                      "def gemmzoo_register_backends(register):\n    pass\n"),
}


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("authoring-site")
    entry_points = {"unmarked": "gemmzoo_unmarked", "empty": "gemmzoo_empty"}
    write_distribution(root, "gemmzoo-authoring", "1.0", entry_points, MODULES)
    return root


def test_list_names_an_unmarked_hook_and_one_that_registers_nothing(site: Path, tmp_path: Path) -> None:
    done = run_gemmzoo(site, "list", "--format", "plain", GEMMZOO_CACHE_DIR=str(tmp_path / "cache"))
    assert done.returncode == 0, done.stdout + done.stderr
    failed = [line for line in done.stdout.splitlines() if line.startswith("FAILED")]
    assert any("'unmarked'" in line and "without @gemmzoo.hookimpl" in line for line in failed), done.stdout
    assert any("'empty'" in line and "registered no backend" in line for line in failed), done.stdout


def test_strict_mode_fails_on_them(site: Path, tmp_path: Path) -> None:
    done = run_gemmzoo(site, "list", GEMMZOO_STRICT_PLUGINS="1", GEMMZOO_CACHE_DIR=str(tmp_path / "cache"))
    assert done.returncode != 0
    assert "hookimpl" in done.stdout + done.stderr or "registered no backend" in done.stdout + done.stderr
