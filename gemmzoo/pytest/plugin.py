"""gemmzoo's pytest plugin (loaded through the ``pytest11`` entry point).

Installing gemmzoo must not change another project's pytest run, so every option it adds is
namespaced: ``--gemmzoo-backend NAME`` (repeatable; same meaning as ``GEMMZOO_BACKENDS``), the
benchmark grid options (``--gemmzoo-grid``, ``--gemmzoo-shape``, ``--gemmzoo-grid-file``,
``--gemmzoo-dtype``, ``--gemmzoo-layout``) and the random conformance problems
(``--gemmzoo-random``, ``--gemmzoo-seed``, ``--gemmzoo-max-work``). Its hooks act only on tests
that ask for one of these fixtures, which it parametrizes:

- ``conformance_case``: a ``(backend, Case)`` pair for every case of every selected backend;
- ``input_check``: a ``(backend, check_name)`` pair for every bad-input check;
- ``class_case``: a ``(backend, ClassCase)`` pair for every case of the problem classes beyond
  gemm that a selected backend declares (:mod:`gemmzoo.conformance.class_cases`), with ids such
  as ``numpy-scaled-rowwise-33x47x64-bfloat16-N``;
- ``gemm_backend`` and ``gemm_point``: a backend name and a grid point id for every selected
  backend x point of the grid (:mod:`gemmzoo.benchmarks`).

An unavailable backend appears once per fixture as a skipped test that says why, so a run never
claims coverage it does not have.

Under pytest-xdist, a run of gemmzoo's benchmarks (see :func:`runs_gemm_benchmarks`) gives each
worker its own GPU and has its benchmarks sent to the controller, which reports them all (see
:mod:`gemmzoo.pytest.xdist`).
A run that collects no GEMM benchmark keeps pytest-benchmark's own behaviour.
"""

from __future__ import annotations

import warnings
from typing import Any

import pytest

from gemmzoo.conformance import conformance_cases, input_checks, random_cases
from gemmzoo.conformance.random_problems import DEFAULT_MAX_WORK
from gemmzoo.contract.dtypes import DTYPES

_BENCH_FIXTURES = ("gemm_backend", "gemm_point")
_ONLY = pytest.StashKey[bool]()
_XDIST = pytest.StashKey[bool]()
_GPU_ASSIGNED = pytest.StashKey[bool]()


def pytest_addoption(parser: pytest.Parser) -> None:
    from gemmzoo.problems.grids import LAYOUTS

    group = parser.getgroup("gemmzoo")
    group.addoption(
        "--gemmzoo-backend", action="append", default=[], metavar="NAME",
        help="gemmzoo backend to test or benchmark (repeatable; default: GEMMZOO_BACKENDS, else all)",
    )
    group.addoption("--gemmzoo-grid", default=None, metavar="NAME",
                    help="gemmzoo benchmark grid (see gemmzoo bench --list-grids; default: cpu, or gpu)")
    group.addoption("--gemmzoo-shape", action="append", default=[], metavar="MxNxK",
                    help="gemmzoo: benchmark this shape too (repeatable; MxNxK or MxNxK-DTYPE-LAYOUT)")
    group.addoption("--gemmzoo-grid-file", action="append", default=[], metavar="FILE",
                    help="gemmzoo: benchmark the points of a CSV or JSON grid file (repeatable)")
    group.addoption("--gemmzoo-dtype", action="append", default=[], choices=DTYPES,
                    help="gemmzoo benchmark dtype (repeatable; default: float16 with a GPU, else float32; "
                         "float32 when every backend runs on the CPU)")
    group.addoption("--gemmzoo-layout", action="append", default=[], choices=LAYOUTS,
                    help="gemmzoo benchmark operand layout (repeatable; default NN)")
    group.addoption("--gemmzoo-random", type=int, default=0, metavar="N",
                    help="gemmzoo conformance: N random problems per backend after the fixed cases")
    group.addoption("--gemmzoo-seed", type=int, default=0, metavar="S", help="seed of those problems")
    group.addoption("--gemmzoo-max-work", type=float, default=DEFAULT_MAX_WORK, metavar="MNK",
                    help=f"largest M·N·K of a random problem (default: {DEFAULT_MAX_WORK:g})")


_BENCH_OPTIONS = ("gemmzoo_backend", "gemmzoo_grid", "gemmzoo_shape", "gemmzoo_grid_file", "gemmzoo_dtype",
                  "gemmzoo_layout")


