"""Host arithmetic of the problem classes: scales expanded to their operand, offsets checked,
batch shapes broadcast. The NumPy reference backend, the public entry points and the conformance
suite share it, so the three agree on what each class means."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from gemmzoo.problems.classes import BLOCK, CLASSES, scaling_of


def declared_classes(backend: Any) -> frozenset[str]:
    """The classes ``backend`` declares (``Backend.classes``), known ones only; a backend whose
    attribute is missing, malformed or raises computes ``gemm`` alone."""
    try:
        declared = frozenset(str(c) for c in backend.classes)
    except Exception:  # a third-party attribute that fails: the contract's class only
        return frozenset({"gemm"})
    return frozenset(c for c in declared if c in CLASSES) | {"gemm"}


def expand_scale(scale: np.ndarray, scaling: str, rows: int, cols: int, operand: str) -> np.ndarray:
    """``scale`` (float, of the shape :func:`gemmzoo.problems.classes.scale_shapes` gives) spread to one
    float64 value per element of ``operand`` ("A": M×K, "B": K×N) of ``rows``×``cols``."""
    s = np.asarray(scale, dtype=np.float64)
    if scaling == "tensorwise":
        return np.full((rows, cols), float(s.reshape(-1)[0]))
    if scaling == "rowwise":
        return np.broadcast_to(s.reshape((rows, 1) if operand == "A" else (1, cols)), (rows, cols))
    if operand == "A":  # one scale per 1×BLOCK block of a row
        return np.repeat(s, BLOCK, axis=1)[:, :cols]
    return np.repeat(np.repeat(s, BLOCK, axis=0), BLOCK, axis=1)[:rows, :cols]


def dequantized(values: np.ndarray, scale: np.ndarray, scaling: str, operand: str) -> np.ndarray:
    """The float64 values of a scaled operand: its (E4M3) values times their scales."""
    rows, cols = values.shape
    return values.astype(np.float64) * expand_scale(scale, scaling, rows, cols, operand)


def scaled_problem(a_shape: Sequence[int], b_shape: Sequence[int], sa_shape: Sequence[int],
                   sb_shape: Sequence[int]) -> tuple[str | None, str]:
    """The scaling of a scaled product's shapes and ``""``, or ``None`` and what is wrong."""
    if len(a_shape) != 2 or len(b_shape) != 2:
        return None, "A and B must be 2-D"
    (m, k), (kb, n) = a_shape, b_shape
    if kb != k:
        return None, f"inner dimensions differ (A has K={k}, B has K={kb})"
    scaling = scaling_of(tuple(sa_shape), tuple(sb_shape), m, n, k)
    if scaling is None:
        kblocks, nblocks = -(-k // BLOCK), -(-n // BLOCK)
        return None, (f"scales of shapes {tuple(sa_shape)} and {tuple(sb_shape)} fit no scaling: "
                      f"tensorwise () and (), rowwise ({m}, 1) and (1, {n}), blockwise "
                      f"({m}, {kblocks}) and ({kblocks}, {nblocks})")
    return scaling, ""


def offsets_problem(offsets: Sequence[int], groups: int, total_m: int) -> str | None:
    """What is wrong with grouped offsets for ``groups`` groups over ``total_m`` rows, or ``None``."""
    ends = [int(o) for o in offsets]
    if len(ends) != groups:
        return f"{len(ends)} offsets for {groups} groups (B has {groups})"
    previous = 0
    for g, end in enumerate(ends):
        if end < previous:
            return f"offsets must not decrease (offset {g} is {end}, after {previous})"
        previous = end
    if ends and ends[-1] > total_m:
        return f"the last offset {ends[-1]} is past A's {total_m} rows"
    return None


def group_bounds(offsets: Sequence[int]) -> list[tuple[int, int]]:
    """``(start, stop)`` rows of each group from cumulative end rows."""
    bounds, start = [], 0
    for end in offsets:
        bounds.append((start, int(end)))
        start = int(end)
    return bounds


def broadcast_batch(a_shape: Sequence[int], b_shape: Sequence[int]) -> tuple[int, ...] | None:
    """The batch dimensions of C for operands (…×M×K) and (…×K×N) as ``torch.matmul`` broadcasts
    them, or ``None`` when they do not broadcast."""
    try:
        return tuple(np.broadcast_shapes(tuple(a_shape[:-2]), tuple(b_shape[:-2])))
    except ValueError:
        return None


def batched_problem(a_shape: Sequence[int], b_shape: Sequence[int]) -> tuple[tuple[int, ...] | None, str]:
    """C's batch dimensions for a batched product and ``""``, or ``None`` and what is wrong."""
    if len(a_shape) < 2 or len(b_shape) < 2:
        return None, "A and B must have 2 dimensions or more (…×M×K and …×K×N)"
    if a_shape[-1] != b_shape[-2]:
        return None, f"inner dimensions differ (A has K={a_shape[-1]}, B has K={b_shape[-2]})"
    batch = broadcast_batch(a_shape, b_shape)
    if batch is None:
        return None, (f"batch dimensions {tuple(a_shape[:-2])} and {tuple(b_shape[:-2])} do not "
                      "broadcast")
    return batch, ""


def batch_count(batch: Sequence[int]) -> int:
    """How many matrices a batch shape holds."""
    return math.prod(batch)
