"""``gemmzoo list`` with broken plugins installed for real (dist-info on PYTHONPATH, a subprocess)."""

from __future__ import annotations

import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest
from fake_distributions import subprocess_env, write_distribution

BACKEND_MODULE = """
from gemmzoo import Backend, hookimpl

class FakeBackend(Backend):
    name = {name!r}
    device = "cuda"
    dtypes = frozenset({{"float32"}})

    def unavailable_reason(self):
        return "needs gemmzoo-fine[cuda] and a GPU"

@hookimpl
def gemmzoo_register_backends(register):
    register(FakeBackend())
"""

# entry point -> (distribution, version, module source, what the one-line error must say)
BROKEN = {
    "broken-import": ("gemmzoo-brokenimport", "0.3.1", "import gemmzoo_fake_missing_dependency\n",
                      "failed to import gemmzoo_fake_broken_import: ModuleNotFoundError: "
                      "No module named 'gemmzoo_fake_missing_dependency'"),
    "broken-hook": ("gemmzoo-brokenhook", "1.2.0", """
        from gemmzoo import hookimpl

        @hookimpl
        def gemmzoo_register_backends(register):
            raise RuntimeError("licence server [lic-7]\\n unreachable")
        """, "gemmzoo_register_backends raised RuntimeError: licence server [lic-7] unreachable"),
    "bad-name": ("gemmzoo-badname", "0.0.1", BACKEND_MODULE.format(name="Bad_Name"),
                 "name 'Bad_Name' is not lowercase kebab-case"),
    # another distribution claiming a name of gemmzoo's own (tests/test_plugin_names.py has more)
    "yet-another-numpy": ("gemmzoo-copycat", "2.0", BACKEND_MODULE.format(name="numpy"),
                          "backend name 'numpy' refused for plugin 'yet-another-numpy' (gemmzoo-copycat "
                          "2.0): the name is reserved by gemmzoo's own plugin 'numpy' (gemmzoo "),
}


def module_name(entry_point: str) -> str:
    return "gemmzoo_fake_" + entry_point.replace("-", "_")


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    site = tmp_path_factory.mktemp("site")
    for entry_point, (dist, version, source, _) in BROKEN.items():
        write_distribution(site, dist, version, {entry_point: module_name(entry_point)},
                           {module_name(entry_point): source})
    write_distribution(site, "gemmzoo-fine", "1.0", {"fine": "gemmzoo_fake_fine"},
                       {"gemmzoo_fake_fine": BACKEND_MODULE.format(name="fake-fine")})
    return site


def gemmzoo_list(site: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    # torch is disabled only to keep the subprocess quick; it also exercises the DISABLED line
    env = {"GEMMZOO_DISABLE_PLUGINS": "torch", **env}
    return subprocess.run([sys.executable, "-m", "gemmzoo", "list", *args], capture_output=True,
                          text=True, timeout=120, env=subprocess_env(site, **env))


def test_plain_lists_each_failure_in_one_line_with_its_distribution(site):
    result = gemmzoo_list(site, "--plain")

    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    failed = {}
    for line in lines:
        if line.startswith("FAILED\t"):
            fields = line.split("\t")
            assert len(fields) == 3, line
            failed[fields[1]] = fields[2]
    expected = {f"'{ep}' ({dist} {version})": error for ep, (dist, version, _, error) in BROKEN.items()}
    assert set(failed) == set(expected)
    for plugin, error in expected.items():
        assert error in failed[plugin], (plugin, failed[plugin])
    gemmzoo_version = metadata.version("gemmzoo")
    rows = {fields[0]: fields for fields in (line.split("\t") for line in lines) if len(fields) == 6}
    assert rows["fake-fine"] == ["fake-fine", "cuda", "float32", "no: needs gemmzoo-fine[cuda] and a GPU",
                                 "fine (gemmzoo-fine 1.0)", "componentwise"]
    assert rows["numpy"][1] == "cpu" and rows["numpy"][3] == "yes"
    assert rows["numpy"][4] == f"numpy (gemmzoo {gemmzoo_version})"
    assert "DISABLED\ttorch\tGEMMZOO_DISABLE_PLUGINS" in lines


def test_table_shows_each_failure_in_one_row_with_its_distribution(site):
    result = gemmzoo_list(site)

    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    for ep, (dist, version, _, error) in BROKEN.items():
        plugin = f"'{ep}' ({dist} {version})"
        assert [line for line in lines if plugin in line and error in line], (plugin, result.stdout)
    assert any("fake-fine" in line and "needs gemmzoo-fine[cuda] and a GPU" in line for line in lines)
    assert "disabled by GEMMZOO_DISABLE_PLUGINS: torch" in result.stdout


def test_disabled_plugins_are_not_loaded(site):
    result = gemmzoo_list(site, "--plain", GEMMZOO_DISABLE_PLUGINS="torch,broken-import,broken-hook")

    assert result.returncode == 0, result.stderr
    assert "broken-import" not in result.stderr and "broken-hook" not in result.stderr
    failed = [line for line in result.stdout.splitlines() if line.startswith("FAILED\t")]
    assert len(failed) == 2 and not [line for line in failed if "broken-" in line]
    for name in ("torch", "broken-import", "broken-hook"):
        assert f"DISABLED\t{name}\tGEMMZOO_DISABLE_PLUGINS" in result.stdout.splitlines()


def test_strict_plugins_turns_the_first_failure_into_a_clean_error(site):
    result = gemmzoo_list(site, "--plain", GEMMZOO_STRICT_PLUGINS="1")

    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert ("gemmzoo plugin 'bad-name' (gemmzoo-badname 0.0.1): registered an invalid backend"
            in result.stderr)
    assert result.stdout == ""
