"""``gemmzoo tune --recorded``: the problems ``gemmzoo.matmul`` recorded, measured one by one.

What sets it apart from tuning a grid:

- Backends that compile each new problem (:attr:`gemmzoo.Backend.compiles_per_problem`: Inductor's
  ``torch-compile``, XLA's ``jax-cuda``) are left out unless ``--include-compiling`` is given:
  their suites and timings take seconds a problem, and a model records dozens. So are backends
  that ``gemmzoo.matmul`` never chooses for its callers' arrays (JAX's, reached only through host
  copies). Backends named (``--backend``, ``GEMMZOO_BACKENDS``) are all timed.
- The conformance suite of every backend that will be timed runs first, one line each, so the
  time a fresh machine spends there is seen and said (on CUDA beside the first measurements:
  :mod:`gemmzoo.cli.recorded_run`, which also says which backends are timed where, and keeps
  the run within its time budget).
- After each problem, one line on standard error: its position, the problem, the backend
  ``gemmzoo.matmul`` will now choose for it, and the expected gain over the array library's own
  matmul (``torch`` on CUDA, ``torch-cpu`` on the CPU, else ``numpy``), from the stored times.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any

from gemmzoo.contract.backend import declared
from gemmzoo.problems.grids import GridPoint

#: Results with more elements than this (M·N) are not judged one by one while timing, unless
#: asked (``--verify-all``): their judge copies C, the float64 reference and its bound to the host
#: and compares every element there, a second or more per backend at a transformer's sizes,
#: where the timing itself takes a fraction of a second. Every timed call's result is still
#: checked by Freivalds' test (``A·(B·x)`` against ``C·x``, O((M + N)·K) on the host), and
#: every backend timed passed the conformance suite here first.
JUDGED_ELEMENTS = 1 << 22
#: Results with more elements than this are not checked at all while timing, unless asked: even
#: Freivalds' test copies C to the host (an LM head's logits: gigabytes per backend). Their
#: backends passed the conformance suite here.
CHECKED_ELEMENTS = 1 << 25


def judged(point: GridPoint, verify: bool, verify_all: bool) -> bool:
    """Whether ``point``'s measurements judge their results (see :data:`JUDGED_ELEMENTS`)."""
    return verify and (verify_all or point.m * point.n <= JUDGED_ELEMENTS)


def checked(point: GridPoint, verify: bool, verify_all: bool) -> bool:
    """Whether ``point``'s measurements check their timed calls' results by Freivalds' test
    (see :data:`CHECKED_ELEMENTS`)."""
    return verify and (verify_all or point.m * point.n <= CHECKED_ELEMENTS)


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
    found: dict[str, list[GridPoint]] = {}
    for point, device, _seen in recorded_rows():
        found.setdefault(device, []).append(point)
    return found


def recorded_rows() -> list[tuple[GridPoint, str, int]]:
    """Every recorded problem of this machine's devices: ``(point, device, seen)``, most often
    met first on each device."""
    from gemmzoo.tuning import state
    from gemmzoo.tuning.fingerprint import device_fingerprint

    store = state.store()
    rows = []
    for device in ("cpu", "cuda"):
        try:
            fingerprint = device_fingerprint(device)
        except Exception:  # no such device here
            continue
        rows += [(point, device, seen) for point, seen in store.recorded(fingerprint)]
    return rows


def narrowed(backends: Sequence[Any], include_compiling: bool, named: bool,
             say: Callable[[str], None], devices: Collection[str] | None = None) -> list[Any]:
    """``backends`` without those ``gemmzoo.matmul`` would not choose for a recorded problem
    (baselines that are not ``selectable``; one computing on arrays the caller's reach only
    through host copies, such as JAX's) and those that compile each new problem (unless
    ``include_compiling``); all of them when they were ``named``. With ``devices``, only the
    backends of those devices (the devices with recorded problems) are kept. ``say`` hears one
    line per reason naming the installed ones left out (the others are skipped anyway).

    A backend left out by what it declares (compiling, not selectable) or by its device is never
    asked whether it runs here: asking imports its framework, and JAX's starts a runtime of its
    own on every device it sees, which the process then has to tear down beside torch's."""
    if named:
        return list(backends)
    from gemmzoo.dispatch.matmul import native_kind
    from gemmzoo.tuning import state

    here = [b for b in backends if devices is None or b.device in devices]
    compiling = [] if include_compiling else [b for b in here if compiles(b)]
    baselines = [b for b in here if b not in compiling and _not_selectable(b)]
    rest = [b for b in here if b not in compiling and b not in baselines]
    available = [b for b in rest if state.unavailable_reason(b) is None]
    far = [b for b in available if native_kind(b, min(b.dtypes)) is None]
    for group, why in (([b for b in compiling if _installed(b)],
                        "they compile each new problem, seconds each; --include-compiling or "
                        "--backend NAME includes them"),
                       ([b for b in baselines if _installed(b)],
                        "baselines for comparison, never chosen unless named; --backend NAME includes them"),
                       (far, "gemmzoo.matmul reaches their arrays only through host copies and does not "
                             "choose them; --backend NAME includes them")):
        if group:
            say(f"left out: {', '.join(b.name for b in group)} ({why})")
    return [b for b in here if b not in compiling + baselines + far]


def _not_selectable(backend: Any) -> bool:
    try:
        return declared(backend, "selectable") is False
    except Exception:  # unreadable: it is asked whether it runs here, and says what is wrong
        return False


def _installed(backend: Any) -> bool:
    """Whether the modules ``backend`` declares it requires are installed (found without importing
    them); true where it declares none or the declaration cannot be read."""
    import importlib.util

    try:
        modules = declared(backend, "requires") or ()
        return all(importlib.util.find_spec(module) is not None for module in modules)
    except Exception:
        return True


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
