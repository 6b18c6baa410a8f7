"""Checking and timing backends on problems of the classes beyond gemm (:mod:`gemmzoo.problems.classes`):
what ``gemmzoo bench --shape CLASS:...`` and ``gemmzoo tune --shape CLASS:...`` run.

Each available backend that declares the problem's class and dtype on its device first runs that
class's conformance cases (:mod:`gemmzoo.conformance.class_cases`) in this run; one that fails is
reported WRONG (ERROR when it raised) with what failed, and is not timed. The others are timed
on random operands made by their own ``from_numpy`` (scales and offsets as arrays of the
backend's library on its device), calling the class's method directly: on CUDA
``triton.testing.do_bench``'s median where Triton is installed (L2 flushed between calls), else
CUDA events around loops of calls; on the CPU the median of timed loops of calls. Each result is
a record of the result-file format (:mod:`gemmzoo.results.schema`) with ``class`` and ``problem``.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from gemmzoo.contract.backend import declared
from gemmzoo.problems.class_math import declared_classes
from gemmzoo.problems.classes import Problem, scale_shapes

#: Seconds of calls per timed loop on the CPU, and loops.
CPU_LOOP_S = 0.05
CPU_LOOPS = 5


def contenders(problem: Problem, backends: Sequence[Any]) -> list[Any]:
    """The backends of ``backends`` that declare ``problem``'s class and dtype and are available."""
    from gemmzoo.tuning.state import unavailable_reason

    found = []
    for backend in backends:
        try:
            if problem.kind not in declared_classes(backend) or problem.dtype not in backend.dtypes:
                continue
        except Exception:  # members that fail: the backend is unavailable
            continue
        if unavailable_reason(backend) is None:
            found.append(backend)
    return found


def verdict(backend: Any, kind: str, dtype: str) -> tuple[str, str]:
    """``("ok", detail)`` when ``backend`` passes every case of class ``kind`` for ``dtype``, else
    ``("wrong" or "error", what failed)``."""
    from gemmzoo.conformance.class_cases import class_cases, run_class_case
    from gemmzoo.conformance.judge import CheckFailedError

    cases = [c for c in class_cases(backend, {dtype}) if c.kind == kind]
    for case in cases:
        try:
            run_class_case(backend, case)
        except CheckFailedError as failure:
            return "wrong", f"{case.id}: {failure}"
        except Exception as error:  # the backend raised: an error, said with the case
            return "error", f"{case.id}: {type(error).__name__}: {error}"
    return "ok", f"passed {len(cases)} {kind} cases"


def _small(like: Any, values: np.ndarray) -> Any:
    """A scale or offsets array as a tensor on ``like``'s device where ``like`` is a torch tensor
    (so no call copies it there), else the NumPy array."""
    if type(like).__module__.partition(".")[0] == "torch":
        import torch

        return torch.as_tensor(values, device=like.device)
    return values


def call_of(backend: Any, problem: Problem, seed: int = 0) -> Callable[[], Any]:
    """A call of ``backend``'s method for ``problem`` on random operands made once."""
    rng = np.random.default_rng(seed)
    m, n, k = problem.shape
    spread = 4.0 if problem.dtype == "float8_e4m3fn" else 1.0

    def operand(*shape: int) -> Any:
        return backend.from_numpy(rng.standard_normal(shape).astype(np.float32) * spread, problem.dtype)

    if problem.kind == "batched":
        a, b = operand(*problem.batch, m, k), operand(*problem.batch, k, n)
        return lambda: backend.bmm(a, b)
    if problem.kind == "scaled":
        a = operand(m, k)
        b = backend.from_numpy(np.ascontiguousarray(rng.standard_normal((n, k)).astype(np.float32) * spread),
                               problem.dtype).T  # column-major, as torch._scaled_mm wants it
        sa_shape, sb_shape = scale_shapes(problem.scaling, m, n, k)
        sa = _small(a, (rng.random(sa_shape) + 0.5).astype(np.float32))
        sb = _small(a, (rng.random(sb_shape) + 0.5).astype(np.float32))
        return lambda: backend.scaled_mm(a, b, sa, sb, "bfloat16")
    a, b = operand(m, k), operand(len(problem.groups), k, n)
    if problem.dtype == "float8_e4m3fn" and hasattr(b, "mT"):
        b = operand(len(problem.groups), n, k).mT  # each B[g] column-major, as fp8 products take it
    offsets = _small(a, np.asarray(problem.offsets(), dtype=np.int32))
    return lambda: backend.grouped_mm(a, b, offsets)


