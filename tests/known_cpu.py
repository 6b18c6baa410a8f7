"""py-cpuinfo asked once per test process for the pytest-benchmark runs that tests start.

pytest-benchmark puts py-cpuinfo's ``get_cpu_info()`` in the machine info of every run that saves,
compares or writes JSON, and py-cpuinfo answers from a process of its own that spins for about a
second of CPU on its CPUID probe. The tests that start such runs check gemmzoo's benchmarks, not
that probe: :func:`run_options` asks py-cpuinfo once in the test process and hands its answer to
the run, where this module, loaded as a pytest plugin, gives pytest-benchmark that answer instead
of probing again. The run's machine info is py-cpuinfo's own, as before; where py-cpuinfo is not
installed nothing is handed over and pytest-benchmark does what it does without it.
"""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path

import pytest

#: The variable that hands py-cpuinfo's answer (JSON) to a run.
VARIABLE = "KNOWN_CPU_INFO"


@functools.cache
def _answer() -> str | None:
    """py-cpuinfo's answer in this process, as JSON (asked once), or ``None`` without py-cpuinfo."""
    try:
        import cpuinfo
    except ImportError:
        return None
    return json.dumps(cpuinfo.get_cpu_info())


def run_options(env: dict[str, str]) -> list[str]:
    """The options that load this plugin in a pytest run started with ``env``, which this sets up:
    py-cpuinfo's answer in :data:`VARIABLE`, this folder on ``PYTHONPATH``."""
    answer = _answer()
    if answer is None:
        return []
    env[VARIABLE] = answer
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(Path(__file__).parent), env.get("PYTHONPATH")) if p)
    return ["-p", Path(__file__).stem]


def pytest_configure(config: pytest.Config) -> None:
    """In the run: py-cpuinfo answers with what the test process found (when it handed one over)."""
    answer = os.environ.get(VARIABLE)
    if answer is None:
        return
    import cpuinfo

    cpuinfo.get_cpu_info = lambda: json.loads(answer)
