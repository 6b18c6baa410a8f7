"""Accuracy classes: the suite's scaled and cancelling cases catch a backend accurate only normwise
(one-level Strassen) unless it declares so, and declaring normwise excuses nothing else."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import strassen_plugin
from fake_distributions import run_gemmzoo, write_distribution
from strassen_plugin import StrassenBackend
from test_suite_catches import WRONG

from gemmzoo.conformance import check_backend, conformance_cases
from gemmzoo.conformance.bounds import NORMWISE_FACTOR, class_bound, normwise_magnitude, reference
from gemmzoo_numpy import NumpyBackend


class HonestStrassen(StrassenBackend):
    name = "strassen-normwise"
    accuracy = "normwise"


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_strassen_fails_the_componentwise_bound_on_scaled_and_cancelling_cases(dtype):
    report = check_backend(StrassenBackend(), dtypes=[dtype])

    failed = {r.check for r in report.failures}
    assert not report.passed
    assert f"{dtype}-scaled-64x48x80-NN" in failed and f"{dtype}-cancel-48x40x64-NN" in failed
    # every other case passes: without the scaled cases the suite would call it conforming
    assert failed <= {c.id for c in conformance_cases(dtype) if c.kind in ("scaled", "cancel")}
    assert all("outside the error bound" in r.detail for r in report.failures)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_strassen_that_declares_normwise_passes(dtype):
    report = check_backend(HonestStrassen(), dtypes=[dtype])

    assert report.passed, [(r.check, r.detail) for r in report.failures]
    scaled = [r for r in report.results if "-scaled-" in r.check]
    assert scaled and all("(normwise bound)" in r.detail for r in scaled)


def test_a_classical_backend_meets_the_normwise_bound_too():
    class NormwiseNumpy(NumpyBackend):
        name = "numpy-declared-normwise"
        accuracy = "normwise"

    report = check_backend(NormwiseNumpy())
    assert report.passed, [(r.check, r.detail) for r in report.failures]


@pytest.mark.parametrize(("backend_class", "expected"), WRONG, ids=[cls.name for cls, _ in WRONG])
def test_declaring_normwise_excuses_no_wrong_result(backend_class, expected):
    lenient = type(f"Normwise{backend_class.__name__}", (backend_class,), {"accuracy": "normwise"})

    report = check_backend(lenient(), dtypes=["float32"])

    assert not report.passed
    assert any(expected in r.check for r in report.failures), [r.check for r in report.failures]


def test_normwise_bound_holds_the_componentwise_one():
    rng = np.random.default_rng(5)
    a = rng.standard_normal((9, 7)) * 10.0 ** rng.uniform(-3, 3, (9, 1))
    b = rng.standard_normal((7, 5))
    ref, magnitude = reference(a, b)

    componentwise = class_bound("componentwise", "float32", a, b, ref, magnitude)
    normwise = class_bound("normwise", "float32", a, b, ref, magnitude)

    assert np.all(normwise >= componentwise)
    largest_row = np.linalg.norm(a, axis=1).max()
    assert normwise_magnitude(a, b) == pytest.approx(largest_row * np.linalg.norm(b, axis=0).max())
    assert NORMWISE_FACTOR * normwise_magnitude(a, b) >= magnitude.max()


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    site = tmp_path_factory.mktemp("site")
    source = Path(strassen_plugin.__file__).read_text()
    honest = source + '\n\nStrassenBackend.name = "strassen-honest"\nStrassenBackend.accuracy = "normwise"\n'
    write_distribution(site, "gemmzoo-strassen", "1.0", {"strassen": "gemmzoo_strassen"},
                       {"gemmzoo_strassen": source})
    write_distribution(site, "gemmzoo-strassen-honest", "1.0", {"strassen-honest": "gemmzoo_strassen_honest"},
                       {"gemmzoo_strassen_honest": honest})
    return site


def test_gemmzoo_check_fails_the_installed_strassen_plugin(site):
    result = run_gemmzoo(site, "check", "strassen-one-level", "--dtype", "float32")

    assert result.returncode == 1, result.stdout + result.stderr
    assert "FAIL strassen-one-level float32-scaled-64x48x80-NN" in result.stdout
    assert "does not conform" in result.stdout


def test_gemmzoo_check_passes_the_installed_strassen_plugin_that_declares_normwise(site):
    result = run_gemmzoo(site, "check", "strassen-honest", "-v")

    assert result.returncode == 0, result.stdout + result.stderr
    assert "ok strassen-honest float64-scaled-64x48x80-NN: max error" in result.stdout
    assert "(normwise bound)" in result.stdout
    lines = result.stdout.splitlines()
    summary = next(line for line in lines if "strassen-honest" in line and "conforms" in line)
    assert "normwise" in summary  # the summary table's accuracy column


def test_gemmzoo_list_shows_each_backends_class(site):
    result = run_gemmzoo(site, "list", "--plain", GEMMZOO_DISABLE_PLUGINS="torch,triton,cupy,jax")

    assert result.returncode == 0, result.stderr
    rows = {fields[0]: fields for fields in (line.split("\t") for line in result.stdout.splitlines())}
    assert rows["strassen-honest"][5] == "normwise"
    assert rows["strassen-one-level"][5] == "componentwise" and rows["numpy"][5] == "componentwise"
    table = run_gemmzoo(site, "list", GEMMZOO_DISABLE_PLUGINS="torch,triton,cupy,jax")
    assert any("strassen-honest" in line and "normwise" in line for line in table.stdout.splitlines())
