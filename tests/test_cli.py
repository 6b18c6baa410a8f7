"""The command line, run as users run it: ``python -m gemmzoo ...`` in a process of its own (forked
from a started interpreter that has the frameworks imported, see tests/cli_forks.py; the plugin's
runs in a plain subprocess)."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Iterator
from subprocess import CompletedProcess

import pytest
from cli_forks import DEPENDENCIES, FRAMEWORKS, CliForks
from fake_distributions import run_gemmzoo, write_distribution

import gemmzoo


@pytest.fixture(scope="module")
def nowhere(tmp_path_factory):
    return tmp_path_factory.mktemp("nowhere")  # an empty directory: no extra plugins on the path


@pytest.fixture(scope="module")
def gemmzoo_run(nowhere) -> Iterator[Callable[..., CompletedProcess[str]]]:
    """``run_gemmzoo(nowhere, ...)``, each run forked from one server with the frameworks that
    ``list -v`` and the torch checks import already imported (gemmzoo itself is imported afresh)."""
    servers: list[CliForks] = []

    def run(*args: str, **env: str) -> CompletedProcess[str]:
        if not servers:
            servers.append(CliForks(nowhere, DEPENDENCIES + FRAMEWORKS))
        return servers[0].run(*args, **env)

    yield run
    for server in servers:
        server.close()


def test_list_shows_cpu_backends_available_and_cuda_torch_with_a_reason(gemmzoo_run):
    result = gemmzoo_run("list", "--plain", "-v")
    assert result.returncode == 0, result.stderr
    rows = {line.split("\t")[0]: line.split("\t") for line in result.stdout.splitlines()}
    assert rows["numpy"][1:4] == ["cpu", "float16,float32,float64,float8_e4m3fn", "yes"]
    if importlib.util.find_spec("torch") is None:
        assert rows["torch-cpu"][3].startswith("no: torch is not installed")
    else:
        assert rows["torch-cpu"][3] == "yes"
    if rows["torch"][3] != "yes":  # on a GPU machine it is available
        assert rows["torch"][3] == f"no: {gemmzoo.get_backend('torch').unavailable_reason()}"
    assert rows["numpy"][4] == "numpy (gemmzoo 0.1.0)"


def test_check_passes_for_conforming_backends(gemmzoo_run):
    pytest.importorskip("torch")
    result = gemmzoo_run("check", "numpy", "torch-cpu")
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("conforms") == 2
    lines = result.stdout.splitlines()
    finished = [i for i, line in enumerate(lines) if line.endswith(" checks, 0 failed")]
    assert [lines[i].split(":")[0] for i in finished] == ["numpy", "torch-cpu"]
    table = next(i for i, line in enumerate(lines) if "gemmzoo conformance" in line)
    assert finished[-1] < table  # each backend's line as it finishes, then the table


def test_check_of_an_unavailable_backend_fails_with_its_reason(gemmzoo_run):
    reason = gemmzoo.get_backend("torch").unavailable_reason()
    if reason is None:
        pytest.skip("torch (cuBLAS) is available here")
    result = gemmzoo_run("check", "numpy", "torch")
    assert result.returncode == 1
    assert "unavailable" in result.stdout and reason in " ".join(result.stdout.split())


def test_check_of_an_unknown_backend_lists_the_known_ones(gemmzoo_run):
    result = gemmzoo_run("check", "no-such")
    assert result.returncode == 2
    assert "no-such" in result.stdout and "numpy" in result.stdout


def test_reasons_with_brackets_are_printed_as_text(tmp_path):
    """Rich would read ``[cuda]`` in a reason as markup and drop it."""
    write_distribution(tmp_path, "bracket-dist", "1.0", {"bracket": "bracket_mod"}, {"bracket_mod": """
        import gemmzoo
        from gemmzoo_numpy import NumpyBackend

        class NeedsExtra(NumpyBackend):
            name = "needs-extra"

            def unavailable_reason(self):
                return "install libfoo[cuda] first"

        @gemmzoo.hookimpl
        def gemmzoo_register_backends(register):
            register(NeedsExtra())
    """})
    cache = tmp_path / "cache"
    best = run_gemmzoo(tmp_path, "best", "8", "8", "8", "--device", "cpu",
                       GEMMZOO_BACKENDS="numpy,needs-extra", GEMMZOO_CACHE_DIR=str(cache))
    assert best.returncode == 0, best.stdout + best.stderr
    assert "install libfoo[cuda] first" in best.stdout
    check = run_gemmzoo(tmp_path, "check", "needs-extra")
    assert check.returncode == 1 and "install libfoo[cuda] first" in check.stdout
    bench = run_gemmzoo(tmp_path, "bench", "--backend", "numpy", "--backend", "needs-extra",
                        "--shape", "8x8x8", "--budget", "0.01")
    assert "install libfoo[cuda] first" in bench.stderr
