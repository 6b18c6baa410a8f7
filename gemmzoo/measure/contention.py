"""Whether a CPU timing shared its cores: the CPU time the timed work got, and the others' load.

A busy neighbour can slow a whole run by a factor while each row's own spread stays small, so
the rows' noise never shows it. Two readings around the samples say it instead:

- ``cpu_share``: the CPU time the timing got over the wall time it took (the timed thread's own
  CPU time with one thread, the process's over ``threads`` cores with more); below
  :data:`MIN_SHARE` the timed work waited for a core;
- ``others_load``: the cores other processes kept busy meanwhile (busy time in ``/proc/stat`` of
  the CPUs this process may run on, less this process's CPU time, over the wall time); over
  :data:`MAX_OTHERS_LOAD` they shared the caches, memory bandwidth or a core's sibling thread with
  the timing. Only the CPUs of the process's affinity count: a run pinned to some cores of a large
  machine (``taskset``, a batch scheduler's cgroup with its cpuset) is not made contended by work
  on the other cores, which ``/proc/stat``'s machine-wide line would count.

A timing with either is ``contended``: compare never calls its row faster or slower.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any

#: Below this share of the wall time on a CPU, the timed work waited for one.
MIN_SHARE = 0.9
#: Other processes keeping more than this many cores busy share the machine with the timing.
MAX_OTHERS_LOAD = 0.5
_BUSY_FIELDS = (0, 1, 2, 5, 6, 7)  # user, nice, system, irq, softirq, steal


@dataclass(frozen=True)
class ContentionReport:
    """What :class:`ContentionWatch` saw (see the module docstring); ``others_load`` is ``None``
    where ``/proc/stat`` cannot be read."""

    cpu_share: float
    others_load: float | None
    contended: bool

    def merged(self, other: ContentionReport) -> ContentionReport:
        """The worse of two rounds' readings (one contended round taints the merged samples)."""
        loads = [x for x in (self.others_load, other.others_load) if x is not None]
        return ContentionReport(min(self.cpu_share, other.cpu_share), max(loads) if loads else None,
                                self.contended or other.contended)

    def as_dict(self) -> dict[str, Any]:
        return {"cpu_share": self.cpu_share, "others_load": self.others_load, "contended": self.contended}


def _own_cpus() -> frozenset[str] | None:
    """``/proc/stat``'s names of the CPUs this process may run on (``cpu3``), or ``None`` where the
    affinity cannot be read."""
    try:
        return frozenset(f"cpu{index}" for index in os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return None


def _busy_seconds(cpus: frozenset[str] | None = None, stat: str = "/proc/stat") -> float | None:
    """Seconds the CPUs named in ``cpus`` (every CPU when ``None``) spent busy since boot, from
    ``stat`` (``/proc/stat``)."""
    try:
        with open(stat, encoding="ascii") as handle:
            lines = [line.split() for line in handle if line.startswith("cpu")]
        ticks = os.sysconf("SC_CLK_TCK")
        chosen = [fields for fields in lines[1:] if fields[0] in cpus] if cpus is not None else lines[:1]
        if not chosen:
            chosen = lines[:1]
        busy = sum(int(fields[1 + i]) for fields in chosen for i in _BUSY_FIELDS if 1 + i < len(fields))
        return busy / ticks
    except (OSError, ValueError, IndexError):
        return None


class ContentionWatch:
    """Readings taken at :meth:`start` and :meth:`stop` around a timing of ``threads`` threads."""

    def __init__(self, threads: int = 1) -> None:
        self.threads = max(1, threads)
        self._start: tuple[float, float, float, float | None] | None = None
        self._cpus: frozenset[str] | None = None

    def start(self) -> None:
        self._cpus = _own_cpus()
        self._start = (time.perf_counter(), time.thread_time(), time.process_time(),
                       _busy_seconds(self._cpus))

    def stop(self) -> ContentionReport | None:
        """The report, or ``None`` when nothing was timed long enough to tell."""
        if self._start is None:
            return None
        wall0, thread0, process0, busy0 = self._start
        wall = time.perf_counter() - wall0
        if wall <= 0.005:  # shorter than a few scheduler ticks: the share it reads tells nothing
            return None
        process = time.process_time() - process0
        own = time.thread_time() - thread0 if self.threads == 1 else process / self.threads
        share = min(1.0, own / wall)
        busy1 = _busy_seconds(self._cpus)
        load = None if busy0 is None or busy1 is None else max(0.0, (busy1 - busy0 - process) / wall)
        contended = share < MIN_SHARE or (load is not None and load > MAX_OTHERS_LOAD)
        return ContentionReport(share, load, contended)
