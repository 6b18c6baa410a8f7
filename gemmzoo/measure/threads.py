"""The thread policy: how many threads the BLAS and OpenMP pools of this process may use while a
backend is timed.

NumPy's BLAS (OpenBLAS or MKL) and torch's intra-op pool (OpenMP) each start one thread per core.
Measured one after another in one process, on a machine with few cores or one shared with other
work, their threads contend: a pool whose threads wait for each other loses a whole scheduler
time slice whenever one of them is preempted, so samples jump by multiples of it and two runs
disagree. The policy:

- every pool that threadpoolctl can see (BLAS and OpenMP libraries loaded in the process) and
  torch's intra-op pool (``torch.set_num_threads``, when torch is imported) is limited to the same
  number of threads while a backend is timed, and restored afterwards;
- that number is ``--threads N`` when given, else :func:`default_threads`: all usable cores on a
  machine with at least :data:`MANY_CORES` of them, else one (where a multi-threaded pool is the
  first thing to lose its threads to the rest of the machine);
- the limit and the pools as they were *inside* the timed region (:class:`ThreadReport`) are
  recorded with every measurement;
- XLA's CPU pool (JAX) is out of threadpoolctl's reach: it takes one thread per core the process
  may run on, counted once when JAX starts. A benchmarking process whose policy allows fewer
  threads than it has cores therefore confines itself to that many cores before JAX is imported
  (:func:`confine_to_policy`), so that every pool, XLA's too, runs on that many.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

MANY_CORES = 4
"""Machines with fewer usable cores than this time with one thread by default."""


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity where the OS tells, else all), as they
    were before :func:`confine_to_policy` narrowed them."""
    if _confined:
        return _confined[0][1]
    return max(1, len(own_cores()) or os.cpu_count() or 1)


def own_cores() -> list[int]:
    """The cores this process may run on now (its CPU affinity), in order; an empty list where
    the OS does not tell."""
    try:
        return sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return []


def default_threads(cores: int | None = None) -> int:
    """The thread count of the default policy (see the module docstring)."""
    cores = usable_cores() if cores is None else cores
    return cores if cores >= MANY_CORES else 1


def resolve_threads(threads: int | None) -> tuple[int, str]:
    """``(threads, policy)``: the count to use and how it was chosen, in words."""
    if threads is not None:
        if threads < 1:
            raise ValueError(f"threads must be at least 1; got {threads}")
        cores = usable_cores()
        if threads > cores:  # said in the file: such pools wait for each other's time slices
            plural = "s" if cores != 1 else ""
            return threads, f"--threads {threads}, oversubscribed: more than the {cores} usable core{plural}"
        return threads, f"--threads {threads}"
    cores = usable_cores()
    count = default_threads(cores)
    return count, f"default: {count} of {cores} usable cores (one below {MANY_CORES} cores)"


@dataclass(frozen=True)
class ThreadReport:
    """The limit applied while timing, how it was chosen, and each pool's thread count as read
    inside the timed region (``{"openblas": 1, "openmp": 1, "torch": 1}``: threadpoolctl's
    ``internal_api`` names, and ``torch`` for torch's intra-op pool)."""

    threads: int
    policy: str
    pools: tuple[tuple[str, int], ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {"threads": self.threads, "thread_policy": self.policy, "thread_pools": dict(self.pools)}


def _threadpoolctl() -> Any:
    try:
        import threadpoolctl
    except ImportError:  # a dependency; an environment without it still measures, unlimited
        return None
    return threadpoolctl


_confined: list[tuple[int, int]] = []  # (cores left, cores before) once confine_to_policy narrowed them


def confine_to_policy(threads: int | None = None) -> int | None:
    """Run this process on the policy's number of cores from now on (CPU affinity), so that pools
    threadpoolctl cannot limit (XLA's) start with that many threads; only before JAX is imported
    and where the OS lets a process set its affinity. The core count, else ``None``."""
    count, _ = resolve_threads(threads)
    if _confined:
        return _confined[0][0]
    before = usable_cores()
    if "jax" in sys.modules or not hasattr(os, "sched_setaffinity") or count >= before:
        return None
    try:
        os.sched_setaffinity(0, own_cores()[:count])
    except OSError:
        return None
    _confined.append((count, before))
    return count


@contextlib.contextmanager
def confined_to_policy(threads: int | None = None) -> Iterator[int | None]:
    """:func:`confine_to_policy` for the length of a ``with`` block: the process's cores are given
    back afterwards (XLA's pool, once sized, stays as it is)."""
    try:
        original = os.sched_getaffinity(0)
    except (AttributeError, OSError):
        original = None
    try:
        yield confine_to_policy(threads)
    finally:
        if _confined and original is not None:
            with contextlib.suppress(OSError):
                os.sched_setaffinity(0, original)


def pools_now() -> tuple[tuple[str, int], ...]:
    """Each BLAS/OpenMP pool's thread count now (the largest per kind), torch's, and XLA's where
    JAX is imported (its pool as :func:`confine_to_policy` left it, else one thread per core)."""
    found: dict[str, int] = {}
    if "jax" in sys.modules:
        found["xla"] = _confined[0][0] if _confined else usable_cores()
    library = _threadpoolctl()
    if library is not None:
        for info in library.threadpool_info():
            kind = str(info.get("internal_api") or info.get("user_api"))
            found[kind] = max(found.get(kind, 0), int(info.get("num_threads", 0)))
    torch = sys.modules.get("torch")
    if torch is not None and hasattr(torch, "get_num_threads"):
        found["torch"] = int(torch.get_num_threads())
    return tuple(sorted(found.items()))


class ThreadLimit:
    """The policy applied: ``with limit:`` limits every pool to ``threads``; :meth:`report`
    (called inside) reads the pools as they are."""

    def __init__(self, threads: int | None = None) -> None:
        self.threads, self.policy = resolve_threads(threads)
        self._stack: contextlib.ExitStack | None = None

    def __enter__(self) -> ThreadLimit:
        stack = contextlib.ExitStack()
        library = _threadpoolctl()
        if library is not None:
            stack.enter_context(library.threadpool_limits(limits=self.threads))
        torch = sys.modules.get("torch")
        if torch is not None and hasattr(torch, "set_num_threads"):
            before = int(torch.get_num_threads())
            if before != self.threads:
                torch.set_num_threads(self.threads)
                stack.callback(torch.set_num_threads, before)
        self._stack = stack
        return self

    def __exit__(self, *exc: object) -> None:
        stack, self._stack = self._stack, None
        if stack is not None:
            stack.close()

    def report(self) -> ThreadReport:
        """The limit, the policy and the pools now."""
        return ThreadReport(self.threads, self.policy, pools_now())


@contextlib.contextmanager
def limited(threads: int | None = None) -> Iterator[ThreadLimit]:
    """``with limited(n) as limit:``: :class:`ThreadLimit` as a context manager function."""
    with ThreadLimit(threads) as limit:
        yield limit
