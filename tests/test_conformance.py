"""The conformance suite over every registered, available backend (``--backend`` narrows it)."""

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
