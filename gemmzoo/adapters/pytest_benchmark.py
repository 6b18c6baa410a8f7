"""pytest-benchmark's session object, for running gemmzoo's benchmarks under pytest-xdist.

pytest-benchmark turns itself off under xdist and offers no hook to turn it back on, nor one to
hand it benchmarks that ran in another process. gemmzoo does both for its own GEMM benchmarks
(one GPU per worker; the controller reports every result), which needs the plugin's session
object, ``config._benchmarksession``: its ``disabled``/``only`` switches, its output settings and
its ``benchmarks`` list. Everything else gemmzoo uses of pytest-benchmark is public (the
``benchmark`` fixture, its ``pedantic`` mode, ``stats`` and ``extra_info``, the
``benchmark`` mark's ``timer=`` and ``group=``).

:func:`supported` says whether this pytest-benchmark is one these accessors were written for
(:data:`TESTED_MAJORS`) and still has the attributes they touch; when it is not, gemmzoo's
xdist mode is off with a warning and pytest-benchmark behaves as it does on its own.
"""

from __future__ import annotations

import json
from importlib import metadata
from types import SimpleNamespace
from typing import Any

#: Major versions of pytest-benchmark whose session object these accessors were written for.
TESTED_MAJORS = (4, 5)
#: The session attributes read or set here.
SESSION_ATTRIBUTES = ("disabled", "only", "json", "save", "autosave", "histogram", "compare",
                      "compare_fail", "compared_mapping", "benchmarks")


def version() -> str | None:
    """The installed pytest-benchmark's version, or ``None`` when it is not installed."""
    try:
        return metadata.version("pytest-benchmark")
    except metadata.PackageNotFoundError:
        return None


def _session(config: Any) -> Any:
    return getattr(config, "_benchmarksession", None)


def unsupported_reason(config: Any | None = None) -> str | None:
    """Why the accessors cannot be used with this pytest-benchmark (``None``: they can).

    With ``config``, the live session is checked for every attribute in :data:`SESSION_ATTRIBUTES`.
    """
    found = version()
    if found is None:
        return "pytest-benchmark is not installed"
    major = found.split(".", 1)[0]
    if not major.isdigit() or int(major) not in TESTED_MAJORS:
        return f"pytest-benchmark {found} is not a version gemmzoo was tested with {TESTED_MAJORS}"
    if config is not None:
        session = _session(config)
        if session is None:
            return "pytest-benchmark's plugin is not active"
        missing = [name for name in SESSION_ATTRIBUTES if not hasattr(session, name)]
        if missing:
            return f"pytest-benchmark {found}'s session has no {', '.join(missing)}"
    return None


def supported(config: Any | None = None) -> bool:
    """Whether :func:`unsupported_reason` finds nothing."""
    return unsupported_reason(config) is None


def set_only(config: Any) -> None:
    """Skip every test without a benchmark (what ``--benchmark-only`` does), after the option had to
    be cleared for pytest-benchmark to start under xdist."""
    _session(config).only = True


def enable_reporting_off(config: Any) -> None:
    """Turn benchmarking on in this process with every output of pytest-benchmark off (a worker's
    results are written by the controller)."""
    session = _session(config)
    session.disabled = False
    session.json = None
    session.save = session.autosave = None
    session.histogram = None
    session.compare = session.compare_fail = None
    session.compared_mapping = {}


def finished_json(config: Any) -> str:
    """The benchmarks of this process that ran without error, with their samples, as JSON."""
    done = [bench.as_dict(include_data=True) for bench in _session(config).benchmarks
            if bench and not bench.has_error]
    return json.dumps(done, default=str)


def add_finished(config: Any, text: str) -> int:
    """Add benchmarks from :func:`finished_json` of another process to this process's session, as if
    they had run here. Returns how many were added."""
    from pytest_benchmark.stats import Metadata

    session = _session(config)
    added = 0
    for bench in json.loads(text):
        # Metadata reads these fields of the fixture that ran the benchmark; the fixture lived in
        # the worker, so a stand-in carries them.
        fixture = SimpleNamespace(
            name=bench["name"], fullname=bench["fullname"], group=bench["group"], param=bench["param"],
            params=bench["params"], extra_info=bench["extra_info"], cprofile_stats=None, has_error=False,
        )
        record = Metadata(fixture, iterations=bench["stats"]["iterations"], options=bench["options"])
        record.stats.data = [float(x) for x in bench["stats"]["data"]]
        session.benchmarks.append(record)
        added += 1
    return added
