"""gemmzoo's pytest plugin (loaded through the ``pytest11`` entry point).

It adds ``--backend NAME`` (repeatable; same meaning as ``GEMMZOO_BACKENDS``), the benchmark
grid options (``--grid``, ``--shape``, ``--grid-file``, ``--dtype``, ``--layout``) and
parametrizes any test that asks for these fixtures:

- ``conformance_case``: a ``(backend, Case)`` pair for every case of every selected backend;
- ``input_check``: a ``(backend, check_name)`` pair for every bad-input check;
- ``gemm_backend`` and ``gemm_point``: a backend name and a grid point id for every selected
  backend x point of the grid (:mod:`gemmzoo.benchmarks`).

An unavailable backend appears once per fixture as a skipped test that says why, so a run never
claims coverage it does not have.

Under pytest-xdist, a run that collects GEMM benchmarks gives each worker its own GPU and has
its benchmarks sent to the controller, which reports them all (see :mod:`gemmzoo.pytest_bench`).
"""

from __future__ import annotations

from typing import Any

import pytest

from gemmzoo.conformance import conformance_cases, input_checks, random_cases
from gemmzoo.conformance.random_problems import DEFAULT_MAX_WORK
from gemmzoo.dtypes import DTYPES

_BENCH_FIXTURES = ("gemm_backend", "gemm_point")
_ONLY = pytest.StashKey[bool]()
_GPU_ASSIGNED = pytest.StashKey[bool]()


def pytest_addoption(parser: pytest.Parser) -> None:
    from gemmzoo.grids import LAYOUTS

    group = parser.getgroup("gemmzoo")
    group.addoption(
        "--backend", action="append", default=[], metavar="NAME",
        help="gemmzoo backend to test or benchmark (repeatable; default: GEMMZOO_BACKENDS, else all)",
    )
    group.addoption("--grid", default=None, metavar="NAME",
                    help="gemmzoo benchmark grid (see gemmzoo bench --list-grids; default: cpu, or gpu)")
    group.addoption("--shape", action="append", default=[], metavar="MxNxK",
                    help="gemmzoo: benchmark this shape too (repeatable; MxNxK or MxNxK-DTYPE-LAYOUT)")
    group.addoption("--grid-file", action="append", default=[], metavar="FILE",
                    help="gemmzoo: benchmark the points of a CSV or JSON grid file (repeatable)")
    group.addoption("--dtype", action="append", default=[], choices=DTYPES,
                    help="gemmzoo benchmark dtype (repeatable; default: float16 with a GPU, else float32)")
    group.addoption("--layout", action="append", default=[], choices=LAYOUTS,
                    help="gemmzoo benchmark operand layout (repeatable; default NN)")
    group.addoption("--gemmzoo-random", type=int, default=0, metavar="N",
                    help="gemmzoo conformance: N random problems per backend after the fixed cases")
    group.addoption("--gemmzoo-seed", type=int, default=0, metavar="S", help="seed of those problems")
    group.addoption("--gemmzoo-max-work", type=float, default=DEFAULT_MAX_WORK, metavar="MNK",
                    help=f"largest M·N·K of a random problem (default: {DEFAULT_MAX_WORK:g})")


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    from gemmzoo import pytest_bench

    if config.pluginmanager.hasplugin("benchmark"):  # the CUDA rounds follow --benchmark-max-time
        pytest_bench.configure(config)
    # pytest-benchmark refuses --benchmark-only under xdist (it disables itself there); keep the
    # option's meaning and let it start, then turn it back on in the worker after collection.
    if pytest_bench.xdist_requested(config) and config.getoption("benchmark_only", False):
        # ... and its "disabled because xdist is active" warning would be untrue here.
        config.addinivalue_line("filterwarnings", "ignore:Benchmarks are automatically disabled because")
        config.option.benchmark_only = False
        config.stash[_ONLY] = True


