"""Judging one result C = A·B: the one judge of the conformance suite and of the benchmarks.

A result is right when it is a new native array of the operands' type, of shape (M, N) and of
their dtype, ``to_numpy`` gives the host dtype, NaN and ±Inf fall where the float64 reference
has them, and every finite element is within the bound of the backend's accuracy class
(:func:`gemmzoo.conformance.bounds.class_bound`).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gemmzoo.conformance.bounds import HostOperand, bound_rule, host_values
from gemmzoo.conformance.bounds import reference as float64_reference
from gemmzoo.conformance.rows import BLOCK_ELEMENTS, by_rows
from gemmzoo.contract.accuracy import accuracy_of
from gemmzoo.contract.backend import dtype_name
from gemmzoo.contract.dtypes import host_dtype, result_dtype


class CheckFailedError(Exception):
    """A conformance check that did not hold; the message says which and where."""


@dataclass(frozen=True)
class Verdict:
    """A result that passed: ``error_ratio`` is the largest ``|error| / bound`` (at most 1),
    ``rel_error`` ``‖C - R‖ / ‖R‖`` over the finite elements, ``host`` C on the host."""

    error_ratio: float
    rel_error: float
    max_abs_error: float
    detail: str
    host: np.ndarray = field(repr=False, compare=False)


#: Elements of a temporary in :func:`plain_product` (128 MiB of float64).
PLAIN_CHUNK = 1 << 24


def plain_product(a: np.ndarray, b: np.ndarray, chunk: int = PLAIN_CHUNK) -> np.ndarray:
    """``a @ b`` in float64 as elementwise products and plain sums, so IEEE's NaN and Inf rules
    hold (0·Inf is NaN, Inf - Inf is NaN) with no BLAS shortcut. The sum runs over slices of K
    sized so that no temporary holds more than ``chunk`` elements (default :data:`PLAIN_CHUNK`;
    at least one step of K whatever ``chunk``)."""
    m, k = a.shape
    n = b.shape[1]
    a64, b64 = a.astype(np.float64, copy=False), b.astype(np.float64, copy=False)
    out = np.zeros((m, n))
    step = max(1, chunk // max(1, m * n))
    with np.errstate(invalid="ignore", over="ignore"):
        for start in range(0, k, step):
            out += (a64[:, start:start + step, None] * b64[None, start:start + step, :]).sum(axis=1)
    return out


def reference_product(a: np.ndarray, b: np.ndarray,
                      exact_ieee: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """The float64 product and the product of absolute values. With ``exact_ieee`` every element
    whose row of A or column of B holds a NaN or an Inf is the :func:`plain_product` of that row
    and column (IEEE NaN/Inf rules, no BLAS shortcuts); the others, all of whose terms are finite,
    keep the float64 product (no term of 8-, 16- or 32-bit operands can overflow float64)."""
    ref, magnitude = float64_reference(a, b)
    if exact_ieee:
        a64, b64 = a.astype(np.float64), b.astype(np.float64)
        for i in np.flatnonzero(~np.isfinite(a64).all(axis=1)):
            ref[i, :] = plain_product(a64[i:i + 1, :], b64)[0]
        for j in np.flatnonzero(~np.isfinite(b64).all(axis=0)):
            ref[:, j] = plain_product(a64, b64[:, j:j + 1])[:, 0]
    return ref, magnitude


def check_native_result(backend: Any, shape: tuple[int, int], dtype: str, a: Any, c: Any) -> np.ndarray:
    """Check C's type, shape and dtype against operand ``a``; return C on the host."""
    if type(c) is not type(a):
        raise CheckFailedError(f"C is a {type(c).__name__}, the operands are {type(a).__name__}")
    if tuple(c.shape) != shape:
        raise CheckFailedError(f"C has shape {tuple(c.shape)}, expected {shape}")
    expected = dtype_name(a) if result_dtype(dtype) == dtype else result_dtype(dtype)  # bf16 for fp8
    if dtype_name(c) != expected:
        raise CheckFailedError(f"C has dtype {dtype_name(c)}, expected {expected} ({dtype} operands)")
    host = backend.to_numpy(c)
    if not isinstance(host, np.ndarray) or host.dtype != host_dtype(dtype) or host.shape != shape:
        got = f"{host.dtype} {host.shape}" if isinstance(host, np.ndarray) else type(host).__name__
        raise CheckFailedError(f"to_numpy(C) gave {got}, expected {host_dtype(dtype)} {shape}")
    return host


