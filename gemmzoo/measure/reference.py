"""Judging a problem's result before it is timed: the float64 reference (kept for the backends
measured one after another on a point) and the conformance suite's judge."""

from __future__ import annotations

from dataclasses import dataclass

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
    GPU when :mod:`gemmzoo.verify` can, else on the host.

    Raises :class:`WrongResultError` saying what is wrong when any of that fails.
    """
    point, backend = problem.point, problem.backend
    c = backend.matmul(problem.a, problem.b)
    expected = None
    if backend.device == "cuda":  # the float64 products on the GPU where it can (gemmzoo.verify)
        from gemmzoo.verify import device_reference

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