@pytest.hookimpl(tryfirst=True)  # before pytest-benchmark's, which reads ``only`` there
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    from gemmzoo import pytest_bench

    session = getattr(config, "_benchmarksession", None)
    if session is None:
        return
    if config.stash.get(_ONLY, False):
        session.only = True
    # Only a run that benchmarks GEMMs turns pytest-benchmark back on in xdist workers; other
    # projects' benchmark suites keep pytest-benchmark's own xdist behaviour.
    if any(set(_BENCH_FIXTURES) <= set(getattr(item, "fixturenames", ())) for item in items):
        pytest_bench.enable_in_worker(config)


def pytest_sessionfinish(session: pytest.Session) -> None:
    from gemmzoo import pytest_bench

    pytest_bench.export_from_worker(session.config)


@pytest.hookimpl(optionalhook=True)  # an xdist hook: without xdist it is never called
def pytest_testnodedown(node: object, error: object) -> None:
    from gemmzoo import pytest_bench

    output = getattr(node, "workeroutput", None)
    if output:
        pytest_bench.import_from_worker(node.config, output)  # type: ignore[attr-defined]


def selected_backends(config: pytest.Config) -> list[Any]:
    """The backends chosen by ``--backend`` or ``GEMMZOO_BACKENDS`` (all registered otherwise)."""
    from gemmzoo.registry import get_registry

    return get_registry().select(config.getoption("backend") or None)


def _unavailable_param(backend: Any, reason: str) -> Any:
    return pytest.param((backend, None), id=f"{backend.name}-unavailable",
                        marks=pytest.mark.skip(reason=f"{backend.name} unavailable: {reason}"))


def _benchmark_params(metafunc: pytest.Metafunc) -> None:
    from gemmzoo import pytest_bench
    from gemmzoo.grids import GridError, resolve_points

    config = metafunc.config
    if not config.stash.get(_GPU_ASSIGNED, False):
        # Before any backend asks CUDA whether it is there: each xdist worker on its own GPU.
        pytest_bench.assign_worker_gpu()
        config.stash[_GPU_ASSIGNED] = True
    try:
        points = resolve_points(config.getoption("grid"), config.getoption("shape"),
                                config.getoption("grid_file"), config.getoption("dtype") or None,
                                config.getoption("layout") or ("NN",))
    except GridError as error:
        raise pytest.UsageError(str(error)) from None
    params = pytest_bench.benchmark_params(selected_backends(config), points)
    metafunc.parametrize(_BENCH_FIXTURES, params)


def _random_cases(config: pytest.Config, dtypes: list[str]) -> list[Any]:
    """The ``--gemmzoo-random`` problems for a backend of ``dtypes`` (none unless asked)."""
    count = config.getoption("--gemmzoo-random")
    if not count or not dtypes:
        return []
    return random_cases(dtypes, count, config.getoption("--gemmzoo-seed"),
                        config.getoption("--gemmzoo-max-work"))


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if set(_BENCH_FIXTURES) <= set(metafunc.fixturenames):
        _benchmark_params(metafunc)
        return
    wanted = [f for f in ("conformance_case", "input_check") if f in metafunc.fixturenames]
    if not wanted:
        return
    fixture = wanted[0]
    params = []
    from gemmzoo.registry import unavailable_reason

    for backend in selected_backends(metafunc.config):
        reason = unavailable_reason(backend)  # guarded: a broken plugin is skipped, not a crash
        if reason is not None:
            params.append(_unavailable_param(backend, reason))
            continue
        if fixture == "conformance_case":
            dtypes = [d for d in DTYPES if d in backend.dtypes]
            cases = [case for dtype in dtypes for case in conformance_cases(dtype, backend.device)]
            cases += _random_cases(metafunc.config, dtypes)
            params += [pytest.param((backend, case), id=f"{backend.name}-{case.id}") for case in cases]
        else:
            params += [pytest.param((backend, check), id=f"{backend.name}-{check}")
                       for check in input_checks(backend)]
    metafunc.parametrize(fixture, params)
