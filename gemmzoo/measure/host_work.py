"""Elementwise work on large host arrays, split into blocks across threads.

NumPy lets the GIL go inside its loops (casts, ufuncs, random fills), so the blocks of one large
array run in parallel on a machine's cores: making, rounding and converting the operands of a
large problem is host work that a GPU machine's many cores finish in a fraction of the time one
core takes. Blocks are fixed by the array's size, never by the number of threads, so what a block
computes (a random draw, say) does not depend on the machine.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

#: Elements of one block: large enough that a task's overhead is nothing beside its work.
BLOCK = 1 << 21

#: At most this many threads: beyond it, memory bandwidth, not cores, bounds such work.
MAX_THREADS = 16


def threads() -> int:
    """The threads a block-wise job uses here: the CPUs this process may run on, up to
    :data:`MAX_THREADS`."""
    try:
        available = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        available = os.cpu_count() or 1
    return max(1, min(MAX_THREADS, available))


def blocks(size: int) -> list[slice]:
    """``[0, size)`` in consecutive slices of :data:`BLOCK` elements (the last one shorter)."""
    return [slice(start, min(start + BLOCK, size)) for start in range(0, size, BLOCK)]


def each_block(size: int, work: Callable[[slice], None]) -> None:
    """``work(part)`` for each slice of :func:`blocks` of ``size``, in parallel threads when there
    are several; exceptions propagate."""
    parts = blocks(size)
    workers = min(threads(), len(parts))
    if workers <= 1:
        for part in parts:
            work(part)
        return
    with ThreadPoolExecutor(workers, thread_name_prefix="gemmzoo-host-work") as pool:
        for done in [pool.submit(work, part) for part in parts]:
            done.result()
