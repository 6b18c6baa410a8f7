"""The example third-party plugin, installed with pip into a fresh virtual environment.

This is what a plugin author's users do: ``pip install gemmzoo gemmzoo-blocked``, then
``gemmzoo list`` and ``gemmzoo check``. Both projects are copied out of the checkout first, so
the builds leave nothing behind in it. The environment does not see this machine's
site-packages: the plugin's declared dependencies must be enough. It needs a package index
(PyPI, or the one pip is configured with) for numpy, pluggy, rich, pytest, pytest-benchmark and
setuptools.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from fake_distributions import subprocess_env, write_distribution

from gemmzoo.conformance import conformance_cases, input_checks
from gemmzoo.problems.grids import get_grid

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "gemmzoo-blocked"
NOT_SOURCE = shutil.ignore_patterns(
    ".git", ".venv", ".whl", "build", "dist", "*.egg-info", "__pycache__", ".pytest_cache", ".benchmarks",
    ".ruff_cache", "examples",
)

# A realistic blocking bug: the last, partial block of K is dropped. Installed next to the
# example, it must make `gemmzoo check` fail.
DROP_LAST_K = """
import numpy as np
from gemmzoo import hookimpl
from gemmzoo_blocked import BlockedBackend

class DropLastK(BlockedBackend):
    name = "numpy-blocked-drop-last-k"

    def matmul(self, a, b):
        m, n, k = self.check_operands(a, b)
        c = np.zeros((m, n), dtype=a.dtype)
        for p in range(0, k - k % self.block_k, self.block_k):
            c += a[:, p : p + self.block_k] @ b[p : p + self.block_k]
        return c

@hookimpl
def gemmzoo_register_backends(register):
    register(DropLastK(block_k=16))
"""


# What pip says when the packages cannot be fetched at all (no index reachable) or the index it
# can reach lacks one of them: the environment's limits, not gemmzoo's.
NO_INDEX = re.compile(r"No matching distribution found|Could not find a version that satisfies|"
                      r"NewConnectionError|Max retries exceeded|Temporary failure in name resolution|"
                      r"Network is unreachable|Failed to establish a new connection")


def _skip_when_no_index_serves(installed: subprocess.CompletedProcess[str]) -> None:
    """Skip, with pip's reason, when the install failed for want of a reachable package index."""
    found = NO_INDEX.search(installed.stdout + installed.stderr)
    if installed.returncode != 0 and found:
        lines = [line for line in installed.stderr.splitlines() if found.group(0) in line]
        pytest.skip(f"no package index serves what the venv needs: {(lines or [found.group(0)])[-1].strip()}")


