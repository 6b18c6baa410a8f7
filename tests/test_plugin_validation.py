"""Malformed backends are refused at registration, and never crash the conformance suite."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from fake_distributions import run_gemmzoo, write_distribution

import gemmzoo
from gemmzoo.conformance import check_backend
from gemmzoo.plugins.registry import PluginInfo, Registry
from gemmzoo_numpy import NumpyBackend

MALFORMED = """\
import gemmzoo
from gemmzoo_numpy import NumpyBackend


class Malformed(NumpyBackend):
    name = "malformed-backend"
{members}


@gemmzoo.hookimpl
def gemmzoo_register_backends(register):
    register(Malformed())
"""

# entry point -> (class body lines, what the one-line error says)
CASES = {
    "empty-dtypes": ("    dtypes = frozenset()", "dtypes is empty: declare at least one of float16"),
    "string-dtypes": ('    dtypes = "float32"',
                      "dtypes must be a set of dtype names such as frozenset({'float32'}), not str"),
    "list-dtypes": ('    dtypes = ["float32"]', "dtypes must be a set of dtype names"),
    "unknown-dtype": ('    dtypes = frozenset({"float32", "int8"})', "unknown dtypes ['int8']"),
    "number-dtype": ("    dtypes = frozenset({32})", "dtypes holds non-string entries ['32']"),
    "int-name": ("    name = 7", "name must be a str, not int 7"),
    "bad-name": ('    name = "My_Backend"', "name 'My_Backend' is not lowercase kebab-case"),
    "gpu-device": ('    device = "gpu"', "device 'gpu' is neither 'cpu' nor 'cuda'"),
    "none-device": ("    device = None", "device None is neither 'cpu' nor 'cuda'"),
    "bad-accuracy": ('    accuracy = "roughly"', "accuracy 'roughly' is not one of componentwise, normwise"),
    "raising-dtypes": ("    @property\n    def dtypes(self):\n        raise KeyError('float32')",
                       "reading its members raised KeyError: 'float32'"),
}


def module(entry_point: str) -> str:
    return "malformed_" + entry_point.replace("-", "_")


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory):
    site = tmp_path_factory.mktemp("site")
    write_distribution(site, "gemmzoo-malformed", "0.9", {ep: module(ep) for ep in CASES},
                       {module(ep): MALFORMED.format(members=body) for ep, (body, _) in CASES.items()})
    return site


def test_each_malformed_backend_is_refused_in_one_line_naming_the_plugin(site):
    result = run_gemmzoo(site, "list", "--plain", GEMMZOO_DISABLE_PLUGINS="torch,triton,cupy,jax")

    assert result.returncode == 0, result.stderr
    failed = {}
    for line in result.stdout.splitlines():
        if line.startswith("FAILED\t"):
            _, plugin, error = line.split("\t")
            failed[plugin] = error
    assert set(failed) == {f"'{ep}' (gemmzoo-malformed 0.9)" for ep in CASES}
    for ep, (_, expected) in CASES.items():
        error = failed[f"'{ep}' (gemmzoo-malformed 0.9)"]
        assert error.startswith("registered an invalid backend (class Malformed"), error
        assert expected in error, (ep, error)
        source = MALFORMED.format(members=CASES[ep][0]).splitlines()
        line = source.index("    register(Malformed())") + 1
        assert f"(registered at {site / module(ep)}.py:{line})" in error
    names = [line.split("\t")[0] for line in result.stdout.splitlines()]
    assert "malformed-backend" not in names and "numpy" in names


def test_strict_mode_refuses_the_first_malformed_backend_with_one_line(site):
    result = run_gemmzoo(site, "list", "--plain", GEMMZOO_STRICT_PLUGINS="1")

    assert result.returncode == 2
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("gemmzoo list: gemmzoo plugin 'bad-accuracy' (gemmzoo-malformed 0.9): "
                           "registered an invalid backend (class Malformed, name 'malformed-backend'): "
                           "accuracy 'roughly'")


class EmptiesItsDtypes(NumpyBackend):
    """Declares float32 until registered, nothing afterwards: malformed after registration."""

    name = "empties-its-dtypes"

    registered = False

    @property
    def dtypes(self):
        return frozenset() if self.registered else frozenset({"float32"})


def test_a_backend_malformed_after_registration_fails_a_check_instead_of_crashing():
    registry = Registry(strict=True)
    registry.register_plugin(SimpleNamespace(gemmzoo_register_backends=gemmzoo.hookimpl(
        lambda register: register(EmptiesItsDtypes()))), PluginInfo("empties", "empties_mod"))

    backend = registry.get("empties-its-dtypes")
    backend.registered = True

    report = check_backend(backend)

    assert not report.passed
    [failure] = report.failures
    assert failure.check == "backend-members" and "dtypes is empty" in failure.detail


class RaisesInChecks(NumpyBackend):
    name = "raises-in-checks"

    def unavailable_reason(self):
        raise IndexError("tuple index out of range")


class ToNumpyGivesAList(NumpyBackend):
    name = "to-numpy-gives-a-list"

    def to_numpy(self, y):
        return np.asarray(y).tolist()


@pytest.mark.parametrize(("backend", "check", "message"), [
    (RaisesInChecks(), "unavailable-reason",
     "unavailable_reason() raised IndexError: tuple index out of range"),
    (ToNumpyGivesAList(), "float32-random-1x1x1-NN", "to_numpy(A) gave a list, not a numpy.ndarray"),
])
def test_an_exception_inside_a_check_is_a_failed_check(backend, check, message):
    report = check_backend(backend, dtypes=["float32"])

    assert not report.passed
    failures = {r.check: r.detail for r in report.failures}
    assert message in failures[check]


def test_gemmzoo_check_on_a_backend_that_raises_reports_instead_of_crashing(tmp_path):
    write_distribution(tmp_path, "gemmzoo-raiser", "1.0", {"raiser": "raiser_mod"}, {"raiser_mod": """
        import gemmzoo
        from gemmzoo_numpy import NumpyBackend

        class Raiser(NumpyBackend):
            name = "raiser"

            def unavailable_reason(self):
                return None

            def to_numpy(self, y):
                raise IndexError("no such element")

        @gemmzoo.hookimpl
        def gemmzoo_register_backends(register):
            register(Raiser())
    """})

    result = run_gemmzoo(tmp_path, "check", "raiser", "--dtype", "float32")

    assert result.returncode == 1, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    assert "raised IndexError: no such element" in result.stdout
    assert "does not conform" in result.stdout