def runs_gemm_benchmarks(config: pytest.Config) -> bool:
    """Whether the command line asks for gemmzoo's benchmarks: it names them (``--pyargs
    gemmzoo.benchmarks`` or a path inside that package) or gives a ``--gemmzoo-*`` benchmark option.

    Only such a run gets gemmzoo's pytest-xdist mode; any other keeps pytest-benchmark's behaviour.
    """
    if any(config.getoption(name, None) for name in _BENCH_OPTIONS):
        return True
    named = [str(arg).replace("\\", "/") for arg in config.args]
    return any("gemmzoo.benchmarks" in arg or "gemmzoo/benchmarks" in arg for arg in named)


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    if not config.pluginmanager.hasplugin("benchmark") or not runs_gemm_benchmarks(config):
        return
    from gemmzoo.adapters import pytest_benchmark
    from gemmzoo.pytest import xdist as pytest_xdist

    if not pytest_xdist.requested(config):
        return
    reason = pytest_benchmark.unsupported_reason()
    if reason is not None:
        warnings.warn(f"gemmzoo: benchmarks under pytest-xdist need pytest-benchmark's session: {reason}; "
                      "run without -n", stacklevel=1)
        return
    config.stash[_XDIST] = True
    if not config.getoption("benchmark_only", False):
        return
    # pytest-benchmark refuses --benchmark-only under xdist (it disables itself there); keep the
    # option's meaning and let it start, then turn it back on in the worker after collection.
    # ... and its "disabled because xdist is active" warning would be untrue here.
    config.addinivalue_line("filterwarnings", "ignore:Benchmarks are automatically disabled because")
    config.option.benchmark_only = False
    config.stash[_ONLY] = True


@pytest.hookimpl(tryfirst=True)  # before pytest-benchmark's, which reads ``only`` there
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not config.stash.get(_XDIST, False):
        return
    from gemmzoo.adapters import pytest_benchmark
    from gemmzoo.pytest import xdist as pytest_xdist

    if config.stash.get(_ONLY, False):
        pytest_benchmark.set_only(config)
    if any(set(_BENCH_FIXTURES) <= set(getattr(item, "fixturenames", ())) for item in items):
        pytest_xdist.enable_in_worker(config)


def pytest_sessionfinish(session: pytest.Session) -> None:
    if session.config.stash.get(_XDIST, False):
        from gemmzoo.pytest import xdist as pytest_xdist

        pytest_xdist.export_from_worker(session.config)


@pytest.hookimpl(optionalhook=True)  # an xdist hook: without xdist it is never called
def pytest_testnodedown(node: object, error: object) -> None:
    output = getattr(node, "workeroutput", None)
    config = getattr(node, "config", None)
    if output and config is not None and config.stash.get(_XDIST, False):
        from gemmzoo.pytest import xdist as pytest_xdist

        pytest_xdist.import_from_worker(config, output)


def selected_backends(config: pytest.Config) -> list[Any]:
    """The backends chosen by ``--gemmzoo-backend`` or ``GEMMZOO_BACKENDS`` (all registered otherwise)."""
    from gemmzoo.session import current

    return current().select(config.getoption("gemmzoo_backend") or None)


def _unavailable_param(backend: Any, reason: str) -> Any:
    return pytest.param((backend, None), id=f"{backend.name}-unavailable",
                        marks=pytest.mark.skip(reason=f"{backend.name} unavailable: {reason}"))


def _benchmark_params(metafunc: pytest.Metafunc) -> None:
    from gemmzoo.problems.grids import GridError, backends_device, resolve_points
    from gemmzoo.pytest import bench as pytest_bench
    from gemmzoo.pytest import xdist as pytest_xdist

    config = metafunc.config
    if not config.stash.get(_GPU_ASSIGNED, False):
        # Before any backend asks CUDA whether it is there: each xdist worker on its own GPU.
        pytest_xdist.assign_worker_gpu()
        config.stash[_GPU_ASSIGNED] = True
    backends = selected_backends(config)
    try:
        points = resolve_points(config.getoption("gemmzoo_grid"), config.getoption("gemmzoo_shape"),
                                config.getoption("gemmzoo_grid_file"),
                                config.getoption("gemmzoo_dtype") or None,
                                config.getoption("gemmzoo_layout") or ("NN",), backends_device(backends))
    except GridError as error:
        raise pytest.UsageError(str(error)) from None
    params = pytest_bench.benchmark_params(backends, points)
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
    wanted = [f for f in ("conformance_case", "input_check", "class_case") if f in metafunc.fixturenames]
    if not wanted:
        return
    fixture = wanted[0]
    params = []
    from gemmzoo.plugins.registry import unavailable_reason

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
        elif fixture == "class_case":
            from gemmzoo.conformance.class_cases import class_cases

            params += [pytest.param((backend, case), id=f"{backend.name}-{case.id}")
                       for case in class_cases(backend)]
        else:
            params += [pytest.param((backend, check), id=f"{backend.name}-{check}")
                       for check in input_checks(backend)]
    metafunc.parametrize(fixture, params)