def compare_elements(c: np.ndarray, ref: np.ndarray, bound: np.ndarray) -> tuple[float, np.ndarray]:
    """Raise :class:`CheckFailedError` unless C matches the reference's NaN and Inf pattern and every
    finite element is within ``bound``; return the largest ``|error| / bound`` and the errors."""
    nan_c, nan_r = np.isnan(c), np.isnan(ref)
    if not np.array_equal(nan_c, nan_r):
        where = tuple(int(i) for i in np.argwhere(nan_c != nan_r)[0])
        raise CheckFailedError(
            f"NaN pattern differs at {int((nan_c != nan_r).sum())} of {c.size} elements; "
            f"first at {where}: C={c[where]!r}, expected {ref[where]!r}"
        )
    inf_c, inf_r = np.isinf(c), np.isinf(ref)
    same_inf = np.array_equal(inf_c, inf_r) and np.array_equal(np.sign(c[inf_c]), np.sign(ref[inf_r]))
    if not same_inf:
        wrong = (inf_c != inf_r) | (inf_c & (np.sign(c) != np.sign(ref)))
        where = tuple(int(i) for i in np.argwhere(wrong)[0])
        raise CheckFailedError(
            f"Inf pattern differs; first at {where}: C={c[where]!r}, expected {ref[where]!r}")
    finite = np.isfinite(ref)
    error = np.zeros_like(ref)
    error[finite] = np.abs(c[finite].astype(np.float64) - ref[finite])
    over = error > bound
    if over.any():
        where = tuple(int(i) for i in np.argwhere(over)[0])
        raise CheckFailedError(
            f"{int(over.sum())} of {c.size} elements outside the error bound; first at {where}: "
            f"C={float(c[where])!r}, expected {float(ref[where])!r}, |error|={float(error[where]):.3e} "
            f"> bound {float(bound[where]):.3e}"
        )
    ratio = float(np.max(error / np.maximum(bound, np.finfo(np.float64).tiny), initial=0.0))
    return ratio, error


def judge_result(
    backend: Any,
    dtype: str,
    a: Any,
    c: Any,
    a_host: np.ndarray,
    b_host: HostOperand,
    *,
    reference: tuple[np.ndarray, np.ndarray] | None = None,
    exact_ieee: bool = False,
) -> Verdict:
    """Judge ``c``, the backend's product of native ``a`` (and B), whose host values (exactly the
    values the backend received) are ``a_host`` and ``b_host``. ``reference`` is the
    ``(A·B, |A|·|B|)`` pair when the caller has it already; ``b_host`` may then be a function
    that copies B to the host, called only when B's values are needed (see
    :func:`~gemmzoo.conformance.bounds.class_bound`). Raises :class:`CheckFailedError` with
    what is wrong; returns a :class:`Verdict`."""
    if reference is None:
        b_host = host_values(b_host)
        reference = reference_product(a_host, b_host, exact_ieee)
    elif callable(b_host):
        b_host = functools.cache(b_host)
    ref, magnitude = reference
    c_host = check_native_result(backend, (a_host.shape[0], ref.shape[1]), dtype, a, c)
    accuracy = accuracy_of(backend)
    rule = bound_rule(accuracy, dtype, a_host, b_host, magnitude)
    judged = _judged_by_rows(c_host, ref, magnitude, rule) if ref.size > BLOCK_ELEMENTS else None
    if judged is None:  # one block, or a block failed: judged whole, for the whole matrix's message
        judged = _tally(c_host, ref, rule(ref, magnitude))
    ratio, error_squares, max_error, ref_squares = judged
    error_norm, ref_norm = math.sqrt(error_squares), math.sqrt(ref_squares)
    rel = error_norm / ref_norm if ref_norm > 0 else error_norm
    named = "" if accuracy == "componentwise" else f" ({accuracy} bound)"
    detail = f"max error {ratio:.3g} of the bound{named}"
    return Verdict(ratio, rel, max_error, detail, c_host)


def _judged_by_rows(c: np.ndarray, ref: np.ndarray, magnitude: np.ndarray,
                    rule: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> tuple[float, ...] | None:
    """:func:`compare_elements` in row blocks side by side (:mod:`gemmzoo.conformance.rows`): the
    largest ``|error| / bound``, the sums of squared errors and of squared finite reference
    values, and the largest error; ``None`` when any block fails (the whole is judged again,
    for a message about the whole)."""
    def block(rows: slice) -> tuple[float, float, float, float] | None:
        part = ref[rows]
        try:
            return _tally(c[rows], part, rule(part, magnitude[rows]))
        except CheckFailedError:
            return None

    blocks = by_rows(block, *ref.shape)
    if any(b is None for b in blocks):
        return None
    return (max(b[0] for b in blocks), sum(b[1] for b in blocks), max(b[2] for b in blocks),
            sum(b[3] for b in blocks))


def _tally(c: np.ndarray, ref: np.ndarray, bound: np.ndarray) -> tuple[float, float, float, float]:
    """:func:`compare_elements` of ``c`` (all of a result, or a block of its rows) against
    ``ref`` within ``bound``, as what adds up over blocks: the largest ``|error| / bound``, the sum
    of squared errors, the largest error and the sum of squared finite reference values. Raises
    :class:`CheckFailedError` as :func:`compare_elements` does."""
    ratio, error = compare_elements(c, ref, bound)
    return (ratio, float(np.sum(np.square(error))), float(error.max(initial=0.0)),
            float(np.sum(np.square(ref[np.isfinite(ref)]))))
