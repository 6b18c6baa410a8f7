"""Installing gemmzoo changes nothing in another project's pytest run.

gemmzoo's pytest plugin is loaded in every pytest run of the environment (``pytest11``), so a
foreign project whose conftest defines its own ``--backend``, ``--grid``, ``--shape``, ``--dtype``
and ``--layout`` must start and pass, with gemmzoo's plugin loaded beside it.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from fake_distributions import subprocess_env

FOREIGN_CONFTEST = '''
def pytest_addoption(parser):
    for name in ("backend", "grid", "shape", "dtype", "layout"):
        parser.addoption(f"--{name}", default=f"{name}-default")
'''

FOREIGN_TEST = '''
import pytest


def test_the_projects_own_options_reach_it(request):
    assert request.config.getoption("backend") == "mine"
    assert request.config.getoption("grid") == "grid-default"
    assert request.config.getoption("dtype") == "int8"


def test_gemmzoo_is_loaded_beside_it(request):
    assert request.config.pluginmanager.hasplugin("gemmzoo")
    assert request.config.getoption("gemmzoo_backend") == []


def test_a_benchmark_of_the_project_keeps_pytest_benchmarks_behaviour(benchmark):
    assert benchmark(sorted, [3, 1, 2]) == [1, 2, 3]
'''


def _pytest(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args],
                          capture_output=True, text=True, cwd=project, env=subprocess_env(project),
                          timeout=300, check=False)


def _foreign_project(tmp_path: Path) -> Path:
    project = tmp_path / "foreign"
    project.mkdir()
    (project / "conftest.py").write_text(textwrap.dedent(FOREIGN_CONFTEST))
    (project / "test_foreign.py").write_text(textwrap.dedent(FOREIGN_TEST))
    return project


def test_a_project_with_its_own_backend_option_starts_and_passes(tmp_path):
    project = _foreign_project(tmp_path)
    run = _pytest(project, "-q", "--backend", "mine", "--dtype", "int8", "--benchmark-disable")
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "3 passed" in run.stdout


def test_gemmzoo_options_are_namespaced(tmp_path):
    project = _foreign_project(tmp_path)
    run = _pytest(project, "--help")
    assert run.returncode == 0, run.stderr[-3000:]
    for name in ("backend", "grid", "shape", "grid-file", "dtype", "layout"):
        assert f"--gemmzoo-{name}" in run.stdout


def _outcome(run: subprocess.CompletedProcess[str]) -> tuple[int, str]:
    lines = [line for line in (run.stdout + run.stderr).splitlines() if line.strip()]
    return run.returncode, lines[-1] if lines else ""


def test_a_projects_benchmarks_under_xdist_behave_as_without_gemmzoo(tmp_path):
    """pytest-benchmark refuses --benchmark-only under xdist; gemmzoo lifts that only for its own
    benchmarks, so another project's run ends exactly as it does with gemmzoo's plugin off."""
    pytest.importorskip("xdist")
    project = _foreign_project(tmp_path)
    args = ("-q", "-n", "2", "--benchmark-only", "--backend", "mine", "--dtype", "int8")
    with_gemmzoo = _outcome(_pytest(project, *args))
    without = _outcome(_pytest(project, "-p", "no:gemmzoo", *args))
    assert with_gemmzoo == without
    assert with_gemmzoo[0] != 0 and "benchmark" in with_gemmzoo[1].lower(), with_gemmzoo
