"""``gemmzoo tune --recorded``: the problems ``gemmzoo.matmul`` recorded, measured one by one.

What sets it apart from tuning a grid:

- Backends that compile each new problem (:attr:`gemmzoo.Backend.compiles_per_problem`: Inductor's
  ``torch-compile``, XLA's ``jax-cuda``) are left out unless ``--include-compiling`` is given:
  their suites and timings take seconds a problem, and a model records dozens. So are backends
  that ``gemmzoo.matmul`` never chooses for its callers' arrays (JAX's, reached only through host
  copies). Backends named (``--backend``, ``GEMMZOO_BACKENDS``) are all timed.
- The conformance suite of every backend that will be timed runs first, one line each, so the
  time a fresh machine spends there is seen and said.
- After each problem, one line on standard error: its position, the problem, the backend
  ``gemmzoo.matmul`` will now choose for it, and the expected gain over the array library's own
  matmul (``torch`` on CUDA, ``torch-cpu`` on the CPU, else ``numpy``), from the stored times.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from gemmzoo.contract.backend import declared
from gemmzoo.problems.grids import GridPoint

#: Results with more elements than this (M·N) are not judged one by one while timing, unless
#: asked (``--verify-all``): their judge copies C, the float64 reference and its bound to the host
#: and compares every element there, seconds per backend at an LM head's size, where the timing
#: itself takes a fraction of a second. Their backends passed the conformance suite here first,
#: as every backend timed has; ``best_backend`` draws the line by M·N·K for the same reason.
JUDGED_ELEMENTS = 1 << 25


def judged(point: GridPoint, verify: bool, verify_all: bool) -> bool:
    """Whether ``point``'s measurements judge their results (see :data:`JUDGED_ELEMENTS`)."""
    return verify and (verify_all or point.m * point.n <= JUDGED_ELEMENTS)


#: The array library's own matmul on each device: what the expected gain is measured against,
#: first that has a timing at the problem.
BASELINES = {"cuda": ("torch", "cupy"), "cpu": ("torch-cpu", "numpy")}


def compiles(backend: Any) -> bool:
    """Whether ``backend`` compiles each new problem; one whose attribute cannot be read does not."""
    try:
        return declared(backend, "compiles_per_problem") is True
    except Exception:
        return False


def recorded_points() -> dict[str, list[GridPoint]]:
    """The recorded problems of each of this machine's devices (``"cpu"``, ``"cuda"``), most
    often met first."""
    from gemmzoo.tuning import state
    from gemmzoo.tuning.fingerprint import device_fingerprint

    store = state.store()
    found: dict[str, list[GridPoint]] = {}
    for device in ("cpu", "cuda"):
        try:
            fingerprint = device_fingerprint(device)
        except Exception:  # no such device here
            continue
        points = [point for point, _seen in store.recorded(fingerprint)]
        if points:
            found[device] = points
    return found


def narrowed(backends: Sequence[Any], include_compiling: bool, named: bool,
             say: Callable[[str], None]) -> list[Any]:
    """``backends`` without those ``gemmzoo.matmul`` would not choose for a recorded problem
    (baselines that are not ``selectable``; one computing on arrays the caller's reach only
    through host copies, such as JAX's) and those that compile each new problem (unless
    ``include_compiling``); all of them when they were ``named``. ``say`` hears one line per
    reason naming the available ones left out (the others are skipped anyway)."""
    if named:
        return list(backends)
    from gemmzoo.dispatch.matmul import native_kind
    from gemmzoo.tuning import state

    available = [b for b in backends if state.unavailable_reason(b) is None]
    compiling = [] if include_compiling else [b for b in available if compiles(b)]
    baselines = [b for b in available if declared(b, "selectable") is False and b not in compiling]
    far = [b for b in available if b not in compiling and b not in baselines
           and native_kind(b, min(b.dtypes)) is None]
    for group, why in ((compiling, "they compile each new problem, seconds each; --include-compiling or "
                                   "--backend NAME includes them"),
                       (baselines, "baselines for comparison, never chosen unless named; --backend NAME "
                                   "includes them"),
                       (far, "gemmzoo.matmul reaches their arrays only through host copies and does not "
                             "choose them; --backend NAME includes them")):
        if group:
            say(f"left out: {', '.join(b.name for b in group)} ({why})")
    return [b for b in backends if b not in compiling + baselines + far]


