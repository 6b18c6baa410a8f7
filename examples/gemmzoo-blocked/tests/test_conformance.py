"""gemmzoo's conformance suite on this plugin's backend.

The ``conformance_case`` and ``input_check`` fixtures come from gemmzoo's pytest plugin, which
pytest loads by itself once gemmzoo is installed. ``--backend numpy-blocked`` (set in
pyproject.toml's addopts) limits them to this plugin's backend.
"""

from __future__ import annotations

from gemmzoo.conformance import run_case, run_input_check


def test_conformance(conformance_case):
    backend, case = conformance_case
    result = run_case(backend, case)
    assert result.passed, f"{backend.name} {case.id}: {result.detail}"


def test_bad_input_is_a_clear_error(input_check):
    backend, check = input_check
    result = run_input_check(backend, check)
    assert result.passed, f"{backend.name} {check}: {result.detail}"
