"""Element-wise work on a large array, done in row blocks side by side on threads.

NumPy's element-wise loops and casts release the GIL, and a block's temporaries stay small enough
to be reused rather than mapped afresh, so a check that makes a dozen passes over a 4544x4544
result takes a fraction of its time done whole. Results are the same either way: each block is
the same computation on its own rows.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

import numpy as np

from gemmzoo.measure.threads import usable_cores

T = TypeVar("T")

#: Elements per row block; an array of at most this many elements is done whole, on this thread.
BLOCK_ELEMENTS = 1 << 20


def row_blocks(rows: int, cols: int, block: int = BLOCK_ELEMENTS) -> list[slice]:
    """Slices of ``rows`` rows that cover them in order, each of about ``block`` elements (at
    least one row)."""
    step = max(1, block // max(1, cols))
    return [slice(start, min(rows, start + step)) for start in range(0, max(rows, 1), step)]


def by_rows(work: Callable[[slice], T], rows: int, cols: int, block: int = BLOCK_ELEMENTS) -> list[T]:
    """``work(rows)`` for every row block of a ``rows`` x ``cols`` array, in order, on up to this
    process's usable cores."""
    blocks = row_blocks(rows, cols, block)
    if len(blocks) == 1:
        return [work(blocks[0])]
    with ThreadPoolExecutor(min(len(blocks), usable_cores())) as pool:
        return list(pool.map(work, blocks))


def same_values(x: np.ndarray, y: np.ndarray) -> bool:
    """``np.array_equal(x, y, equal_nan=True)``, a large matrix's in row blocks side by side."""
    if x.shape != y.shape or x.ndim != 2 or x.size <= BLOCK_ELEMENTS:
        return bool(np.array_equal(x, y, equal_nan=True))
    return all(by_rows(lambda rows: bool(np.array_equal(x[rows], y[rows], equal_nan=True)), *x.shape))
