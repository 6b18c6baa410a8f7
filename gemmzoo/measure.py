"""The measurement engine: inputs for a grid point, a one-off correctness check, and timing.

Shared by ``gemmzoo bench``, the pytest-benchmark fixtures, ``gemmzoo tune`` and
``best_backend``. Inputs are random normal values made outside any timed region. On a CUDA
backend each call is timed with device events (start and end recorded around the GEMM alone,
the L2 cache flushed between calls outside the events, one synchronisation per batch of calls),
so a sample is the device time of one GEMM; on the CPU a sample is the wall time of one call.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from gemmzoo.conformance.bounds import error_bound
from gemmzoo.errors import GemmError
from gemmzoo.grids import GridPoint

L2_FLUSH_BYTES = 256 * 1024 * 1024  # larger than any current GPU's L2, like triton.testing.do_bench


class WrongResultError(GemmError):
    """A backend's result is outside the conformance error bound: it is wrong, not fast."""


@dataclass
class Problem:
    """Native inputs for one grid point on one backend."""

    backend: Any
    point: GridPoint
    a: Any
    b: Any
    a_host: np.ndarray
    b_host: np.ndarray


@dataclass(frozen=True)
class Timing:
    """Seconds per GEMM: median and quartiles over ``samples`` timed calls."""

    median_s: float
    q1_s: float
    q3_s: float
    samples: int
    method: str

    @property
    def spread_s(self) -> float:
        """The interquartile range."""
        return self.q3_s - self.q1_s


@dataclass(frozen=True)
class Measurement:
    """One backend on one grid point: its timing and its error relative to the bound."""

    backend: str
    point: GridPoint
    timing: Timing
    error_ratio: float

    @property
    def tflops(self) -> float:
        return self.point.flops / self.timing.median_s / 1e12 if self.timing.median_s > 0 else 0.0


def _operand(backend: Any, x: np.ndarray, dtype: str, transposed: bool) -> Any:
    if transposed:  # stored as its transpose: a column-major view, as BLAS's "T"
        return backend.from_numpy(np.ascontiguousarray(x.T), dtype).T
    return backend.from_numpy(x, dtype)


def prepare(backend: Any, point: GridPoint, seed: int = 0) -> Problem:
    """Random normal operands for ``point`` on ``backend``, laid out as ``point.layout`` says."""
    rng = np.random.default_rng(seed)
    a = _operand(backend, rng.standard_normal((point.m, point.k)), point.dtype, point.layout[0] == "T")
    b = _operand(backend, rng.standard_normal((point.k, point.n)), point.dtype, point.layout[1] == "T")
    return Problem(backend, point, a, b, backend.to_numpy(a), backend.to_numpy(b))


def check(problem: Problem) -> float:
    """Run the GEMM once and compare every element with the float64 reference.

    Returns the largest ``|error| / bound`` (at most 1); raises :class:`WrongResultError` when
    any element is outside the conformance bound or the result has the wrong shape.
    """
    point, backend = problem.point, problem.backend
    c = backend.to_numpy(backend.matmul(problem.a, problem.b))
    if c.shape != (point.m, point.n):
        expected = (point.m, point.n)
        raise WrongResultError(f"{backend.name}: {point.id}: C has shape {c.shape}, expected {expected}")
    a64, b64 = problem.a_host.astype(np.float64), problem.b_host.astype(np.float64)
    ref = a64 @ b64
    bound = error_bound(point.dtype, point.k, ref, np.abs(a64) @ np.abs(b64))
    error = np.abs(c.astype(np.float64) - ref)
    ratio = error / bound
    if not np.all(np.isfinite(c)) or np.any(ratio > 1):
        worst = float(np.nanmax(ratio)) if np.any(np.isfinite(ratio)) else float("nan")
        raise WrongResultError(
            f"{backend.name}: {point.id}: result outside the error bound (worst |error|/bound = {worst:.3g})"
        )
    return float(ratio.max(initial=0.0))


def _cpu_samples(call: Callable[[], Any], backend: Any, budget_s: float, max_samples: int) -> list[float]:
    samples: list[float] = []
    deadline = time.perf_counter() + budget_s
    while len(samples) < max_samples and (len(samples) < 3 or time.perf_counter() < deadline):
        start = time.perf_counter()
        call()
        backend.synchronize()
        samples.append(time.perf_counter() - start)
    return samples


class CudaEventTimer:
    """Device-time samples from CUDA events, one synchronisation per batch of calls.

    Events come from torch when it is installed, else from CuPy; both record on the current
    stream, which is where the bundled backends launch their work.
    """

    def __init__(self) -> None:
        try:
            import torch

            self._event = lambda: torch.cuda.Event(enable_timing=True)
            self._flush_buffer = torch.empty(L2_FLUSH_BYTES // 4, dtype=torch.int32, device="cuda")
            self._flush = self._flush_buffer.zero_
            self._sync = torch.cuda.synchronize
            self._elapsed_ms = lambda start, end: start.elapsed_time(end)
        except ImportError:
            import cupy

            self._event = cupy.cuda.Event
            self._flush_buffer = cupy.empty(L2_FLUSH_BYTES // 4, dtype=cupy.int32)
            self._flush = lambda: self._flush_buffer.fill(0)
            self._sync = cupy.cuda.Device().synchronize
            self._elapsed_ms = lambda start, end: cupy.cuda.get_elapsed_time(start, end)

    def batch(self, call: Callable[[], Any], count: int, flush: bool = True) -> list[float]:
        """Seconds of device time for each of ``count`` calls."""
        pairs = []
        for _ in range(count):
            if flush:
                self._flush()
            start, end = self._event(), self._event()
            start.record()
            call()
            end.record()
            pairs.append((start, end))
        self._sync()
        return [self._elapsed_ms(start, end) / 1e3 for start, end in pairs]


def _cuda_samples(call: Callable[[], Any], budget_s: float, max_samples: int) -> list[float]:
    timer = CudaEventTimer()
    first = timer.batch(call, 1)[0]
    batch = max(1, min(max_samples, int(0.02 / max(first, 1e-6))))  # about 20 ms of GEMMs per batch
    samples: list[float] = []
    deadline = time.perf_counter() + budget_s
    while len(samples) < max_samples and (len(samples) < 3 or time.perf_counter() < deadline):
        samples += timer.batch(call, batch)
    return samples


def time_problem(problem: Problem, budget_s: float = 0.5, warmup: int = 2, max_samples: int = 1000) -> Timing:
    """Time the GEMM of ``problem``: warm-up calls first, then samples until the budget is spent
    (at least 3)."""
    backend = problem.backend

    def call() -> Any:
        return backend.matmul(problem.a, problem.b)

    for _ in range(warmup):
        call()
    backend.synchronize()
    if backend.device == "cuda":
        samples, method = _cuda_samples(call, budget_s, max_samples), "cuda-events, L2 flushed"
    else:
        samples, method = _cpu_samples(call, backend, budget_s, max_samples), "wall clock"
    if len(samples) > 1:
        q1, median, q3 = statistics.quantiles(samples, n=4, method="inclusive")
    else:
        q1 = median = q3 = samples[0]
    return Timing(median, q1, q3, len(samples), method)


def measure(
    backend: Any, point: GridPoint, budget_s: float = 0.5, verify: bool = True, seed: int = 0
) -> Measurement:
    """Prepare, check once (unless ``verify`` is False) and time one backend on one point."""
    problem = prepare(backend, point, seed)
    ratio = check(problem) if verify else float("nan")
    return Measurement(backend.name, point, time_problem(problem, budget_s), ratio)
