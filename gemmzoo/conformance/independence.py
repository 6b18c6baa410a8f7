"""What the suite asks of the arrays around a product, beyond C's values.

- **The caller's values:** what ``from_numpy`` holds must be the caller's values rounded to the
  dtype (exactly for float64, float32 and tf32; within the dtype's rounding for the 16-bit types,
  whose conversions may round through float32 first). A backend that holds less (float64 data
  rounded through float32) is judged against the values it was given, not the ones it kept.
- **Fresh results:** C never shares memory with an operand or with an earlier result, so a
  caller's earlier results never change under it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from gemmzoo.conformance.judge import CheckFailedError
from gemmzoo.conformance.rows import BLOCK_ELEMENTS, by_rows
from gemmzoo.contract.dtypes import dtype_info

#: Dtypes whose held values must equal the caller's rounded by NumPy, bit for bit.
_EXACT = {"float64": np.float64, "float32": np.float32, "tf32": np.float32}
#: The largest finite value of the 16-bit dtypes: a caller's value past it may be held as ±Inf.
_LARGEST = {"float16": 65504.0, "bfloat16": 3.3895313892515355e38}


def check_held(label: str, caller: np.ndarray, held: np.ndarray, dtype: str) -> None:
    """Raise :class:`CheckFailedError` unless ``held`` (``to_numpy`` of ``from_numpy(caller)``)
    is ``caller`` rounded to ``dtype``; float8_e4m3fn has its own conversion check."""
    if not isinstance(held, np.ndarray):
        raise CheckFailedError(f"to_numpy({label}) gave a {type(held).__name__}, not a numpy.ndarray")
    if dtype == "float8_e4m3fn":
        return
    if _held_exactly_by_rows(caller, held, dtype):
        return
    caller64 = np.asarray(caller, dtype=np.float64)
    held64 = np.asarray(held, dtype=np.float64)
    if held64.shape != caller64.shape:
        raise CheckFailedError(f"{label} is held with shape {held64.shape}, given {caller64.shape}")
    if dtype not in _EXACT:
        # an element held as the caller's value rounded once, or through float32, is within the
        # rounding below; only the others (none, from most backends) are looked at element by element
        pending = ~_rounded_either_way(caller64, np.asarray(held), dtype)
        if not pending.any():
            return
        caller64, held64 = _only(caller64, pending), _only(held64, pending)
    if dtype in _EXACT:
        expected = caller64.astype(_EXACT[dtype]).astype(np.float64)
        wrong = ~((held64 == expected) | (np.isnan(held64) & np.isnan(expected)))
        slack = np.zeros_like(caller64)
    else:
        expected = caller64
        info = dtype_info(dtype)
        with np.errstate(invalid="ignore", over="ignore"):
            slack = np.abs(caller64) * info.unit_roundoff * (1 + 2.0**-10) + info.smallest_subnormal
            diff = np.abs(held64 - caller64)
        same_special = (np.isnan(held64) & np.isnan(caller64)) | (held64 == caller64)
        with np.errstate(invalid="ignore"):
            overflowed = np.isinf(held64) & (np.sign(held64) == np.sign(caller64)) \
                & (np.abs(caller64) >= _LARGEST.get(dtype, np.inf))
        with np.errstate(invalid="ignore"):
            wrong = ~(same_special | (diff <= slack) | overflowed)
    if wrong.any():
        where = tuple(int(i) for i in np.argwhere(wrong)[0])
        raise CheckFailedError(
            f"from_numpy does not hold the caller's values rounded to {dtype}: {label}{list(where)} was "
            f"given {caller64[where]!r}, is held as {held64[where]!r} (expected {expected[where]!r}"
            f"{f' within {slack[where]:.3g}' if slack[where] else ''}); {int(wrong.sum())} of "
            f"{wrong.size} elements differ")


def _held_exactly_by_rows(caller: np.ndarray, held: np.ndarray, dtype: str) -> bool:
    """Whether a large matrix ``held`` is ``caller`` rounded as :func:`check_held` expects of
    every element with no slack (16-bit: rounded once or through float32), checked in row blocks
    side by side (:mod:`gemmzoo.conformance.rows`); ``False`` also for a small or not 2-D array,
    which the whole check then looks at."""
    caller = np.asarray(caller)
    if caller.ndim != 2 or held.shape != caller.shape or caller.size <= BLOCK_ELEMENTS:
        return False

    def block(rows: slice) -> bool:
        given, kept = np.asarray(caller[rows], dtype=np.float64), held[rows]
        if dtype in _EXACT:
            with np.errstate(invalid="ignore", over="ignore"):
                expected = given.astype(_EXACT[dtype])
            return bool(np.all((kept == expected) | (np.isnan(kept) & np.isnan(expected))))
        return bool(np.all(_rounded_either_way(given, kept, dtype)))

    return all(by_rows(block, *caller.shape))


def _rounded_either_way(caller64: np.ndarray, held: np.ndarray, dtype: str) -> np.ndarray:
    """Where ``held`` is ``caller64`` rounded to ``dtype`` (16-bit) directly or through float32."""
    import ml_dtypes

    target = {"float16": np.float16, "bfloat16": ml_dtypes.bfloat16}[dtype]
    with np.errstate(invalid="ignore", over="ignore"):
        direct = caller64.astype(target).astype(held.dtype)
        through = caller64.astype(np.float32).astype(target).astype(held.dtype)
    return (held == direct) | (held == through)


def _only(x: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """``x`` with every element outside ``keep`` set to 0 (held and given alike: 0 is held as 0)."""
    kept = np.zeros_like(x)
    kept[keep] = x[keep]
    return kept


def _byte_bounds(x: np.ndarray) -> tuple[int, int]:
    try:
        from numpy.lib.array_utils import byte_bounds  # NumPy 2
    except ImportError:  # NumPy 1
        byte_bounds = np.byte_bounds
    low, high = byte_bounds(x)
    return int(low), int(high)


def _span(x: Any) -> tuple[str, int, int] | None:
    """``(space, first byte, past the last byte)`` of the memory ``x`` lives in, or ``None`` when
    it cannot be told (then only identity counts as sharing)."""
    try:
        if isinstance(x, np.ndarray):
            low, high = _byte_bounds(x)
            return "host", low, high
        storage = getattr(x, "untyped_storage", None)
        if callable(storage):  # torch: the whole storage, so any view of it shares
            held = storage()
            start = int(held.data_ptr())
            return f"torch:{x.device}", start, start + int(held.nbytes())
        data = getattr(x, "data", None)
        mem = getattr(data, "mem", None)
        if mem is not None and hasattr(mem, "ptr"):  # CuPy: the whole allocation
            return f"cupy:{getattr(x, 'device', '')}", int(mem.ptr), int(mem.ptr) + int(mem.size)
    except Exception:  # an array library that refuses the question: identity only
        return None
    return None


def shares_memory(x: Any, y: Any) -> bool:
    """Whether ``x`` and ``y`` are one object or their memory overlaps (conservatively: any two
    views of one allocation count)."""
    if x is y:
        return True
    first, second = _span(x), _span(y)
    if first is None or second is None or first[0] != second[0]:
        return False
    if first[1] == first[2] or second[1] == second[2]:
        return False
    return first[1] < second[2] and second[1] < first[2]


def check_fresh(c: Any, others: dict[str, Any]) -> None:
    """Raise :class:`CheckFailedError` when result ``c`` shares memory with any of ``others``
    (operands and earlier results, by label)."""
    for label, other in others.items():
        if other is not None and shares_memory(c, other):
            raise CheckFailedError(f"the result shares memory with {label}: a result must be a new array "
                                   "(an earlier result or an operand would change under the caller)")
