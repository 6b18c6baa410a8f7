"""Problem points and the named shape grids shared by the suite, the benchmarks, bench and tune."""

from __future__ import annotations

from dataclasses import dataclass

LAYOUTS = ("NN", "NT", "TN", "TT")


@dataclass(frozen=True, order=True)
class GridPoint:
    """One GEMM problem: C (M×N) = A (M×K) · B (K×N) in ``dtype``; ``layout`` says whether A and B
    are stored as given (N) or transposed (T), BLAS-style."""

    m: int
    n: int
    k: int
    dtype: str = "float32"
    layout: str = "NN"

    @property
    def flops(self) -> int:
        """2·M·N·K."""
        return 2 * self.m * self.n * self.k

    @property
    def id(self) -> str:
        """``4096x4096x4096-float16-NN``."""
        return f"{self.m}x{self.n}x{self.k}-{self.dtype}-{self.layout}"
