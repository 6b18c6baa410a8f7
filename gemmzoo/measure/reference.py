"""Judging a problem's result before it is timed: the float64 reference (kept for the backends
measured one after another on a point) and the conformance suite's judge."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from gemmzoo.conformance.bounds import reference
from gemmzoo.conformance.judge import CheckFailedError, judge_result
from gemmzoo.errors import GemmError
from gemmzoo.measure.problems import Problem


class WrongResultError(GemmError):
    """A backend's result is outside the conformance error bound: it is wrong, not fast."""


@dataclass(frozen=True)
class ResultDeviation:
    """How far one result is from the float64 reference.

    ``error_ratio``: the largest ``|error| / bound`` over the elements (at most 1 for a
    conforming result); ``rel_error``: ``‖C - R‖ / ‖R‖`` (Frobenius norms); ``max_abs_error``:
    the largest ``|C - R|``.
    """

    error_ratio: float
    rel_error: float
    max_abs_error: float


UNCHECKED = ResultDeviation(float("nan"), float("nan"), float("nan"))
"""The deviation of a result that was not judged."""

_reference_cache: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []


def host_reference(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``A·B`` and ``|A|·|B|`` in float64. The last answer is kept: the backends measured one
    after another on a point get the same host operands, and the big references are slow."""
    for cached_a, cached_b, ref, magnitude in _reference_cache:
        if cached_a.shape == a.shape and cached_b.shape == b.shape and np.array_equal(cached_a, a) \
                and np.array_equal(cached_b, b):
            return ref, magnitude
    ref, magnitude = reference(a, b)
    _reference_cache[:] = [(a.copy(), b.copy(), ref, magnitude)]
    return ref, magnitude


def judge_problem(problem: Problem) -> ResultDeviation:
    """Run the GEMM once and judge it as the conformance suite does
    (:func:`gemmzoo.conformance.judge.judge_result`): C's type, shape and dtype, ``to_numpy``'s
    dtype, NaN and Inf where the float64 reference has them, and every element within the bound
    of the backend's accuracy class. For a CUDA backend the float64 reference is computed on its
    GPU when :mod:`gemmzoo.conformance.verify` can, else on the host.

    Raises :class:`WrongResultError` saying what is wrong when any of that fails.
    """
    point, backend = problem.point, problem.backend
    c = backend.matmul(problem.a, problem.b)
    expected = None
    if backend.device == "cuda":  # the float64 products on the GPU where it can (gemmzoo.conformance.verify)
        from gemmzoo.conformance.verify import device_reference

        expected = device_reference(problem.a, problem.b)
    if expected is None:
        expected = host_reference(problem.a_host, problem.b_host)
    try:  # B (kept by the problem once copied) is copied back only if the judge needs its values
        verdict = judge_result(backend, point.dtype, problem.a, c, problem.a_host, lambda: problem.b_host,
                               reference=expected)
    except CheckFailedError as failure:
        raise WrongResultError(f"{backend.name}: {point.id}: {failure}") from None
    return ResultDeviation(verdict.error_ratio, verdict.rel_error, verdict.max_abs_error)


def check(problem: Problem) -> float:
    """Run the GEMM once and judge it (see :func:`judge_problem`); returns the largest
    ``|error| / bound`` (at most 1), or raises :class:`WrongResultError`."""
    return judge_problem(problem).error_ratio


def spot_check(problem: Problem, a: Any, b: Any, c: Any, seed: int = 0) -> None:
    """Freivalds' check of one timed call's result ``c`` of ``a`` and ``b`` (operands holding the
    problem's values): ``C·x`` against ``A·(B·x)`` in float64 for a random ``x``, within the
    dtype's rounding of ``|A|·(|B|·|x|)``, in O((M + N)·K) work. A backend right on the call
    judged before the timing and wrong on the calls timed (a result cached by address, one
    computed only on the first calls) raises :class:`WrongResultError`."""
    from gemmzoo.contract.accuracy import COMPONENTWISE, accuracy_of
    from gemmzoo.contract.dtypes import dtype_info

    point, backend = problem.point, problem.backend
    if point.m * point.n * point.k == 0:
        return
    host = np.asarray(backend.to_numpy(c), dtype=np.float64)
    if host.shape != (point.m, point.n):
        raise WrongResultError(f"{backend.name}: {point.id}: a timed call returned shape {host.shape}")
    x, expected, scale = problem.freivalds(seed)
    info = dtype_info(point.dtype)
    factor = 4 * (point.k * info.accumulate_roundoff + 2 * info.operand_roundoff + 2 * info.unit_roundoff
                  + info.block_sum_roundoff * point.k)
    with np.errstate(invalid="ignore", over="ignore"):
        got = host @ x
    if accuracy_of(backend) != COMPONENTWISE:  # bounded normwise: the largest row's scale for all
        scale = np.full_like(scale, scale.max(initial=0.0) * 16)
    tolerance = factor * scale + info.smallest_subnormal * point.k
    off = ~(np.abs(got - expected) <= tolerance)
    if off.any():
        row = int(np.argmax(off))
        raise WrongResultError(
            f"{backend.name}: {point.id}: a timed call's result is wrong (Freivalds' check of the last timed "
            f"call: row {row} of C·x is {got[row]!r}, A·(B·x) is {expected[row]!r}, tolerance "
            f"{tolerance[row]:.3g}; {int(off.sum())} of {point.m} rows off)")
