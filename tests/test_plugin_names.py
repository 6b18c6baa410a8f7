"""Backend names: gemmzoo's own are reserved, other clashes go to the first entry point by name.

Plugins are installed for real (dist-info on a subprocess's path); warnings must point at the
plugin's own line that registered the refused backend, not at gemmzoo's files.
"""

from __future__ import annotations

from importlib import metadata

import pytest
from fake_distributions import run_gemmzoo, write_distribution

import gemmzoo
from gemmzoo.plugins.registry import PluginInfo, Registry

IMPOSTOR = """\
import numpy as np
import gemmzoo
from gemmzoo_numpy import NumpyBackend


class Impostor(NumpyBackend):
    name = {name!r}

    def matmul(self, a, b):
        return np.zeros((a.shape[0], b.shape[1]), dtype=a.dtype)


@gemmzoo.hookimpl
def gemmzoo_register_backends(register):
    register(Impostor())  # line 15
"""
REGISTER_LINE = 15


def plain_rows(stdout: str) -> dict[str, list[str]]:
    rows = (line.split("\t") for line in stdout.splitlines())
    return {fields[0]: fields for fields in rows if fields[0] not in ("FAILED", "DISABLED")}


def failed_lines(stdout: str) -> list[str]:
    return [line for line in stdout.splitlines() if line.startswith("FAILED\t")]


@pytest.mark.parametrize("entry_point", ["aaa-numpy", "zzz-numpy"])
def test_another_distribution_cannot_take_a_bundled_name(tmp_path, entry_point):
    module = "evil_" + entry_point.replace("-", "_")
    write_distribution(tmp_path, "evil-dist", "6.6", {entry_point: module},
                       {module: IMPOSTOR.format(name="numpy")})

    result = run_gemmzoo(tmp_path, "list", "--plain", GEMMZOO_DISABLE_PLUGINS="torch,triton,cupy,jax")

    assert result.returncode == 0, result.stderr
    own = f"numpy (gemmzoo {metadata.version('gemmzoo')})"
    assert plain_rows(result.stdout)["numpy"][4] == own
    [failed] = failed_lines(result.stdout)
    assert failed.startswith(f"FAILED\t'{entry_point}' (evil-dist 6.6)\tbackend name 'numpy' refused for "
                             f"plugin '{entry_point}' (evil-dist 6.6): the name is reserved by gemmzoo's "
                             f"own plugin 'numpy' (gemmzoo ")
    plugin_file = tmp_path / f"{module}.py"
    assert f"(registered at {plugin_file}:{REGISTER_LINE})" in failed
    # the warning is issued at the plugin's register(...) line, and gemmzoo's files are not blamed
    assert f"{plugin_file}:{REGISTER_LINE}: PluginWarning: gemmzoo plugin '{entry_point}'" in result.stderr
    assert "registry.py" not in result.stderr


def test_the_impostor_never_reaches_check(tmp_path):
    write_distribution(tmp_path, "evil-dist", "6.6", {"aaa": "evil_aaa"},
                       {"evil_aaa": IMPOSTOR.format(name="numpy")})

    result = run_gemmzoo(tmp_path, "check", "numpy", "--dtype", "float32")

    assert result.returncode == 0, result.stdout + result.stderr  # the real numpy conforms
    assert "conforms" in result.stdout


def test_between_two_other_distributions_the_first_entry_point_wins(tmp_path):
    write_distribution(tmp_path, "first-dist", "1.0", {"alpha": "plug_alpha"},
                       {"plug_alpha": IMPOSTOR.format(name="shared-name")})
    write_distribution(tmp_path, "second-dist", "2.0", {"beta": "plug_beta"},
                       {"plug_beta": IMPOSTOR.format(name="shared-name")})

    result = run_gemmzoo(tmp_path, "list", "--plain", GEMMZOO_DISABLE_PLUGINS="torch,triton,cupy,jax")

    assert result.returncode == 0, result.stderr
    assert plain_rows(result.stdout)["shared-name"][4] == "alpha (first-dist 1.0)"
    [failed] = failed_lines(result.stdout)
    # the refused plugin first, then the one that keeps the name
    assert failed.startswith("FAILED\t'beta' (second-dist 2.0)\tbackend name 'shared-name' refused for "
                             "plugin 'beta' (second-dist 2.0): plugin 'alpha' (first-dist 1.0) "
                             "registered it first")
    assert f"{tmp_path / 'plug_beta.py'}:{REGISTER_LINE}: PluginWarning" in result.stderr


def test_strict_mode_refuses_the_impostor_with_its_name(tmp_path):
    write_distribution(tmp_path, "evil-dist", "6.6", {"aaa": "evil_aaa"},
                       {"evil_aaa": IMPOSTOR.format(name="numpy")})

    result = run_gemmzoo(tmp_path, "list", "--plain", GEMMZOO_STRICT_PLUGINS="1")

    assert result.returncode == 2
    assert "gemmzoo plugin 'aaa' (evil-dist 6.6): backend name 'numpy' refused" in result.stderr


def _plugin(backend_name: str) -> object:
    from gemmzoo_numpy import NumpyBackend

    class Named(NumpyBackend):
        name = backend_name

    class Plugin:
        @gemmzoo.hookimpl
        def gemmzoo_register_backends(self, register):
            register(Named())

    return Plugin()


def test_in_process_a_later_own_registration_still_wins():
    registry = Registry(strict=False)
    third = PluginInfo("early", "early_mod", "someone-else", "1.0")
    own = PluginInfo("numpy", "gemmzoo_numpy", "gemmzoo", "0.1.0")
    registry.register_plugin(_plugin("numpy"), third)
    with pytest.warns(gemmzoo.PluginWarning, match="reserved by gemmzoo's own plugin 'numpy'"):
        registry.register_plugin(_plugin("numpy"), own)

    assert registry.provider("numpy") == own
    [failure] = registry.failures
    assert failure.plugin == third
    assert failure.error.startswith("backend name 'numpy' refused for plugin 'early' (someone-else 1.0)")
    assert failure.location is not None and failure.location[0] == __file__  # _plugin's register line
