"""gemmzoo.config: one reader of the environment, one parser per kind of value, ranges checked."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from gemmzoo.config import DEFAULT_TIMEOUT_S, OFF_WORDS, Config, ConfigError, parse_flag, parse_names

ROOT = Path(__file__).resolve().parents[1]


def test_the_environment_is_read_whole_into_a_frozen_config(tmp_path):
    environ = {"GEMMZOO_BACKENDS": " numpy, torch-cpu,,numpy ", "GEMMZOO_CACHE_DIR": str(tmp_path),
               "GEMMZOO_DISABLE_PLUGINS": "a,b", "GEMMZOO_STRICT_PLUGINS": "yes", "GEMMZOO_TUNE": "Off",
               "GEMMZOO_RECORD": "0", "GEMMZOO_TIMEOUT": "2.5", "GEMMZOO_COMPILED_DISPATCH": "no",
               "TRITON_INTERPRET": "1", "PYTEST_XDIST_WORKER": "gw1", "CUDA_VISIBLE_DEVICES": "3,1",
               "GEMMZOO_TRITON_AUTOTUNE": "full", "UNRELATED": "x"}
    config = Config.from_environ(environ)
    assert config.backends == ("numpy", "torch-cpu")
    assert config.cache_dir == tmp_path
    assert config.disabled_plugins == ("a", "b")
    switches = config.strict_plugins, config.tune, config.record, config.compiled_dispatch
    assert switches == (True, False, False, "off")
    assert config.timeout == 2.5 and config.triton_interpret and config.xdist_worker == "gw1"
    assert config.visible_devices == "3,1"
    assert config.variable("GEMMZOO_TRITON_AUTOTUNE") == "full" and config.variable("UNRELATED") == ""
    with pytest.raises(AttributeError):
        config.tune = True  # type: ignore[misc]


def test_an_empty_environment_gives_the_defaults(tmp_path):
    config = Config.from_environ({"GEMMZOO_CACHE_DIR": str(tmp_path)})
    assert config.backends == () and config.disabled_plugins == ()
    switches = config.strict_plugins, config.tune, config.record, config.compiled_dispatch
    assert switches == (False, True, True, "auto")
    assert config.timeout == DEFAULT_TIMEOUT_S
    assert not config.triton_interpret and config.visible_devices is None


@pytest.mark.parametrize("word", [*sorted(OFF_WORDS), " OFF ", "False"])
def test_one_set_of_off_words_for_every_switch(word):
    assert parse_flag(word, True) is False
    assert parse_flag(word, False) is False


@pytest.mark.parametrize("word", ["1", "yes", "on", "true", "anything"])
def test_other_words_turn_a_switch_on(word):
    assert parse_flag(word, False) is True


def test_a_blank_switch_keeps_its_default():
    assert parse_flag("", True) is True and parse_flag("  ", False) is False and parse_flag(None, True)


def test_names_are_stripped_and_deduplicated():
    assert parse_names(" a,,b , a") == ("a", "b") and parse_names(None) == ()


@pytest.mark.parametrize("text", ["1e10", "86401", "inf", "-inf", "nan", "-1", "soon"])
def test_a_bad_timeout_in_the_environment_is_refused_naming_the_variable(text):
    with pytest.raises(ConfigError, match=rf"GEMMZOO_TIMEOUT: timeout must be .*86400.*{text!r}"):
        Config.from_environ({"GEMMZOO_TIMEOUT": text})


@pytest.mark.parametrize(("text", "seconds"), [("0", None), ("off", None), ("none", None), ("86400", 86400.0),
                                               ("0.001", 0.001)])
def test_timeouts_in_range_are_taken(text, seconds):
    assert Config.from_environ({"GEMMZOO_TIMEOUT": text}).timeout == seconds


def test_overrides_are_validated(tmp_path):
    config = Config.from_environ({"GEMMZOO_CACHE_DIR": str(tmp_path)})
    assert config.replace(timeout=5).timeout == 5.0 and config.replace(timeout=0).timeout is None
    assert config.replace(backends="numpy, torch").backends == ("numpy", "torch")
    for bad in (1e10, float("inf"), float("nan"), -1, True, "5"):
        with pytest.raises(ConfigError, match="timeout must be"):
            config.replace(timeout=bad)
    with pytest.raises(ConfigError, match="tune: True or False"):
        config.replace(tune="no")
    with pytest.raises(ConfigError, match=r"unknown configuration field\(s\): tuen"):
        config.replace(tuen=False)


def test_a_child_process_reads_back_the_same_config(tmp_path):
    config = Config.from_environ({"GEMMZOO_CACHE_DIR": str(tmp_path), "GEMMZOO_TRITON_AUTOTUNE": "full"})
    config = config.replace(timeout=7.5, tune=False, backends=("numpy",), record=False)
    again = Config.from_environ(config.child_environment())
    assert again == config


def test_the_command_line_refuses_an_absurd_timeout_with_exit_2(capsys, monkeypatch):
    from gemmzoo.cli import main

    assert main(["best", "8", "8", "8", "--timeout", "1e10"]) == 2
    assert "timeout must be a number of seconds" in capsys.readouterr().err
    monkeypatch.setenv("GEMMZOO_TIMEOUT", "1e10")
    assert main(["list", "--plain"]) == 2
    assert "GEMMZOO_TIMEOUT: timeout must be" in capsys.readouterr().err


def _environment_reads(path: Path) -> list[int]:
    """Lines of ``path`` that touch ``os.environ`` or call ``os.getenv``."""
    tree = ast.parse(path.read_text(), str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in ("environ", "getenv", "environb") \
                and isinstance(node.value, ast.Name) and node.value.id == "os":
            found.append(node.lineno)
    return found


def test_only_the_configuration_module_touches_os_environ_in_the_core():
    offenders = {str(path.relative_to(ROOT)): lines for path in sorted((ROOT / "gemmzoo").rglob("*.py"))
                 if path.name != "config.py" or path.parent.name != "gemmzoo"
                 if (lines := _environment_reads(path))}
    assert offenders == {}


def test_plugins_read_no_gemmzoo_variable_from_the_environment():
    # a plugin may read its own library's variables (CUPY_TF32, TRITON_INTERPRET); gemmzoo's come
    # from the session's configuration
    offenders = []
    for path in sorted((ROOT / "plugins").rglob("*.py")):
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if "os.environ" in line and "GEMMZOO_" in line:
                offenders.append(f"{path.relative_to(ROOT)}:{number}")
    assert offenders == []


@pytest.mark.parametrize(("text", "mode"), [("", "auto"), ("auto", "auto"), (" AUTO ", "auto"), ("1", "on"),
                                           ("on", "on"), ("yes", "on"), ("0", "off"), ("off", "off"),
                                           ("False", "off")])
def test_the_compiled_dispatch_is_auto_on_or_off(tmp_path, text, mode):
    environ = {"GEMMZOO_CACHE_DIR": str(tmp_path), "GEMMZOO_COMPILED_DISPATCH": text}
    config = Config.from_environ(environ)
    assert config.compiled_dispatch == mode
    assert Config.from_environ(config.child_environment()).compiled_dispatch == mode  # a worker's is the same
    assert config.replace(compiled_dispatch=True).compiled_dispatch == "on"  # the switch it was
    assert config.replace(compiled_dispatch=False).compiled_dispatch == "off"
    with pytest.raises(ConfigError, match="compiled_dispatch: one of auto, on, off"):
        config.replace(compiled_dispatch="sometimes")
