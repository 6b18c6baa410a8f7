"""Whether a CPU timing shared its cores: the CPU time the timed work got, and the others' load.

A busy neighbour can slow a whole run by a factor while each row's own spread stays small, so
the rows' noise never shows it. Two readings around the samples say it instead:

- ``cpu_share``: the CPU time the timing got over the wall time it took (the timed thread's own
  CPU time with one thread, the process's over ``threads`` cores with more); below
  :data:`MIN_SHARE` the timed work waited for a core;
- ``others_load``: the cores other processes kept busy meanwhile (busy time of every CPU in
  ``/proc/stat`` less this process's CPU time, over the wall time); over :data:`MAX_OTHERS_LOAD`
  they shared the caches, memory bandwidth or a core's sibling thread with the timing.

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


def _busy_seconds() -> float | None:
    """Seconds every CPU of the machine spent busy since boot, from ``/proc/stat``."""
    try:
        with open("/proc/stat", encoding="ascii") as handle:
            first = handle.readline().split()
        ticks = os.sysconf("SC_CLK_TCK")
        return sum(int(first[1 + i]) for i in _BUSY_FIELDS if 1 + i < len(first)) / ticks
    except (OSError, ValueError, IndexError):
        return None


class ContentionWatch:
    """Readings taken at :meth:`start` and :meth:`stop` around a timing of ``threads`` threads."""

    def __init__(self, threads: int = 1) -> None:
        self.threads = max(1, threads)
        self._start: tuple[float, float, float, float | None] | None = None

    def start(self) -> None:
        self._start = (time.perf_counter(), time.thread_time(), time.process_time(), _busy_seconds())

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
        busy1 = _busy_seconds()
        load = None if busy0 is None or busy1 is None else max(0.0, (busy1 - busy0 - process) / wall)
        contended = share < MIN_SHARE or (load is not None and load > MAX_OTHERS_LOAD)
        return ContentionReport(share, load, contended)
