"""A plugin that fails inside its import is named with its own file and line; ``-v`` and strict
mode print the traceback. Plugins are installed for real (dist-info on a subprocess's path)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from fake_distributions import run_gemmzoo, write_distribution

TABLES = """\
DTYPE_CODES = {"float16": 1}


def code(name):
    return DTYPE_CODES[name]  # line 5


FLOAT32 = code("float32")  # line 8
"""

CALLS_A_LIBRARY = """\
import gemmzoo
import deep_library

SETTINGS = deep_library.load("float32")  # line 4
"""

LIBRARY = """\
def load(name):
    return {}[name]
"""


def write_package(site: Path, package: str, files: dict[str, str]) -> None:
    (site / package).mkdir()
    for name, source in files.items():
        (site / package / name).write_text(textwrap.dedent(source))


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    site = tmp_path_factory.mktemp("site")
    # a package plugin whose submodule raises two calls deep during import
    write_distribution(site, "gemmzoo-deep", "0.2", {"deep": "gemmzoo_deep"}, {})
    write_package(site, "gemmzoo_deep", {"__init__.py": "import gemmzoo\nfrom gemmzoo_deep import tables\n",
                                         "tables.py": TABLES})
    # a module plugin whose import fails inside another distribution's library
    write_distribution(site, "gemmzoo-caller", "0.3", {"caller": "gemmzoo_caller"},
                       {"gemmzoo_caller": CALLS_A_LIBRARY, "deep_library": LIBRARY})
    return site


def failed(stdout: str) -> dict[str, str]:
    lines = (line.split("\t") for line in stdout.splitlines() if line.startswith("FAILED\t"))
    return {plugin: error for _, plugin, error in lines}


def test_import_failure_names_the_plugins_file_and_line(site):
    result = run_gemmzoo(site, "list", "--plain", GEMMZOO_DISABLE_PLUGINS="torch,triton,cupy,jax")

    assert result.returncode == 0, result.stderr
    errors = failed(result.stdout)
    tables = site / "gemmzoo_deep" / "tables.py"
    assert errors["'deep' (gemmzoo-deep 0.2)"] == (
        f"failed to import gemmzoo_deep: KeyError: 'float32' (raised at {tables}:5)")
    # the last frame inside the plugin is its call into the library, not the library's line
    caller = site / "gemmzoo_caller.py"
    assert errors["'caller' (gemmzoo-caller 0.3)"] == (
        f"failed to import gemmzoo_caller: KeyError: 'float32' (raised at {caller}:4)")
    # each warning is issued at that line, not in gemmzoo's files
    assert f"{tables}:5: PluginWarning: gemmzoo plugin 'deep' (gemmzoo-deep 0.2)" in result.stderr
    assert f"{caller}:4: PluginWarning: gemmzoo plugin 'caller' (gemmzoo-caller 0.3)" in result.stderr
    assert "registry.py" not in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize("plain", [True, False], ids=["plain", "table"])
def test_list_verbose_prints_each_traceback(site, plain):
    args = ("list", "-v", "--plain") if plain else ("list", "-v")
    result = run_gemmzoo(site, *args, GEMMZOO_DISABLE_PLUGINS="torch,triton,cupy,jax")

    assert result.returncode == 0, result.stderr
    shown = result.stderr if plain else result.stdout
    assert "traceback of plugin 'deep' (gemmzoo-deep 0.2):" in shown
    assert "Traceback (most recent call last)" in shown
    tables = site / "gemmzoo_deep" / "tables.py"
    assert f'File "{tables}", line 8, in <module>' in shown
    assert f'File "{tables}", line 5, in code' in shown
    assert f'File "{site / "deep_library.py"}", line 2, in load' in shown


def test_strict_mode_prints_the_traceback_and_the_located_error(site):
    result = run_gemmzoo(site, "list", "--plain", GEMMZOO_STRICT_PLUGINS="1")

    assert result.returncode == 2 and result.stdout == ""
    caller = site / "gemmzoo_caller.py"  # 'caller' sorts before 'deep'
    assert f'File "{caller}", line 4, in <module>' in result.stderr
    assert result.stderr.rstrip().endswith(
        "gemmzoo list: gemmzoo plugin 'caller' (gemmzoo-caller 0.3): failed to import gemmzoo_caller: "
        f"KeyError: 'float32' (raised at {caller}:4)")


def test_a_grid_hook_that_raises_warns_at_the_plugins_line(tmp_path):
    write_distribution(tmp_path, "gemmzoo-grids", "0.4", {"grids": "gemmzoo_grids"}, {"gemmzoo_grids": """\
        import gemmzoo


        @gemmzoo.hookimpl
        def gemmzoo_register_grids(register):
            register("fine-grid", [(8, 8, 8)])
            register("bad-grid", [(8, 8)])  # line 7: not (M, N, K)
    """})

    result = run_gemmzoo(tmp_path, "bench", "--list-grids")

    assert result.returncode == 0, result.stdout + result.stderr
    plugin = tmp_path / "gemmzoo_grids.py"
    assert (f"{plugin}:7: PluginWarning: gemmzoo plugin 'grids' (gemmzoo-grids 0.4): gemmzoo_register_grids "
            f"raised GridError") in result.stderr
    assert f"(raised at {plugin}:7)" in result.stderr and "grids.py" not in result.stderr.replace(
        "gemmzoo_grids.py", "")


def test_a_plugin_that_exits_at_import_fails_alone(tmp_path):
    write_distribution(tmp_path, "gemmzoo-quitter", "0.1", {"quitter": "gemmzoo_quitter"},
                       {"gemmzoo_quitter": "import sys\n\nsys.exit(3)\n"})

    result = run_gemmzoo(tmp_path, "list", "--plain", GEMMZOO_DISABLE_PLUGINS="torch,triton,cupy,jax")

    assert result.returncode == 0, result.stderr
    assert (f"FAILED\t'quitter' (gemmzoo-quitter 0.1)\tfailed to import gemmzoo_quitter: SystemExit: 3 "
            f"(raised at {tmp_path / 'gemmzoo_quitter.py'}:3)") in result.stdout.splitlines()
    assert any(line.startswith("numpy\t") for line in result.stdout.splitlines())
