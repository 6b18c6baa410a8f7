"""Conformance verdicts from ``gemmzoo check``: stored for this machine, replacing older ones.

A verdict is earned here: :func:`gemmzoo.tuning.tune.conformance_verdict` runs the suite when
none is stored, and ``gemmzoo check NAME`` runs it again and stores what it found, per dtype, so
that a backend refused after a failure (or a verdict from a fixed bug) is judged afresh.
"""

from __future__ import annotations

import time
from typing import Any

from gemmzoo.contract.dtypes import DTYPES
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


def describe_key(device: str, versions: str) -> str:
    """What a verdict was earned against, in one line: the code digest, the suite revision, the
    plugin and framework versions, and the device."""
    import json

    try:
        v = json.loads(versions)
        d = json.loads(device)
    except (TypeError, ValueError):
        return "an unreadable key"
    if not isinstance(v, dict) or not isinstance(d, dict):
        return "an unreadable key"
    libraries = ", ".join(f"{name} {v[name]}" for name in ("numpy", "torch", "triton", "jax", "cupy")
                          if isinstance(v.get(name), str))
    where = d.get("name") or d.get("model") or d.get("kind") or "?"
    parts = [f"code {v.get('code', '?')}", f"suite {v.get('suite', '?')}", f"plugin {v.get('plugin', '?')}"]
    if libraries:
        parts.append(libraries)
    parts.append(f"device {d.get('kind', '?')} {where}")
    return ", ".join(str(part) for part in parts)


def when(created: float) -> str:
    """A stored time as UTC, to the minute."""
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(created))


def verdict_lines(backend: Any, store: Any) -> list[str]:
    """One line per dtype of ``backend``: the verdict that counts here now (passed or failed,
    when, against what), else whether only verdicts of other code or versions exist (the backend
    is then checked again before it is timed or picked)."""
    from gemmzoo.tuning.tune import verdict_versions

    device = device_fingerprint(backend.device)
    versions = verdict_versions(backend)
    older = [r for r in store.all_conformance() if r.backend == backend.name]
    lines = []
    for dtype in DTYPES:
        if dtype not in backend.dtypes:
            continue
        found = store.conformance(device, versions, backend.name, dtype)
        if found is not None:
            outcome = "passed" if found.passed else f"FAILED ({found.failures} of {found.checks} checks)"
            lines.append(f"{dtype}: {outcome} {when(found.created)} against {describe_key(device, versions)}")
            continue
        stale = [r for r in older if r.dtype == dtype]
        if stale:
            last = stale[-1]
            earned = describe_key(last.device, last.versions)
            lines.append(f"{dtype}: no verdict for this code and these versions "
                         f"(last one {when(last.created)} against {earned}); "
                         "checked again before it is timed or picked")
        else:
            lines.append(f"{dtype}: not checked here yet")
    return lines


#: What :func:`passing` answers: a pass, a failed or missing verdict, or a suite that overran.
PASSED, NOT_PASSED, TIMED_OUT = "passed", "not passed", "timed out"


def passing(backend: Any, dtype: str) -> tuple[str, str]:
    """``(answer, why_not)``: :data:`PASSED` when ``backend`` holds a passing verdict for ``dtype``
    on this machine for its current code and versions, running the suite first when it has none
    (what ``bench`` and pytest-benchmark ask before they time a backend); :data:`TIMED_OUT` when
    the suite overran the time limit (the backend is quarantined); else :data:`NOT_PASSED`.
    ``why_not`` names the failed checks, or the trouble that kept the suite from a verdict."""
    from gemmzoo.plugins.watchdog import quarantined
    from gemmzoo.tuning.tune import conformance_verdict, verdict_versions

    try:
        store = state.store()
        passed = conformance_verdict(store, backend, dtype, run=True)
    except Exception as error:  # no verdict can be had: nothing is timed on trust
        return NOT_PASSED, f"no conformance verdict could be had ({type(error).__name__}: {error})"
    if passed:
        return PASSED, ""
    held = quarantined(backend)
    if held is not None:
        return TIMED_OUT, f"{backend.name}: its conformance suite for {dtype} did not finish: {held}"
    device = device_fingerprint(backend.device)
    found = store.conformance(device, verdict_versions(backend), backend.name, dtype)
    detail = found.detail if found is not None and found.detail else "the suite did not finish"
    return NOT_PASSED, (f"{backend.name} failed the conformance suite for {dtype} on this machine "
                   f"(gemmzoo check {backend.name} --dtype {dtype}): {detail}")
