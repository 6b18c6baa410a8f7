"""Ready-made pytest tests of the conformance suite, for gemmzoo itself and for plugin authors.

Import them into a test module and pytest runs them over the backends that ``--gemmzoo-backend NAME`` (or
``GEMMZOO_BACKENDS``) selects, every registered one otherwise::

    from gemmzoo.testing import test_bad_input_is_a_clear_error, test_conformance  # noqa: F401

``test_class_conformance`` runs the cases of the problem classes beyond gemm (batched, scaled,
grouped) that each backend declares.

The ``conformance_case`` and ``input_check`` fixtures come from gemmzoo's pytest plugin, which
pytest loads by itself once gemmzoo is installed.
"""

from __future__ import annotations

from typing import Any

from gemmzoo.conformance import run_case, run_input_check

__all__ = ["test_bad_input_is_a_clear_error", "test_class_conformance", "test_conformance"]


def test_conformance(conformance_case: tuple[Any, Any]) -> None:
    """One conformance case on one backend."""
    backend, case = conformance_case
    result = run_case(backend, case)
    assert result.passed, f"{backend.name} {case.id}: {result.detail}"


def test_bad_input_is_a_clear_error(input_check: tuple[Any, str]) -> None:
    """One bad-input check on one backend: a clear error naming the backend and the shapes."""
    backend, check = input_check
    result = run_input_check(backend, check)
    assert result.passed, f"{backend.name} {check}: {result.detail}"


def test_class_conformance(class_case: tuple[Any, Any]) -> None:
    """One case of a problem class beyond gemm on one backend (raises with what is wrong)."""
    from gemmzoo.conformance.class_cases import run_class_case

    backend, case = class_case
    run_class_case(backend, case)
