"""The conformance suite every backend, bundled or third-party, must pass.

Run it with ``gemmzoo check NAME...``, from pytest through the ``conformance_case`` fixture
(``pytest --gemmzoo-backend NAME``), or from code with :func:`check_backend`.
"""

from gemmzoo.conformance.bounds import error_bound
from gemmzoo.conformance.cases import Case, conformance_cases
from gemmzoo.conformance.random_problems import random_cases
from gemmzoo.conformance.runner import (
    CheckResult,
    ConformanceReport,
    check_backend,
    input_checks,
    run_case,
    run_input_check,
)

__all__ = [
    "Case",
    "CheckResult",
    "ConformanceReport",
    "check_backend",
    "conformance_cases",
    "error_bound",
    "input_checks",
    "random_cases",
    "run_case",
    "run_input_check",
]
