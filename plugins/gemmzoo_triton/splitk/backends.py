"""``triton-splitk`` and ``triton-decode``: the split-K kernel for skinny products.

``triton-splitk`` splits K over the multiprocessors when the tiles of C alone are too few to fill
them (long K with a small C); ``triton-decode`` streams the weights B once for M <= 64 (token
rows times a weight matrix) and falls back to ``triton-splitk``'s plan above that. Both reduce the
partial products in a fixed order, so repeated calls agree bitwise. Importing this module imports
neither torch nor triton.
"""

# ruff: noqa: N803, N806 - M, N, K as the kernels name them

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gemmzoo_triton.core.backend import TritonBackend
from gemmzoo_triton.splitk.plan import SplitConfig, bind, choose, multiprocessors, tma_usable

#: triton-decode's kernel is for problems with at most this many rows of A.
DECODE_MAX_M = 64


class TritonSplitKBackend(TritonBackend):
    """``triton-splitk``: tiles of C up to 128x128, K split ``s`` ways with ``s`` from
    :func:`~gemmzoo_triton.splitk.plan.choose` (1 where the tiles already fill the GPU), the
    partial products summed in split order (see :mod:`~gemmzoo_triton.splitk.kernel`)."""

    name = "triton-splitk"
    #: Whether :meth:`config` uses the decode blocks for a problem of M rows.
    decode_rows = 0

    def config(self, M: int, N: int, K: int, x: Any, precision: str, y: Any = None) -> SplitConfig:
        """The launch this backend makes for C = x @ y of M x N x K (``x`` gives the dtype and
        device; with ``y``, the TMA kernel's tiles are weighed where :func:`tma_usable` says so)."""
        device = None if x.device.type == "cpu" else (x.device.index or 0)
        fma = precision == "ieee"
        decode = M <= self.decode_rows
        tma = y is not None and not decode and tma_usable(x, y, precision)
        return choose(M, N, K, x.element_size(), fma, multiprocessors(device), decode, tma)

    def prepare(self, a: Any, b: Any) -> Callable[[Any, Any], Any]:
        """Check the operands and choose the config once; ``run`` allocates C and launches."""
        M, N, K = self.check_operands(a, b)
        x, y, precision = self.operands(a, b)
        launch = bind(x, y, precision, self.config(M, N, K, x, precision, y))
        if x is a:
            return launch
        result = self.result

        def run(a: Any, b: Any) -> Any:  # tf32: unwrap, and wrap C again
            return result(launch(a.data, b.data), a)

        return run

    def matmul(self, a: Any, b: Any) -> Any:
        return self.prepare(a, b)(a, b)


class TritonDecodeBackend(TritonSplitKBackend):
    """``triton-decode``: for M <= 64, all rows of A in one block, B streamed once in narrow
    column blocks with long K steps and K split so the programs fill every multiprocessor; B may
    be row-major or column-major (an ``nn.Linear`` weight's transpose). Above 64 rows it runs
    ``triton-splitk``'s plan."""

    name = "triton-decode"
    decode_rows = DECODE_MAX_M
    contends = ({"max_m": DECODE_MAX_M,
                 "why": f"above {DECODE_MAX_M} rows of A it runs triton-splitk's plan"},)
