"""The dtype names gemmzoo knows, and the rounding facts the conformance bounds are built from."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class DtypeInfo:
    """Rounding facts for one dtype mode.

    ``unit_roundoff`` is that of the stored result; ``operand_roundoff`` is the relative error the
    math units may add to each operand on top of the stored value (TF32 keeps 10 mantissa bits
    of each fp32 operand); ``accumulate_roundoff`` is that of the sum over K, which must be at
    least fp32 for every 16-bit mode; ``exact_integers`` is the largest n such that every integer
    of magnitude up to n is exactly representable in the result. ``result`` names the dtype of
    C (its own name except for ``float8_e4m3fn``, whose products come back in bfloat16).
    ``block_sum_roundoff`` is the relative error, against the sum of the |products| in it, that
    the math units may make while they sum one block of products before the block's sum joins the
    fp32 accumulator: 0 except for float8_e4m3fn, whose tensor cores add the products inside each
    MMA instruction with fewer bits than fp32 even when partial sums are promoted.
    """

    name: str
    host_dtype: str
    unit_roundoff: float
    operand_roundoff: float
    accumulate_roundoff: float
    exact_integers: int
    smallest_subnormal: float
    result: str = ""
    block_sum_roundoff: float = 0.0

    def __post_init__(self) -> None:
        if not self.result:
            object.__setattr__(self, "result", self.name)


_FP32_U = 2.0**-24

DTYPE_INFO: dict[str, DtypeInfo] = {
    "float16": DtypeInfo("float16", "float32", 2.0**-11, 0.0, _FP32_U, 2**11, 2.0**-24),
    "bfloat16": DtypeInfo("bfloat16", "float32", 2.0**-8, 0.0, _FP32_U, 2**8, 2.0**-133),
    "float32": DtypeInfo("float32", "float32", _FP32_U, 0.0, _FP32_U, 2**24, 2.0**-149),
    # TF32 operands keep 10 explicit mantissa bits; hardware may truncate rather than round, so
    # the operand error is one full ulp (2**-10), not half of one.
    "tf32": DtypeInfo("tf32", "float32", _FP32_U, 2.0**-10, _FP32_U, 2**24, 2.0**-149),
    "float64": DtypeInfo("float64", "float64", 2.0**-53, 0.0, 2.0**-53, 2**53, 2.0**-1074),
    # OCP FP8 E4M3 operands, C in bfloat16: the operands are exact E4M3 values and their products
    # are exact in fp32, so the rounding facts are bfloat16's with an fp32 accumulation, plus one
    # allowance for the sums inside Hopper's fp8 MMA instructions, which keep fewer bits than fp32
    # even with partial sums promoted. 2**-12 of the products' magnitude leaves room above the
    # largest error cuBLAS (use_fast_accum=False) and triton-fp8 made on the suite's case with rows
    # and columns scaled over many orders of magnitude, and stays below what products without
    # promotion ("fast accumulation") reach at long K (docs/results/2026-11-23-fp8.md).
    "float8_e4m3fn": DtypeInfo(
        "float8_e4m3fn", "float32", 2.0**-8, 0.0, _FP32_U, 2**8, 2.0**-133, result="bfloat16",
        block_sum_roundoff=2.0**-12,
    ),
}

DTYPES: tuple[str, ...] = tuple(DTYPE_INFO)
"""Every dtype name a backend may declare, in a fixed order."""


def dtype_info(name: str) -> DtypeInfo:
    """The :class:`DtypeInfo` for ``name``; a ``ValueError`` listing the known names otherwise."""
    try:
        return DTYPE_INFO[name]
    except KeyError:
        raise ValueError(f"unknown dtype {name!r}; known: {', '.join(DTYPES)}") from None


def result_dtype(name: str) -> str:
    """The dtype name of C for operands of dtype mode ``name`` (``bfloat16`` for float8_e4m3fn)."""
    return dtype_info(name).result


def host_dtype(name: str) -> np.dtype:
    """The NumPy dtype ``Backend.to_numpy`` returns for arrays of dtype mode ``name``."""
    return np.dtype(dtype_info(name).host_dtype)


def dtype_name(value: Any) -> str:
    """gemmzoo's name for ``value``: a name (returned as given), a NumPy dtype or scalar type
    (``np.float32``, ``np.dtype("float16")``, ``ml_dtypes.bfloat16``) or a torch dtype
    (``torch.float16``). Unknown values raise a ``ValueError`` listing the known names; this
    never imports torch."""
    if isinstance(value, str):
        return value
    text = str(value)
    if text.startswith("torch."):  # a torch.dtype, recognised without importing torch
        name = text[len("torch."):]
    else:
        try:
            name = np.dtype(value).name
        except TypeError:
            raise ValueError(f"unknown dtype {value!r}; known: {', '.join(DTYPES)}") from None
    if name not in DTYPE_INFO:
        raise ValueError(f"dtype {value!r} ({name}) is not one gemmzoo computes; known: {', '.join(DTYPES)}")
    return name
