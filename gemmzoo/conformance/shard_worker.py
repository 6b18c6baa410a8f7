"""One worker of a shared conformance suite (:mod:`gemmzoo.conformance.shards`):
``python -m gemmzoo.conformance.shard_worker SPEC`` runs the checks a spec file names and writes
their results where it says."""

from __future__ import annotations

import json
import math
import os
import sys
import threading
import time
from typing import Any

from gemmzoo.conformance.runner import SuiteSettings, run_check, suite_checks
from gemmzoo.measure.threads import ThreadLimit


def run_spec(spec: dict[str, Any]) -> int:
    """A worker: the checks ``spec`` names by label, of the backend it names, their results
    written in that order to ``spec["out"]`` (up to one that overran its time limit, the last);
    exit status 3 when the backend here is not the code
    the suite checks, or its suite has no check of one of those labels."""
    from gemmzoo.plugins.registry import get_registry, probe_availability

    registry = get_registry()
    try:
        backend = registry.get(spec["backend"])
        same = registry.code_digest(spec["backend"]) == spec["digest"]
    except Exception:
        return 3
    if backend is None or not same:
        return 3
    reason, fault = probe_availability(backend)
    if reason is not None or fault is not None:
        return 3
    settings = SuiteSettings(**{key: tuple(value) if isinstance(value, list) else value
                                for key, value in spec["settings"].items()})
    checks = dict(suite_checks(backend, settings))
    labels = spec["labels"]
    if not (isinstance(labels, list) and all(label in checks for label in labels)):
        return 3  # not the suite the spec was dealt from
    timeout = spec["timeout"]
    if timeout is not None and not (isinstance(timeout, (int, float)) and math.isfinite(timeout)):
        return 3
    rows = []
    for label in labels:
        result, overran = run_check(backend, label, checks[label], timeout)
        rows.append([label, result.backend, result.check, result.passed, result.detail, overran])
        if overran is not None:  # quarantined here: the rest would not run, nor in the suite's process
            break
    partial = spec["out"] + ".partial"
    with open(partial, "w", encoding="utf-8") as out:
        json.dump(rows, out)
    os.replace(partial, spec["out"])
    return 0


#: Seconds between a worker's looks at whether the process that started it is still there.
PARENT_CHECK_S = 0.5


def _end_with_parent(parent: int, period: float = PARENT_CHECK_S) -> None:
    """End this process as soon as ``parent`` is no longer its parent (it ended, however: a
    signal that gave it no time to end its workers included), so no worker outlives its suite."""
    while os.getppid() == parent:
        time.sleep(period)
    os._exit(5)


def _confine(cores: Any) -> int | None:
    """Run this process on ``cores`` (a list of core numbers) only, and say on how many; nothing
    (``None``) where the list is empty or not one, or the OS refuses (the worker then runs on
    every core it had)."""
    if not (isinstance(cores, list) and cores and all(type(core) is int and core >= 0 for core in cores)):
        return None
    try:
        os.sched_setaffinity(0, cores)
    except (AttributeError, OSError, ValueError):
        return None
    return len(set(cores))


def main(argv: list[str] | None = None, parent: int | None = None) -> int:
    """``python -m gemmzoo.conformance.shard_worker SPEC``: run one worker's checks, ending with
    the process that started it: ``parent``, where given (a worker forked by
    :mod:`gemmzoo.conformance.zygote` watches the zygote), else the spec's ``parent``."""
    args = sys.argv[1:] if argv is None else argv
    with open(args[0], encoding="utf-8") as source:
        spec = json.load(source)
    if parent is None:
        parent = spec.get("parent")
    if isinstance(parent, int):
        _watch(parent)
    return _run_confined(spec)


def _watch(parent: int) -> None:
    """End this process with ``parent`` (:func:`_end_with_parent`, in a thread)."""
    threading.Thread(target=_end_with_parent, args=(parent,), daemon=True,
                     name="gemmzoo-suite-parent").start()


def _run_confined(spec: dict[str, Any]) -> int:
    confined = _confine(spec.get("cores"))  # before any library sizes a pool by the cores it sees
    if confined is None:
        return run_spec(spec)
    # a worker forked from the zygote has the pools its imports sized there, by every core
    with ThreadLimit(confined):
        return run_spec(spec)


#: Seconds a standby worker waits for its spec before it ends unused.
STANDBY_S = 120.0
#: Seconds between a standby worker's looks for its spec.
STANDBY_POLL_S = 0.005


def standby(spec_path: str, backends: list[str], parent: int) -> int:
    """A worker started before its suite is known (:meth:`gemmzoo.conformance.shards.Zygote.stand_by`).

    It readies ``backends`` as a check would: the registry, each one's code digest and
    availability, a first :meth:`~gemmzoo.Backend.synchronize` (which starts its device) and
    :meth:`~gemmzoo.Backend.warm_up`. Then it waits for a spec to appear at ``spec_path``
    (written whole, by a rename), takes the surroundings the spec carries
    (:func:`take_surroundings`) and runs it as :func:`main` would. It ends with ``parent`` (the
    zygote); unused, when what appears says ``release``, or after :data:`STANDBY_S`."""
    _watch(parent)
    from gemmzoo.contract.backend import declared
    from gemmzoo.plugins.registry import get_registry, probe_availability

    for name in backends:
        if os.path.exists(spec_path):  # handed its spec, or released, already
            break
        try:
            registry = get_registry()  # the process's own, built on first use
            backend = registry.get(name)
            if backend is None:
                continue
            registry.code_digest(name)
            reason, fault = probe_availability(backend)
            if reason is None and fault is None:
                backend.synchronize()
                warm_up = declared(backend, "warm_up")
                if warm_up is not None:
                    warm_up()
        except Exception:  # readying is a head start only: the checks meet whatever failed here
            pass
    end = time.monotonic() + STANDBY_S
    while not os.path.exists(spec_path):
        if time.monotonic() > end:
            return 4
        time.sleep(STANDBY_POLL_S)
    with open(spec_path, encoding="utf-8") as source:
        spec = json.load(source)
    if spec.get("release"):
        return 0
    take_surroundings(spec.pop("surroundings"))
    return _run_confined(spec)


def take_surroundings(surroundings: dict[str, Any]) -> None:
    """Make ``surroundings`` (``env``, ``path`` and ``cwd``: the suite process's environment,
    module path and working directory) this process's own."""
    from gemmzoo.config import process_environment

    environ = process_environment()
    environ.clear()
    environ.update({str(key): str(value) for key, value in dict(surroundings["env"]).items()})
    sys.path[:] = [str(entry) for entry in surroundings["path"]]
    os.chdir(str(surroundings["cwd"]))


if __name__ == "__main__":
    raise SystemExit(main())
