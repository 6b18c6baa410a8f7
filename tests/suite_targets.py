"""Stand-ins for a conformance suite run in a worker process (:class:`gemmzoo.tuning.suites.SuitePool`
imports them by name in the worker)."""

from __future__ import annotations

import time


def passes_at_once(name: str, dtype: str) -> bool:
    """A suite that passes immediately."""
    return name.startswith("good")


def never_ends(name: str, dtype: str) -> bool:
    """A suite that outlasts any test's limit."""
    time.sleep(600)
    return True
