"""The command line, run as users run it: ``python -m gemmzoo ...`` in a subprocess."""

from __future__ import annotations

import pytest
from fake_distributions import run_gemmzoo

import gemmzoo


@pytest.fixture
def nowhere(tmp_path):
    return tmp_path  # an empty directory: no extra plugins on the path


def test_list_shows_cpu_backends_available_and_cuda_torch_with_a_reason(nowhere):
    result = run_gemmzoo(nowhere, "list", "--plain")
    assert result.returncode == 0, result.stderr
    rows = {line.split("\t")[0]: line.split("\t") for line in result.stdout.splitlines()}
    assert rows["numpy"][1:4] == ["cpu", "float16,float32,float64", "yes"]
    assert rows["torch-cpu"][3] == "yes"
    if rows["torch"][3] != "yes":  # on a GPU machine it is available
        assert rows["torch"][3].startswith("no: ") and "CUDA" in rows["torch"][3]
    assert rows["numpy"][4] == "numpy (gemmzoo 0.1.0)"


def test_check_passes_for_conforming_backends(nowhere):
    result = run_gemmzoo(nowhere, "check", "numpy", "torch-cpu")
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("conforms") == 2


def test_check_of_an_unavailable_backend_fails_with_its_reason(nowhere):
    reason = gemmzoo.get_backend("torch").unavailable_reason()
    if reason is None:
        pytest.skip("torch (cuBLAS) is available here")
    result = run_gemmzoo(nowhere, "check", "numpy", "torch")
    assert result.returncode == 1
    assert "unavailable" in result.stdout and "CUDA" in result.stdout


def test_check_of_an_unknown_backend_lists_the_known_ones(nowhere):
    result = run_gemmzoo(nowhere, "check", "no-such")
    assert result.returncode == 2
    assert "no-such" in result.stdout and "numpy" in result.stdout
