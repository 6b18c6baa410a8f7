"""The problems the conformance suite poses: shapes, layouts and kinds of values."""

from __future__ import annotations

import zlib
from dataclasses import dataclass

#: The edge shapes (M, N, K): single elements, vectors, K = 1, primes, tile sizes ± 1,
#: non-square in every direction, long K, and zero-size M, N and K.
EDGE_SHAPES: tuple[tuple[int, int, int], ...] = (
    (1, 1, 1),
    (1, 37, 19),
    (41, 1, 23),
    (33, 29, 1),
    (7, 11, 13),
    (31, 37, 41),
    (63, 65, 64),
    (65, 63, 127),
    (127, 129, 65),
    (96, 17, 40),
    (17, 96, 40),
    (20, 24, 300),
    # M, then N, past 256 (paths that split rows or columns past a tile count); thin, so cheap
    (300, 5, 8),
    (5, 300, 8),
    (3, 5, 4099),
    (0, 5, 7),
    (5, 0, 7),
    (5, 7, 0),
    (0, 0, 0),
)

#: Operand layouts: N a plain array, T a transposed view, S a strided slice view (offset,
#: stride 2 in both dimensions). A layout names A's then B's, e.g. "TS".
OPERAND_LAYOUTS = ("N", "T", "S")
LAYOUT_SHAPE = (37, 43, 53)
INTEGER_SHAPE = (37, 29, 33)
#: Shapes of the cases whose rows and columns span orders of magnitude: even sizes (fast
#: algorithms that split the matrices in halves take their fast path) and odd ones.
SCALED_SHAPES = ((64, 48, 80), (37, 29, 41))
CANCEL_SHAPE = (48, 40, 64)
NONFINITE_SHAPE = (12, 10, 9)
REPEAT_SHAPE = (67, 71, 73)
#: The shape of the case that calls again with other values: square, so that an operand has C's
#: shape and a backend that hands an operand back as C is caught.
FRESH_SHAPE = (40, 40, 40)
#: Shapes of the cases whose K sums hold terms of one sign, one large and many tiny
#: (:mod:`gemmzoo.conformance.long_sums`): a matrix product and a row vector times a matrix
#: (libraries take another route for a single row).
SAME_SIGN_SHAPES = ((7, 5, 4099), (1, 5, 4099))
#: float8_e4m3fn only: values over 2**-12 .. 2**10 in magnitude, so that subnormals, values that
#: round to zero and values past E4M3's largest (448) all occur; K long enough to sum many.
EXTREMES_SHAPE = (29, 35, 181)

#: Extra shapes for GPU backends only: large enough that libraries switch to split-K and other
#: large-problem paths, which the small shapes never reach (too slow for CPU backends in CI).
GPU_SHAPES: tuple[tuple[int, int, int], ...] = (
    (1031, 1029, 4097),
    (16, 2048, 8192),
    (2112, 2080, 2064),  # 16-byte aligned rows and over 2048^3: triton-grouped's TMA path, with tails
    # large enough that autotuned kernels pick their largest tiles and deepest pipelines (where a
    # config that overflows shared memory would raise at launch)
    (4544, 4544, 4544),
)


@dataclass(frozen=True)
class Case:
    """One problem: ``kind`` of values ("random", "integers", "nonfinite", "repeat", "fresh", "scaled",
    "cancel", "same-sign", and for float8_e4m3fn "extremes"), shape, dtype and layout."""

    kind: str
    m: int
    n: int
    k: int
    dtype: str
    layout: str = "NN"

    @property
    def id(self) -> str:
        """A readable, unique id such as ``float32-random-63x65x64-NT``."""
        return f"{self.dtype}-{self.kind}-{self.m}x{self.n}x{self.k}-{self.layout}"

    @property
    def seed(self) -> int:
        """A seed derived from the id, so a failure reproduces."""
        return zlib.crc32(self.id.encode())


def conformance_cases(dtype: str, device: str = "cpu") -> list[Case]:
    """Every case the suite runs for one dtype of a backend on ``device`` ("cpu" or "cuda")."""
    shapes = EDGE_SHAPES + (GPU_SHAPES if device == "cuda" else ())
    cases = [Case("random", m, n, k, dtype) for m, n, k in shapes]
    cases += [
        Case("random", *LAYOUT_SHAPE, dtype, a + b)
        for a in OPERAND_LAYOUTS
        for b in OPERAND_LAYOUTS
        if a + b != "NN"
    ]
    cases += [
        Case("integers", *INTEGER_SHAPE, dtype),
        Case("integers", *INTEGER_SHAPE, dtype, "TS"),
        Case("nonfinite", *NONFINITE_SHAPE, dtype),
        Case("nonfinite", *NONFINITE_SHAPE, dtype, "ST"),
        Case("repeat", *REPEAT_SHAPE, dtype),
        Case("fresh", *FRESH_SHAPE, dtype),
        Case("scaled", *SCALED_SHAPES[0], dtype),
        Case("scaled", *SCALED_SHAPES[1], dtype, "TN"),
        Case("cancel", *CANCEL_SHAPE, dtype),
    ]
    cases += [Case("same-sign", *shape, dtype) for shape in SAME_SIGN_SHAPES]
    if dtype == "float8_e4m3fn":
        cases += [Case("extremes", *EXTREMES_SHAPE, dtype, layout) for layout in ("NN", "TN", "NT")]
    return cases


#: How far (in powers of ten, either way) the scaled cases scale each row and column, per dtype:
#: as wide as the dtype's range allows with no overflow in C (float16's 65504 is the tightest).
_SCALE_DECADES = {
    "float16": 0.5, "bfloat16": 3.0, "float32": 4.0, "tf32": 4.0, "float64": 8.0,
    # E4M3 spans 2**-9 .. 448: a decade either way keeps normal values inside it
    "float8_e4m3fn": 1.0,
}


def scale_decades(dtype: str) -> float:
    """The half-width, in decades, of the row and column scales of the ``scaled`` cases."""
    return _SCALE_DECADES.get(dtype, 1.0)