def suite_in_child(name: str, dtype: str) -> tuple[str, str, bool | None, float]:
    """Run backend ``name``'s suite for ``dtype`` in this (worker) process and store the verdict
    where the parent reads it (the same ``GEMMZOO_CACHE_DIR``, inherited): ``(name, dtype,
    passed, seconds)``, ``passed`` ``None`` where no verdict could be stored (the suite overran
    its time limit, or the backend is unavailable in the worker)."""
    from gemmzoo.plugins.registry import get_registry
    from gemmzoo.tuning import state
    from gemmzoo.tuning.tune import conformance_verdict

    started = time.perf_counter()
    backend = get_registry().get(name)
    if state.unavailable_reason(backend) is not None:
        return name, dtype, None, time.perf_counter() - started
    store = state.store()
    conformance_verdict(store, backend, dtype)
    state.verdicts.clear()  # what was stored, not what this process remembers (a timeout is not kept)
    return name, dtype, conformance_verdict(store, backend, dtype, run=False), time.perf_counter() - started


def suite_workers(device: str, jobs: int, cores: int | None = None) -> int:
    """How many worker processes run the missing suites: one per suite on CUDA (Triton's and
    Inductor's compilers keep a core busy each; the GPU work is small) up to half the cores and
    at most :data:`MAX_SUITE_WORKERS`; none (in this process) on the CPU, where the suites time
    nothing and the cores are the device."""
    import os

    if device != "cuda" or jobs < 2:
        return 0
    cores = cores if cores is not None else (os.cpu_count() or 1)
    count = min(jobs, cores // 2, MAX_SUITE_WORKERS)
    return count if count >= 2 else 0


MAX_SUITE_WORKERS = 8


def check_first(plan: Sequence[tuple[Sequence[GridPoint], Sequence[str]]], chosen: Sequence[Any],
                say: Callable[[str], None], workers: int | None = None) -> list[Any]:
    """Run the conformance suite of each backend that will be timed, for each dtype it will be
    timed in, where no verdict is stored yet, one line each with the time it took; on CUDA in
    worker processes side by side (:func:`suite_workers`; ``workers`` overrides it), so a fresh
    machine waits for the slowest suite, not for their sum. Returns the backends to leave out:
    those whose suite ended without a verdict in a worker (it overran its time limit)."""
    from gemmzoo.tuning import state
    from gemmzoo.tuning.tune import conformance_verdict

    store = state.store()
    jobs: list[tuple[Any, str]] = []
    for points, names in plan:
        dtypes = sorted({p.dtype for p in points})
        for backend in chosen:
            if backend.name not in names or state.unavailable_reason(backend) is not None:
                continue
            jobs += [(backend, dtype) for dtype in dtypes if dtype in backend.dtypes
                     and conformance_verdict(store, backend, dtype, run=False) is None]
    if not jobs:
        return []
    device = jobs[0][0].device
    count = suite_workers(device, len(jobs)) if workers is None else workers
    if count < 2:
        for backend, dtype in jobs:
            started = time.perf_counter()
            passed = conformance_verdict(store, backend, dtype)
            say(f"conformance {backend.name} {dtype}: {'passed' if passed else 'FAILED'} "
                f"({time.perf_counter() - started:.1f} s)")
        return []
    import concurrent.futures
    import multiprocessing

    say(f"conformance: {len(jobs)} {'suite' if len(jobs) == 1 else 'suites'} not yet run here, in "
        f"{count} worker processes")
    left_out = []
    by_name = {backend.name: backend for backend, _dtype in jobs}
    context = multiprocessing.get_context("spawn")  # a CUDA parent must not fork
    with concurrent.futures.ProcessPoolExecutor(count, mp_context=context) as pool:
        futures = [pool.submit(suite_in_child, backend.name, dtype) for backend, dtype in jobs]
        for future in concurrent.futures.as_completed(futures):
            try:
                name, dtype, passed, took = future.result()
            except Exception as error:  # the worker died: its backends are left out of this run
                say(f"conformance worker failed: {type(error).__name__}: {error}")
                continue
            if passed is None:
                left_out.append(by_name[name])
                say(f"conformance {name} {dtype}: no verdict (overran its time limit, or unavailable "
                    f"in a worker); left out of this run ({took:.1f} s)")
            else:
                say(f"conformance {name} {dtype}: {'passed' if passed else 'FAILED'} ({took:.1f} s)")
    state.verdicts.clear()  # read the workers' verdicts from the database
    return left_out


@dataclass(frozen=True)
class Outcome:
    """What tuning one recorded problem decided: the backend ``gemmzoo.matmul`` chooses now,
    its time, and the baseline's (``None`` where the baseline has no timing there)."""

    backend: str
    time_s: float | None
    baseline: str | None
    baseline_s: float | None

    @property
    def gain(self) -> float | None:
        """Baseline time over the chosen backend's: above 1 is faster than the baseline."""
        if self.time_s is None or self.baseline_s is None or self.time_s <= 0:
            return None
        return self.baseline_s / self.time_s

    def gain_text(self) -> str:
        """``x1.23 vs torch``, or ``-`` where there is nothing to compare."""
        gain = self.gain
        return "-" if gain is None else f"x{gain:.2f} vs {self.baseline}"


def caller_library() -> str:
    """The array library whose caller :func:`outcome` answers for: torch where it is installed
    (models), else NumPy. Among tied backends ``gemmzoo.matmul`` prefers its caller's own."""
    import importlib.util

    return "torch" if importlib.util.find_spec("torch") is not None else "numpy"


def outcome(point: GridPoint, device: str) -> Outcome | None:
    """The choice ``gemmzoo.matmul`` now makes for ``point`` on ``device`` for a caller of
    :func:`caller_library`'s arrays (from the stored measurements, never measuring), and the
    expected gain over the baseline; ``None`` when no backend can answer."""
    from gemmzoo.dispatch.matmul import native_kind
    from gemmzoo.tuning.select import explain

    library, dtype = caller_library(), point.dtype
    try:
        choice = explain((point.m, point.n, point.k), dtype, device, measure=False, layout=point.layout,
                         native=lambda b: native_kind(b, dtype) == library,
                         reachable=lambda b: native_kind(b, dtype) is not None)
    except Exception:  # nothing conforming, say: the summary's row says why
        return None
    times = {t.backend: t.median_s for t in choice.ranking}
    baseline = next((name for name in BASELINES.get(device, ()) if name in times), None)
    return Outcome(choice.backend.name, times.get(choice.backend.name), baseline,
                   times.get(baseline) if baseline else None)


def problem_text(point: GridPoint, device: str) -> str:
    """``8192x50257x768 NT bfloat16 cuda`` (the layout only when not NN)."""
    layout = "" if point.layout == "NN" else f" {point.layout}"
    return f"{point.m}x{point.n}x{point.k}{layout} {point.dtype} {device}"


def progress_line(index: int, total: int, point: GridPoint, device: str, found: Outcome | None,
                  seconds: float, checked: bool = True) -> str:
    """One problem's line: ``[k/n] MxNxK LAYOUT DTYPE DEVICE: BACKEND, TIME, xGAIN vs BASELINE
    (SECONDS)``; ``checked`` false adds that the results were not judged one by one."""
    from gemmzoo.cli.output import duration

    head = f"[{index}/{total}] {problem_text(point, device)}:"
    tail = f"{seconds:.1f} s" if checked else f"{seconds:.1f} s; results not judged one by one: --verify-all"
    if found is None:
        return f"{head} no backend gave a correct result ({tail})"
    timed = f", {duration(found.time_s)}" if found.time_s is not None else ""
    return f"{head} {found.backend}{timed}, {found.gain_text()} ({tail})"
