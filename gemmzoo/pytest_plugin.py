"""gemmzoo's pytest plugin (loaded through the ``pytest11`` entry point).

It adds ``--backend NAME`` (repeatable; same meaning as ``GEMMZOO_BACKENDS``) and parametrizes
any test that asks for these fixtures:

- ``conformance_case``: a ``(backend, Case)`` pair for every case of every selected backend;
- ``input_check``: a ``(backend, check_name)`` pair for every bad-input check.

An unavailable backend appears once per fixture as a skipped test that says why, so a run never
claims coverage it does not have.
"""

from __future__ import annotations

from typing import Any

import pytest

from gemmzoo.conformance import conformance_cases, input_checks
from gemmzoo.dtypes import DTYPES


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("gemmzoo")
    group.addoption(
        "--backend", action="append", default=[], metavar="NAME",
        help="gemmzoo backend to test or benchmark (repeatable; default: GEMMZOO_BACKENDS, else all)",
    )


def pytest_configure(config: pytest.Config) -> None:
    if config.pluginmanager.hasplugin("benchmark"):  # the CUDA rounds follow --benchmark-max-time
        from gemmzoo import pytest_bench

        pytest_bench.configure(config)


def selected_backends(config: pytest.Config) -> list[Any]:
    """The backends chosen by ``--backend`` or ``GEMMZOO_BACKENDS`` (all registered otherwise)."""
    from gemmzoo.registry import get_registry

    return get_registry().select(config.getoption("backend") or None)


def _unavailable_param(backend: Any, reason: str) -> Any:
    return pytest.param((backend, None), id=f"{backend.name}-unavailable",
                        marks=pytest.mark.skip(reason=f"{backend.name} unavailable: {reason}"))


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    wanted = [f for f in ("conformance_case", "input_check") if f in metafunc.fixturenames]
    if not wanted:
        return
    fixture = wanted[0]
    params = []
    for backend in selected_backends(metafunc.config):
        reason = backend.unavailable_reason()
        if reason is not None:
            params.append(_unavailable_param(backend, reason))
            continue
        if fixture == "conformance_case":
            for dtype in (d for d in DTYPES if d in backend.dtypes):
                params += [pytest.param((backend, case), id=f"{backend.name}-{case.id}")
                           for case in conformance_cases(dtype, backend.device)]
        else:
            params += [pytest.param((backend, check), id=f"{backend.name}-{check}")
                       for check in input_checks(backend)]
    metafunc.parametrize(fixture, params)