def seconds_per_call(call: Callable[[], Any], backend: Any) -> tuple[float, str]:
    """The median seconds of one call and how it was measured (see the module docstring)."""
    if backend.device == "cuda" and not declared(backend, "stream_ordered"):
        # its work runs on a stream of its own (JAX's): CUDA events on torch's stream would time
        # nothing of it, so each loop ends with the backend's own synchronize, on the wall clock
        def synchronized() -> None:
            for _ in range(10):
                call()
            backend.synchronize()

        synchronized()
        loops = []
        for _ in range(CPU_LOOPS):
            begin = time.perf_counter()
            synchronized()
            loops.append((time.perf_counter() - begin) / 10)
        return statistics.median(loops), "wall clock, median of synchronized loops of 10"
    if backend.device == "cuda":
        try:
            from triton.testing import do_bench
        except ImportError:
            do_bench = None
        if do_bench is not None:
            return do_bench(call, warmup=25, rep=100, return_mode="median") / 1e3, "do_bench median"
        import torch

        call()
        torch.cuda.synchronize()
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        loops = []
        for _ in range(CPU_LOOPS):
            start.record()
            for _ in range(10):
                call()
            stop.record()
            stop.synchronize()
            loops.append(start.elapsed_time(stop) / 1e3 / 10)
        return statistics.median(loops), "CUDA events, median of loops of 10"
    call()
    begin = time.perf_counter()
    call()
    once = max(time.perf_counter() - begin, 1e-7)
    calls = max(1, min(1000, int(CPU_LOOP_S / once)))
    loops = []
    for _ in range(CPU_LOOPS):
        begin = time.perf_counter()
        for _ in range(calls):
            call()
        backend.synchronize()
        loops.append((time.perf_counter() - begin) / calls)
    return statistics.median(loops), f"median of {CPU_LOOPS} loops of {calls} calls"


def record(backend: Any, problem: Problem, status: str, detail: str, seconds: float | None = None,
           method: str | None = None) -> dict[str, Any]:
    """One result record of the result-file format for ``backend`` at ``problem``."""
    m, n, k = problem.shape
    row: dict[str, Any] = {
        "backend": backend.name, "class": problem.kind, "problem": problem.text(), "device": backend.device,
        "m": m, "n": n, "k": k, "dtype": problem.dtype, "layout": problem.layout, "status": status,
        "median_s": seconds, "detail": detail[:2000],
    }
    if seconds:
        row["tflops"] = problem.flops / seconds / 1e12
        row["method"] = method
    return row


def run_class_bench(problems: Sequence[Problem], backends: Sequence[Any],
                    on_result: Callable[[dict[str, Any]], None] | None = None) -> list[dict[str, Any]]:
    """Check, then time, every contender of every problem; one record each (see the module
    docstring). Verdicts are taken once per backend, class and dtype."""
    verdicts: dict[tuple[str, str, str], tuple[str, str]] = {}
    results = []
    for problem in problems:
        for backend in contenders(problem, backends):
            key = (backend.name, problem.kind, problem.dtype)
            if key not in verdicts:
                verdicts[key] = verdict(backend, problem.kind, problem.dtype)
            status, detail = verdicts[key]
            if status == "ok":
                try:
                    seconds, method = seconds_per_call(call_of(backend, problem), backend)
                    row = record(backend, problem, "ok", detail, seconds, method)
                except Exception as error:  # the backend refused this problem: said, not timed
                    row = record(backend, problem, "error", f"{type(error).__name__}: {error}")
            else:
                row = record(backend, problem, status, detail)
            results.append(row)
            if on_result is not None:
                on_result(row)
    return results
