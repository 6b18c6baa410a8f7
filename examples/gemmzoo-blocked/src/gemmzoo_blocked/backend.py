"""The ``numpy-blocked`` backend: C = A·B computed block by block with NumPy."""

from __future__ import annotations

import numpy as np

from gemmzoo import Backend

_NUMPY_DTYPES = {"float32": np.float32, "float64": np.float64}


class BlockedBackend(Backend):
    """A cache-blocked GEMM on the host.

    C is cut into ``block_m`` x ``block_n`` tiles; each tile accumulates, in the operands' dtype
    (fp32 for float32), the products of the ``block_k``-wide slices of A's rows and B's columns
    that meet there. The default 128 x 128 x 128 float32 blocks take 64 KiB each, so the three
    blocks in use stay in a core's L2 cache.
    """

    name = "numpy-blocked"
    device = "cpu"
    dtypes = frozenset(_NUMPY_DTYPES)

    def __init__(self, block_m: int = 128, block_n: int = 128, block_k: int = 128) -> None:
        sizes = {"block_m": block_m, "block_n": block_n, "block_k": block_k}
        for label, size in sizes.items():
            if isinstance(size, bool) or not isinstance(size, int) or size < 1:
                raise ValueError(f"{self.name}: {label} must be a positive int, got {size!r}")
        self.block_m, self.block_n, self.block_k = block_m, block_n, block_k

    def from_numpy(self, x: np.ndarray, dtype: str) -> np.ndarray:
        """A new array holding ``x`` converted to ``dtype`` (float32 or float64)."""
        self.check_dtype(dtype, np.shape(x))
        return np.array(x, dtype=_NUMPY_DTYPES[dtype], copy=True)

    def to_numpy(self, y: np.ndarray) -> np.ndarray:
        """A copy of ``y``."""
        return np.array(y, copy=True)

    def matmul(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """A new array C = A·B, computed block by block; A and B may be any 2-D views."""
        m, n, k = self.check_operands(a, b)
        c = np.zeros((m, n), dtype=a.dtype)  # K = 0 leaves the empty sum, zero
        for i in range(0, m, self.block_m):
            a_rows = a[i : i + self.block_m]
            for j in range(0, n, self.block_n):
                tile = c[i : i + self.block_m, j : j + self.block_n]  # a view: += writes into C
                for p in range(0, k, self.block_k):
                    tile += a_rows[:, p : p + self.block_k] @ b[p : p + self.block_k, j : j + self.block_n]
        return c

    def __repr__(self) -> str:
        return (f"<BlockedBackend {self.name!r} on {self.device}, "
                f"blocks {self.block_m}x{self.block_n}x{self.block_k}>")
