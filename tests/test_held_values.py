"""check_held: what from_numpy holds must be the caller's values rounded to the dtype."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from gemmzoo.conformance.independence import check_held
from gemmzoo.conformance.judge import CheckFailedError

_TYPES = {"float16": np.float16, "bfloat16": ml_dtypes.bfloat16}


def _held(values: np.ndarray, dtype: str, through_float32: bool) -> np.ndarray:
    source = values.astype(np.float32) if through_float32 else values
    rounded = source.astype(_TYPES[dtype])
    return rounded if dtype == "float16" else rounded.astype(np.float32)  # bfloat16's host dtype


def _caller(rng: np.random.Generator) -> np.ndarray:
    values = rng.standard_normal((37, 41)) * 2.0 ** rng.integers(-20, 20, size=(37, 41))
    values[3, 4], values[5, 6], values[7, 8] = np.nan, np.inf, -1e6  # NaN, Inf, past float16's range
    return values


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("through_float32", [False, True])
def test_values_rounded_once_or_through_float32_are_held(dtype, through_float32):
    caller = _caller(np.random.default_rng(3))
    with np.errstate(over="ignore"):
        check_held("A", caller, _held(caller, dtype, through_float32), dtype)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_one_value_off_by_more_than_its_rounding_is_caught(dtype):
    caller = _caller(np.random.default_rng(4))
    with np.errstate(over="ignore"):
        held = _held(caller, dtype, False)
    held[20, 30] = held[20, 30] * (1 + 2.0 ** -6)  # a few units in the last place of either dtype
    with pytest.raises(CheckFailedError, match=r"A\[20, 30\].*1 of 1517 elements differ"):
        check_held("A", caller, held, dtype)


def test_values_truncated_instead_of_rounded_are_caught():
    caller = np.random.default_rng(5).standard_normal((64, 64))
    truncated = (caller.astype(np.float32).view(np.uint32) & np.uint32(0xFFFF0000)).view(np.float32)
    with pytest.raises(CheckFailedError, match="elements differ"):
        check_held("B", caller, truncated, "bfloat16")
