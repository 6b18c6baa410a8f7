"""pytest-benchmark fixtures for gemmzoo: every selected available backend over a shape grid.

    pytest benchmarks --benchmark-only [--grid NAME] [--shape MxNxK] [--grid-file F]
                      [--dtype D] [--layout L] [--backend NAME]

One test per backend x grid point; the benchmark group is the point, so each table compares the
backends on one problem. See docs/benchmarks.md for what the numbers include.
"""

from __future__ import annotations

import pytest

from gemmzoo import pytest_bench
from gemmzoo.dtypes import DTYPES
from gemmzoo.grids import LAYOUTS, GridError, resolve_points
from gemmzoo.pytest_plugin import selected_backends


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("gemmzoo benchmarks")
    group.addoption("--grid", default=None, metavar="NAME",
                    help="shape grid (gemmzoo bench --list-grids; default: cpu, or gpu with a GPU)")
    group.addoption("--shape", action="append", default=[], metavar="MxNxK",
                    help="benchmark this shape too (repeatable; MxNxK or MxNxK-DTYPE-LAYOUT)")
    group.addoption("--grid-file", action="append", default=[], metavar="FILE",
                    help="benchmark the points of a CSV or JSON grid file (repeatable)")
    group.addoption("--dtype", action="append", default=[], choices=DTYPES,
                    help="dtype (repeatable; default: float16 with a GPU, else float32)")
    group.addoption("--layout", action="append", default=[], choices=LAYOUTS,
                    help="operand layout (repeatable; default NN)")


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    # Before CUDA can start in this process: each xdist worker on its own GPU.
    pytest_bench.assign_worker_gpu()
    # pytest-benchmark refuses --benchmark-only under xdist (it disables itself there); keep the
    # option's meaning and let it start, then turn it back on in pytest_sessionstart.
    if pytest_bench.xdist_requested(config):
        # ... and its "disabled because xdist is active" warning would be untrue here.
        config.addinivalue_line("filterwarnings", "ignore:Benchmarks are automatically disabled because")
        if config.getoption("benchmark_only", False):
            config.option.benchmark_only = False
            config.stash[_ONLY] = True


_ONLY = pytest.StashKey[bool]()


def pytest_sessionstart(session: pytest.Session) -> None:
    config = session.config
    pytest_bench.enable_in_worker(config)
    if config.stash.get(_ONLY, False) and hasattr(config, "_benchmarksession"):
        config._benchmarksession.only = True


def pytest_sessionfinish(session: pytest.Session) -> None:
    pytest_bench.export_from_worker(session.config)


@pytest.hookimpl(optionalhook=True)  # an xdist hook: without xdist it is never called
def pytest_testnodedown(node: object, error: object) -> None:
    output = getattr(node, "workeroutput", None)
    if output:
        pytest_bench.import_from_worker(node.config, output)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "gemm_backend" not in metafunc.fixturenames:
        return
    config = metafunc.config
    try:
        points = resolve_points(config.getoption("grid"), config.getoption("shape"),
                                config.getoption("grid_file"), config.getoption("dtype") or None,
                                config.getoption("layout") or ("NN",))
    except GridError as error:
        raise pytest.UsageError(str(error)) from None
    backends = selected_backends(config)
    metafunc.parametrize(("gemm_backend", "gemm_point"), pytest_bench.benchmark_params(backends, points))
