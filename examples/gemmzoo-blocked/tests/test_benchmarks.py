"""gemmzoo's GEMM benchmarks on this plugin's backend, next to the bundled ones it selects.

One import is all it takes; ``--gemmzoo-backend`` and ``--gemmzoo-grid`` choose what runs (see
pyproject.toml). ``pytest tests/test_benchmarks.py --benchmark-enable --benchmark-only
--gemmzoo-backend numpy --gemmzoo-backend numpy-blocked`` compares this backend with NumPy's, one
table per grid point.
"""

from gemmzoo.benchmarks import test_gemm

__all__ = ["test_gemm"]
