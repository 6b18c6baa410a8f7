"""Plugin loading with plugins installed for real (distributions on a subprocess's path)."""

from __future__ import annotations

from pathlib import Path

import pytest
from fake_distributions import run_gemmzoo, write_distribution
from sessions import reconfigure

import gemmzoo
from gemmzoo.plugins.registry import Registry

GOOD_PLUGIN = """
    import numpy as np
    import gemmzoo
    from gemmzoo_numpy import NumpyBackend

    class Extra(NumpyBackend):
        name = "extra-numpy"

    @gemmzoo.hookimpl
    def gemmzoo_register_backends(register):
        register(Extra())
"""



def test_hook_that_raises_is_a_warning_and_others_keep_working(tmp_path):
    write_distribution(tmp_path, "raising-dist", "1.0", {"raising": "raising_mod"}, {"raising_mod": """
        import gemmzoo
        from gemmzoo_numpy import NumpyBackend

        class Half(NumpyBackend):
            name = "half-registered"

        @gemmzoo.hookimpl
        def gemmzoo_register_backends(register):
            register(Half())
            raise RuntimeError("hook exploded")
    """})
    write_distribution(tmp_path, "good-dist", "1.0", {"good": "good_mod"}, {"good_mod": GOOD_PLUGIN})
    result = run_gemmzoo(tmp_path, "list", "--plain")
    assert result.returncode == 0, result.stderr
    assert "'raising' (raising-dist 1.0)" in result.stderr and "hook exploded" in result.stderr
    names = [line.split("\t")[0] for line in result.stdout.splitlines()]
    assert "extra-numpy" in names and "numpy" in names
    assert "half-registered" not in names  # a hook that raised registers nothing




def test_disabled_plugins_are_not_imported(tmp_path):
    marker = tmp_path / "imported.txt"
    write_distribution(tmp_path, "noisy-dist", "1.0", {"noisy": "noisy_mod"},
                       {"noisy_mod": f"open({str(marker)!r}, 'w').write('imported')\n"})
    result = run_gemmzoo(tmp_path, "list", "--plain", GEMMZOO_DISABLE_PLUGINS="noisy, torch")
    assert result.returncode == 0, result.stderr
    assert not marker.exists()
    names = [line.split("\t")[0] for line in result.stdout.splitlines()]
    assert "numpy" in names and "torch-cpu" not in names



def test_third_party_backend_is_checked_by_the_cli(tmp_path):
    write_distribution(tmp_path, "good-dist", "1.0", {"good": "good_mod"}, {"good_mod": GOOD_PLUGIN})
    result = run_gemmzoo(tmp_path, "check", "extra-numpy", "--dtype", "float32")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "conforms" in result.stdout


def test_unknown_backend_lists_known_names():
    with pytest.raises(gemmzoo.UnknownBackendError, match="numpy") as info:
        gemmzoo.get_backend("no-such-backend")
    assert "no-such-backend" in str(info.value)


def test_selection_from_environment(monkeypatch):
    from gemmzoo.session import current

    monkeypatch.setenv("GEMMZOO_BACKENDS", "torch-cpu, numpy")
    reconfigure()
    assert [b.name for b in current().select()] == ["torch-cpu", "numpy"]
    assert [b.name for b in current().select(["numpy"])] == ["numpy"]
    everything = [b.name for b in current().registry.select()]  # the registry itself selects nothing
    assert {"numpy", "torch-cpu"} < set(everything) and everything == [b.name for b in gemmzoo.backends()]
    monkeypatch.setenv("GEMMZOO_BACKENDS", "numpy,nope")
    reconfigure()
    with pytest.raises(gemmzoo.UnknownBackendError, match="nope"):
        current().select()


def test_in_process_registration_and_stable_order():
    from gemmzoo_numpy import NumpyBackend

    class Second(NumpyBackend):
        name = "second"

    class First(NumpyBackend):
        name = "first"

    class Plugin:
        @gemmzoo.hookimpl
        def gemmzoo_register_backends(self, register):
            register(Second())
            register(First())

    registry = Registry(strict=True)
    registry.register_plugin(Plugin())
    assert registry.names() == ["second", "first"]
    assert registry.provider("first").name == "Plugin"
    with pytest.raises(gemmzoo.PluginError, match="'Plugin'"):
        registry.register_plugin(type("Other", (), {"gemmzoo_register_backends": staticmethod(
            gemmzoo.hookimpl(lambda register: register(First())))})())


def test_the_registry_module_imports_no_session():
    """The registry is owned by the session (:meth:`gemmzoo.Session.registry`), never the other
    way round: its plugin settings and the registry to check a backend against are passed in."""
    import ast

    import gemmzoo.plugins.registry as registry_module

    tree = ast.parse(Path(registry_module.__file__).read_text())
    imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    imported |= {a.name for node in ast.walk(tree) if isinstance(node, ast.Import) for a in node.names}
    assert "gemmzoo.session" not in imported and "gemmzoo.tuning.state" not in imported, imported
    assert "gemmzoo.config" in imported  # what it needs comes as a Config
