"""Plugin loading with plugins installed for real (distributions on a subprocess's path)."""

from __future__ import annotations

import pytest

import gemmzoo
from gemmzoo.registry import Registry
from tests.support.fake_dist import install_plugin, run_gemmzoo

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


def test_broken_import_is_a_warning_naming_plugin_and_distribution(tmp_path):
    install_plugin(tmp_path, "broken-dist", {"broken": "broken_mod"},
                   {"broken_mod": "raise ImportError('needs a library that is not here')"})
    result = run_gemmzoo(tmp_path, "list", "--plain")
    assert result.returncode == 0, result.stderr
    assert "PluginWarning" in result.stderr and "'broken' (broken-dist 1.0)" in result.stderr
    failed = [line for line in result.stdout.splitlines() if line.startswith("FAILED")]
    assert len(failed) == 1 and "needs a library that is not here" in failed[0]
    names = [line.split("\t")[0] for line in result.stdout.splitlines()]
    assert {"numpy", "torch-cpu", "torch"} <= set(names)


def test_hook_that_raises_is_a_warning_and_others_keep_working(tmp_path):
    install_plugin(tmp_path, "raising-dist", {"raising": "raising_mod"}, {"raising_mod": """
        import gemmzoo
        from gemmzoo_numpy import NumpyBackend

        class Half(NumpyBackend):
            name = "half-registered"

        @gemmzoo.hookimpl
        def gemmzoo_register_backends(register):
            register(Half())
            raise RuntimeError("hook exploded")
    """})
    install_plugin(tmp_path, "good-dist", {"good": "good_mod"}, {"good_mod": GOOD_PLUGIN})
    result = run_gemmzoo(tmp_path, "list", "--plain")
    assert result.returncode == 0, result.stderr
    assert "'raising' (raising-dist 1.0)" in result.stderr and "hook exploded" in result.stderr
    names = [line.split("\t")[0] for line in result.stdout.splitlines()]
    assert "extra-numpy" in names and "numpy" in names
    assert "half-registered" not in names  # a hook that raised registers nothing


def test_duplicate_name_names_both_plugins_and_first_keeps_it(tmp_path):
    install_plugin(tmp_path, "copycat-dist", {"zz-copycat": "copycat_mod"}, {"copycat_mod": """
        import gemmzoo
        from gemmzoo_numpy import NumpyBackend

        class Copycat(NumpyBackend):
            device = "cuda"  # distinguishable from the real one

        @gemmzoo.hookimpl
        def gemmzoo_register_backends(register):
            register(Copycat())
    """})
    result = run_gemmzoo(tmp_path, "list", "--plain")
    assert result.returncode == 0, result.stderr
    message = result.stderr
    assert "backend name 'numpy'" in message
    assert "'numpy' (gemmzoo" in message and "'zz-copycat' (copycat-dist 1.0)" in message
    numpy_rows = [line.split("\t") for line in result.stdout.splitlines() if line.startswith("numpy\t")]
    assert numpy_rows == [numpy_rows[0]] and numpy_rows[0][1] == "cpu"


def test_strict_mode_makes_a_failure_an_error(tmp_path):
    install_plugin(tmp_path, "broken-dist", {"broken": "broken_mod"},
                   {"broken_mod": "raise ImportError('nope')"})
    result = run_gemmzoo(tmp_path, "list", GEMMZOO_STRICT_PLUGINS="1")
    assert result.returncode == 2
    assert "'broken' (broken-dist 1.0)" in result.stderr and "nope" in result.stderr


def test_disabled_plugins_are_not_imported(tmp_path):
    marker = tmp_path / "imported.txt"
    install_plugin(tmp_path, "noisy-dist", {"noisy": "noisy_mod"},
                   {"noisy_mod": f"open({str(marker)!r}, 'w').write('imported')\n"})
    result = run_gemmzoo(tmp_path, "list", "--plain", GEMMZOO_DISABLE_PLUGINS="noisy, torch")
    assert result.returncode == 0, result.stderr
    assert not marker.exists()
    names = [line.split("\t")[0] for line in result.stdout.splitlines()]
    assert "numpy" in names and "torch-cpu" not in names


def test_invalid_backend_is_rejected_with_the_plugin_named(tmp_path):
    install_plugin(tmp_path, "bad-dist", {"bad": "bad_mod"}, {"bad_mod": """
        import gemmzoo
        from gemmzoo_numpy import NumpyBackend

        class BadName(NumpyBackend):
            name = "Bad_Name"

        @gemmzoo.hookimpl
        def gemmzoo_register_backends(register):
            register(BadName())
    """})
    result = run_gemmzoo(tmp_path, "list", "--plain")
    assert "'bad' (bad-dist 1.0)" in result.stderr and "kebab-case" in result.stderr
    assert "Bad_Name" not in [line.split("\t")[0] for line in result.stdout.splitlines()]


def test_third_party_backend_is_checked_by_the_cli(tmp_path):
    install_plugin(tmp_path, "good-dist", {"good": "good_mod"}, {"good_mod": GOOD_PLUGIN})
    result = run_gemmzoo(tmp_path, "check", "extra-numpy", "--dtype", "float32")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "conforms" in result.stdout


def test_unknown_backend_lists_known_names():
    with pytest.raises(gemmzoo.UnknownBackendError, match="numpy") as info:
        gemmzoo.get_backend("no-such-backend")
    assert "no-such-backend" in str(info.value)


def test_selection_from_environment(monkeypatch):
    registry = gemmzoo.get_registry()
    monkeypatch.setenv("GEMMZOO_BACKENDS", "torch-cpu, numpy")
    assert [b.name for b in registry.select()] == ["torch-cpu", "numpy"]
    assert [b.name for b in registry.select(["numpy"])] == ["numpy"]
    monkeypatch.setenv("GEMMZOO_BACKENDS", "numpy,nope")
    with pytest.raises(gemmzoo.UnknownBackendError, match="nope"):
        registry.select()


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