class Venv:
    """A virtual environment and the commands run in it."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.bin = root / "env" / ("Scripts" if os.name == "nt" else "bin")
        self.site = root / "extra-site"  # on PYTHONPATH for the deliberately broken plugin only
        self.site.mkdir()

    def run(self, *args: str | Path, cwd: Path | None = None, extra_site: bool = False,
            timeout: float = 300) -> subprocess.CompletedProcess[str]:
        env = subprocess_env(self.site, PYTHONNOUSERSITE="1")
        for variable in ("PYTHONPATH", "PYTHONHOME", "PYTEST_ADDOPTS", "VIRTUAL_ENV"):
            env.pop(variable, None)  # nothing of this process's environment leaks into the venv
        if extra_site:
            env["PYTHONPATH"] = str(self.site)
        return subprocess.run([str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True,
                              timeout=timeout)

    def gemmzoo(self, *args: str, extra_site: bool = False) -> subprocess.CompletedProcess[str]:
        return self.run(self.bin / "gemmzoo", *args, extra_site=extra_site)


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Venv:
    root = tmp_path_factory.mktemp("plugin-venv")
    shutil.copytree(REPO, root / "gemmzoo", ignore=NOT_SOURCE)
    shutil.copytree(EXAMPLE, root / "gemmzoo-blocked", ignore=NOT_SOURCE)
    # This pip installs into the environment (--python, pip 22.3 and later): the environment's own
    # copy of pip would cost seconds to put there and is not what the tests are about.
    outer_pip = tuple(int(part) for part in importlib.metadata.version("pip").split(".")[:2]) >= (22, 3)
    venv_options = ["--without-pip"] if outer_pip else []
    subprocess.run([sys.executable, "-m", "venv", *venv_options, str(root / "env")], check=True, timeout=300)
    venv = Venv(root)
    pip = [sys.executable, "-m", "pip", "--python", venv.bin / "python"] if outer_pip else [
        venv.bin / "python", "-m", "pip"]
    installed = venv.run(*pip, "install", "-q", "--disable-pip-version-check",
                         root / "gemmzoo", f"{root / 'gemmzoo-blocked'}[test]", timeout=600)
    _skip_when_no_index_serves(installed)
    assert installed.returncode == 0, f"pip install failed:\n{installed.stdout}\n{installed.stderr}"
    return venv


def test_list_shows_the_plugin_and_its_distribution(venv):
    result = venv.gemmzoo("list", "--plain")

    assert result.returncode == 0, result.stderr
    rows = {fields[0]: fields for fields in (line.split("\t") for line in result.stdout.splitlines())}
    assert rows["numpy-blocked"] == ["numpy-blocked", "cpu", "float32,float64", "yes",
                                     "gemmzoo-blocked (gemmzoo-blocked 0.1.0)", "componentwise"]
    assert rows["numpy"][3] == "yes"
    # torch is not installed here: its backends are listed as unavailable, its plugin still loads
    assert rows["torch-cpu"][3].startswith("no: ") and rows["torch"][3].startswith("no: ")
    assert "FAILED" not in rows and "PluginWarning" not in result.stderr


def test_check_passes_on_the_plugin(venv):
    result = venv.gemmzoo("check", "numpy-blocked")

    assert result.returncode == 0, result.stdout + result.stderr
    assert re.search(r"numpy-blocked .*float32,float64 .* 0 .* conforms", result.stdout), result.stdout


def test_plugin_own_test_suite_passes_with_backend_option(venv):
    result = venv.run(venv.bin / "python", "-m", "pytest", "-q", "-p", "no:cacheprovider",
                      cwd=venv.root / "gemmzoo-blocked")

    assert result.returncode == 0, result.stdout[-3000:] + result.stderr
    summary = result.stdout.strip().splitlines()[-1]
    passed = re.search(r"(\d+) passed", summary)
    dtypes = frozenset({"float32", "float64"})
    suite = len(input_checks(SimpleNamespace(dtypes=dtypes))) + sum(len(conformance_cases(d)) for d in dtypes)
    assert passed and int(passed.group(1)) > suite, summary  # the whole suite and the plugin's own tests
    assert not re.search(r"failed|skipped|error", summary), summary


def test_check_fails_on_a_wrong_backend_and_an_unknown_name(venv):
    write_distribution(venv.site, "gemmzoo-drop-last-k", "0.0.1", {"drop-last-k": "gemmzoo_drop_last_k"},
                       {"gemmzoo_drop_last_k": DROP_LAST_K})

    wrong = venv.gemmzoo("check", "numpy-blocked-drop-last-k", extra_site=True)
    unknown = venv.gemmzoo("check", "no-such-backend")

    assert wrong.returncode == 1, wrong.stdout + wrong.stderr
    assert "does not conform" in wrong.stdout
    assert re.search(r"FAIL numpy-blocked-drop-last-k float32-random-3x5x4099-NN: .*outside the error bound",
                     wrong.stdout), wrong.stdout
    assert unknown.returncode == 2
    assert "unknown backend 'no-such-backend'" in unknown.stdout and "numpy-blocked" in unknown.stdout


def test_packaged_benchmarks_run_from_an_empty_directory(venv, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    out = tmp_path / "bench.json"
    result = venv.run(venv.bin / "python", "-m", "pytest", "--pyargs", "gemmzoo.benchmarks",
                      "--benchmark-only", "--gemmzoo-grid", "smoke", "--gemmzoo-backend", "numpy-blocked",
                      "-q",
                      "-p", "no:cacheprovider", "--benchmark-max-time=0.005", "--benchmark-min-rounds=3",
                      f"--benchmark-json={out}", cwd=empty)

    assert result.returncode == 0, result.stdout[-3000:] + result.stderr
    names = {bench["name"] for bench in json.loads(out.read_text())["benchmarks"]}
    smoke = get_grid("smoke", dtypes=["float32"])
    assert names == {f"test_gemm[{point.id}-numpy-blocked]" for point in smoke}
