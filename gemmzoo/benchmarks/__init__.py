"""gemmzoo's GEMM benchmarks for pytest-benchmark, shipped inside the package.

From any directory where gemmzoo is installed::

    python -m pytest --pyargs gemmzoo.benchmarks --benchmark-only \
        [--gemmzoo-grid NAME] [--gemmzoo-backend NAME]

runs one benchmark per selected backend and grid point. The options (``--gemmzoo-grid``,
``--gemmzoo-shape``, ``--gemmzoo-grid-file``, ``--gemmzoo-dtype``, ``--gemmzoo-layout``,
``--gemmzoo-backend``) and the parametrization come from
gemmzoo's pytest plugin, which pytest loads by itself, so a plugin author's own test module
reuses the benchmarks with one import::

    from gemmzoo.benchmarks import test_gemm  # noqa: F401

See docs/benchmarks.md for what the numbers include.
"""

from gemmzoo.benchmarks.test_gemm import test_gemm

__all__ = ["test_gemm"]
