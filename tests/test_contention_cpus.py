"""The others' load counts the CPUs the timing may run on, not the whole machine's."""

from __future__ import annotations

import os
import random

import pytest

from gemmzoo.measure.contention import _busy_seconds, _own_cpus


def _stat(tmp_path, rows):
    lines = []
    for name, fields in rows:
        lines.append(" ".join([name, *map(str, fields)]))
    path = tmp_path / "stat"
    path.write_text("\n".join([*lines, "intr 1 2 3", "ctxt 99"]) + "\n")
    return str(path)


def test_busy_time_of_the_named_cpus_only(tmp_path):
    rng = random.Random(5)
    per_cpu = {f"cpu{i}": [rng.randrange(1, 10_000) for _ in range(10)] for i in range(4)}
    total = [sum(column) for column in zip(*per_cpu.values(), strict=True)]
    path = _stat(tmp_path, [("cpu", total), *per_cpu.items()])
    ticks = os.sysconf("SC_CLK_TCK")
    busy = (0, 1, 2, 5, 6, 7)  # user, nice, system, irq, softirq, steal: not idle (3), iowait (4)

    def expected(fields):
        return sum(fields[i] for i in busy) / ticks

    assert _busy_seconds(None, path) == pytest.approx(expected(total))
    assert _busy_seconds(frozenset({"cpu2"}), path) == pytest.approx(expected(per_cpu["cpu2"]))
    both = frozenset({"cpu1", "cpu3"})
    assert _busy_seconds(both, path) == pytest.approx(expected(per_cpu["cpu1"]) + expected(per_cpu["cpu3"]))
    # CPUs the file does not list (another namespace's numbering): the machine-wide line stands in
    assert _busy_seconds(frozenset({"cpu64"}), path) == pytest.approx(expected(total))
    assert _busy_seconds(None, str(tmp_path / "missing")) is None


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="no CPU affinity on this platform")
def test_the_process_affinity_names_the_cpus():
    allowed = os.sched_getaffinity(0)
    assert _own_cpus() == frozenset(f"cpu{i}" for i in allowed)
    one = min(allowed)
    os.sched_setaffinity(0, {one})
    try:
        assert _own_cpus() == frozenset({f"cpu{one}"})
    finally:
        os.sched_setaffinity(0, allowed)
