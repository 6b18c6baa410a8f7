"""Conformance verdicts from ``gemmzoo check``: stored for this machine, replacing older ones.

A verdict is earned here: :func:`gemmzoo.tuning.tune.conformance_verdict` runs the suite when
none is stored, and ``gemmzoo check NAME`` runs it again and stores what it found, per dtype, so
that a backend refused after a failure (or a verdict from a fixed bug) is judged afresh.
"""

from __future__ import annotations

import time
from typing import Any

from gemmzoo.dtypes import DTYPES
from gemmzoo.tuning import state
from gemmzoo.tuning.db import ConformanceRecord
from gemmzoo.tuning.fingerprint import device_fingerprint


def _of_dtype(check: str, dtype: str) -> bool:
    """Whether a check counts for ``dtype``: its own cases, and every check of no dtype (the
    bad-input checks)."""
    return check.startswith(f"{dtype}-") or not any(check.startswith(f"{d}-") for d in DTYPES)


def store_report(backend: Any, report: Any, dtypes: list[str]) -> list[ConformanceRecord]:
    """Store the verdict of ``report`` (a :class:`gemmzoo.conformance.runner.ConformanceReport` of
    ``backend`` over ``dtypes``) for each dtype on this machine, replacing the stored ones; an
    unavailable backend gets none. Returns the verdicts stored."""
    from gemmzoo.tuning.tune import verdict_versions

    if report.unavailable is not None or not report.results:
        return []
    device = device_fingerprint(backend.device)
    versions = verdict_versions(backend)
    store = state.store()
    stored = []
    with state.lock:
        for dtype in dtypes:
            results = [r for r in report.results if _of_dtype(r.check, dtype)]
            failures = [r for r in results if not r.passed]
            detail = "; ".join(f"{f.check}: {f.detail}" for f in failures[:3])
            verdict = ConformanceRecord(device, versions, backend.name, dtype, bool(results) and not failures,
                                        len(results), len(failures), detail, time.time())
            store.add_conformance(verdict)
            state.verdicts.pop((device, versions, backend.name, dtype), None)
            stored.append(verdict)
        state.forget_answers()
    return stored
