"""Where a sweep's points run: one interface, three executors (``--executor local|slurm|ray``).

An executor takes a *job* (a picklable callable of one grid point: a module-level function or a
``functools.partial`` of one) and the sweep's points, runs the job on every point in workers that
each own one GPU share, and hands back, in the points' order, ``("ok", value)`` or ``("error",
text)`` per point with a :class:`gemmzoo.scale.shards.WorkerReport` per worker
(:meth:`Executor.run`). ``on_done(point, worker, outcome)`` hears each point as it finishes.
``setup(points)`` (optional, picklable) runs once in each worker before its first point, with the
points that worker may be given: what every point would otherwise pay on the first one it meets
(imports, starting CUDA, compiling, the conformance suites) is paid there, once per worker, and
the report says how long (:func:`run_setup`).

- ``local``: one process per GPU of this machine (:class:`gemmzoo.scale.shards.DevicePool`).
- ``slurm``: a Slurm job array through submitit, one array task per GPU share
  (:mod:`gemmzoo.scale.slurm_executor`).
- ``ray``: Ray actors, one per GPU (``num_gpus=1``) (:mod:`gemmzoo.scale.ray_executor`).

The engine executors keep each finished point in a *results folder* (:class:`PointFolder`): one
small JSON file per point, written atomically by whoever measured it. A point whose file is there
is never measured again: a requeued Slurm task, a point handed to another worker after its first
worker died, or the same command run again with the same folder all skip it, and each point is
counted once. Files in the folder are read back through the result-file parser
(:func:`gemmzoo.results.schema.parse_document`): bounded, checked, never trusted as code.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import socket
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gemmzoo.errors import GemmError
from gemmzoo.problems.grids import GridPoint
from gemmzoo.scale.shards import WorkerReport

EXECUTORS = ("local", "slurm", "ray")

#: What each engine executor needs, and how to get it.
INSTALL_HINTS = {
    "slurm": ("submitit", "pip install 'gemmzoo[slurm]' (or submitit>=1.5)"),
    "ray": ("ray", "pip install 'gemmzoo[ray]' (or ray>=2.9)"),
}

Outcome = tuple[str, Any]
OnDone = Callable[[GridPoint, str, Outcome], None]
Setup = Callable[[Sequence[GridPoint]], Any]


class ExecutorError(GemmError):
    """An executor that cannot run here (its engine is not installed, a bad option, no GPU in a
    Ray cluster) or a results folder that belongs to another sweep."""


@dataclass
class ExecutorSettings:
    """How to run a sweep: the executor's name and the options of every executor.

    ``workers``: how many GPU shares (Slurm array tasks, Ray actors); ``devices``: the
    ``CUDA_VISIBLE_DEVICES`` entries of the local machine's GPUs, one per worker (local executor,
    and submitit's local cluster); ``folder``: the results folder; ``options``: engine parameters
    passed through as given (submitit's ``slurm_partition``, ``timeout_min``, ``slurm_account``,
    ...; for Ray, ``num_gpus``/``num_cpus`` per actor); ``cluster``: submitit's cluster (``None``
    picks Slurm where ``sbatch`` is, ``"local"`` runs the array on this machine); ``retries``: how
    many times points whose worker died are handed out again; ``poll_s``: how often the
    submitting process looks for finished points and ended tasks (Slurm)."""

    name: str = "local"
    workers: int | None = None
    devices: list[str] | None = None
    folder: str | None = None
    options: dict[str, Any] = field(default_factory=dict)
    cluster: str | None = None
    ray_address: str | None = None
    retries: int = 2
    poll_s: float = 0.2


def require(module: str) -> Any:
    """Import an engine (``submitit``, ``ray``) or raise :class:`ExecutorError` with the install hint."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as error:
        name = next((n for n, (m, _) in INSTALL_HINTS.items() if m == module), module)
        hint = INSTALL_HINTS.get(name, (module, f"pip install {module}"))[1]
        raise ExecutorError(f"--executor {name} needs {module}, which is not importable here ({error}): "
                            f"{hint}") from None


_OPTION = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)=(.*)", re.S)


def parse_option(text: str) -> tuple[str, Any]:
    """``KEY=VALUE`` → ``(key, value)``; the value as an int, a float, ``true``/``false`` as a
    bool, else the text. Raises :class:`ExecutorError` on anything else."""
    match = _OPTION.fullmatch(text.strip())
    if match is None:
        raise ExecutorError(f"--executor-option {text!r}: expected KEY=VALUE, e.g. slurm_qos=high")
    key, value = match.group(1), match.group(2)
    for kind in (int, float):
        try:
            return key, kind(value)
        except ValueError:
            pass
    if value.lower() in ("true", "false"):
        return key, value.lower() == "true"
    return key, value


class Executor:
    """The interface: :meth:`run` a job over points; see the module docstring."""

    name = "?"

    def __init__(self, settings: ExecutorSettings) -> None:
        self.settings = settings

    def run(self, job: Callable[[GridPoint], Any], points: Sequence[GridPoint],
            on_done: OnDone | None = None, setup: Setup | None = None,
            ) -> tuple[list[Outcome], list[WorkerReport]]:
        """``job(point)`` for every point, after ``setup`` once per worker; outcomes in the points'
        order and the workers' reports."""
        raise NotImplementedError


class LocalExecutor(Executor):
    """One process per GPU of this machine (``settings.devices``; :class:`gemmzoo.scale.shards.DevicePool`).

    ``pool``: a pool started earlier (its workers warming up while the caller got ready), whose
    sweep may already be queued (:meth:`gemmzoo.scale.shards.DevicePool.submit`: then its points are the
    ones run); ``warm``: what a new pool's workers run first. A worker that dies has the point it
    was on run again by another, and a fresh worker takes its GPU, up to ``retries`` times per
    point and per GPU (:class:`gemmzoo.scale.shards.DevicePool`)."""

    name = "local"

    def __init__(self, settings: ExecutorSettings, pool: Any = None, warm: Callable[[], Any] | None = None,
                 ) -> None:
        super().__init__(settings)
        self.pool, self.warm = pool, warm

    def run(self, job: Callable[[GridPoint], Any], points: Sequence[GridPoint],
            on_done: OnDone | None = None, setup: Setup | None = None,
            ) -> tuple[list[Outcome], list[WorkerReport]]:
        import functools

        from gemmzoo.scale.shards import DevicePool

        pool = self.pool
        if pool is None:
            if not self.settings.devices:
                raise ExecutorError("--executor local needs --devices (one worker process per GPU)")
            warm = functools.partial(run_setup, setup, list(points)) if setup is not None else self.warm
            pool = DevicePool(self.settings.devices, warm, retries=self.settings.retries)
        if pool.submitted is not None:
            return pool.run(on_done=on_done)
        return pool.run(job, points, on_done)


# The results folder -------------------------------------------------------------------------

_SAFE = re.compile(r"[^A-Za-z0-9._-]+")


def sweep_key(job: Any, points: Sequence[GridPoint]) -> str:
    """A digest of what a sweep measures: its points in order and the job with its arguments
    (a ``functools.partial``'s function name, arguments and keywords), so a folder of one sweep
    is never read as another's."""
    func = getattr(job, "func", job)
    keywords = sorted(getattr(job, "keywords", {}).items())
    described = {"job": f"{getattr(func, '__module__', '')}.{getattr(func, '__qualname__', repr(func))}",
                 "args": repr(getattr(job, "args", ())), "keywords": repr(keywords),
                 "points": [p.id for p in points]}
    return hashlib.sha256(json.dumps(described, sort_keys=True).encode()).hexdigest()[:20]


def worker_identity(executor: str, **engine: Any) -> dict[str, Any]:
    """Who measured: the executor, host, process, the GPUs it may use (as
    :func:`gemmzoo.scale.shards.visible_gpus` finds them) and what the engine says of the worker
    (``engine``: its job and task ids)."""
    from gemmzoo.scale.shards import visible_gpus

    try:
        gpus: Any = visible_gpus()
    except Exception:  # no driver to ask: the record says so rather than fail the point
        gpus = None
    return {"executor": executor, "host": socket.gethostname(), "pid": os.getpid(), "gpus": gpus,
            **{key: value for key, value in engine.items() if value is not None}}


class PointFolder:
    """The results folder of one sweep: ``sweep.json`` (the sweep's key) and ``points/`` with one
    file per finished point, named by its position and id. A file appears whole (written to a
    temporary name, then renamed) or not at all, so a worker killed while writing leaves nothing."""

    def __init__(self, folder: str | Path, key: str) -> None:
        self.path = Path(folder)
        self.key = key
        self.points_dir = self.path / "points"

    def open(self) -> PointFolder:
        """Make the folder, or check that an existing one holds this sweep; returns self."""
        self.points_dir.mkdir(parents=True, exist_ok=True)
        marker = self.path / "sweep.json"
        if marker.exists():
            try:
                found = json.loads(marker.read_text()[:4096]).get("sweep")
            except (ValueError, AttributeError, OSError):
                found = None
            if found != self.key:
                raise ExecutorError(f"results folder {self.path} holds another sweep (other points or "
                                    "options); give another --results-dir or empty this one")
        else:
            _atomic_write(marker, json.dumps({"sweep": self.key}) + "\n")
        return self

    def file(self, number: int, point: GridPoint) -> Path:
        return self.points_dir / f"{number:06d}-{_SAFE.sub('_', point.id)[:120]}.json"

    def done(self, number: int, point: GridPoint) -> bool:
        return self.file(number, point).exists()

    def names(self) -> set[str]:
        """The names of the finished points' files (one directory listing: cheap to poll)."""
        try:
            return {name for name in os.listdir(self.points_dir) if name.endswith(".json")}
        except FileNotFoundError:
            return set()

    def write(self, number: int, point: GridPoint, outcome: Outcome, worker: dict[str, Any]) -> None:
        """Keep ``outcome`` of point ``number`` (JSON-ready values only), unless a file is there."""
        target = self.file(number, point)
        if target.exists():  # another worker finished it first: the first result stands
            return
        document = {"sweep": self.key, "number": number, "point": point.id, "status": outcome[0],
                    "value": outcome[1], "worker": worker, "finished": time.time()}
        _atomic_write(target, json.dumps(document) + "\n")

    def read(self, number: int, point: GridPoint) -> tuple[Outcome, dict[str, Any]] | None:
        """The kept outcome of point ``number`` and who measured it; ``None`` when it has none.
        A file that is not one this sweep wrote is refused with an :class:`ExecutorError`."""
        from gemmzoo.results.schema import ResultFileError, parse_document

        target = self.file(number, point)
        if not target.exists():
            return None
        try:
            data = parse_document(target)
        except ResultFileError as error:
            raise ExecutorError(str(error)) from None
        if not isinstance(data, dict) or data.get("sweep") != self.key or data.get("point") != point.id \
                or data.get("number") != number or data.get("status") not in ("ok", "error"):
            raise ExecutorError(f"{target}: not a result of this sweep's point {number} ({point.id})")
        worker = data.get("worker") if isinstance(data.get("worker"), dict) else {}
        return (data["status"], data.get("value")), worker

    def write_worker(self, label: str, record: dict[str, Any]) -> None:
        """Keep what worker ``label`` says of itself (JSON-ready: when it began, when its setup
        was done, what the setup did); a requeued task's record replaces its earlier one."""
        workers = self.path / "workers"
        workers.mkdir(exist_ok=True)
        document = {"sweep": self.key, "label": label, **record}
        _atomic_write(workers / f"{_SAFE.sub('_', label)[:120]}.json", json.dumps(document) + "\n")

    def workers(self) -> dict[str, dict[str, Any]]:
        """Every worker's record (:meth:`write_worker`) by label; a file that is not one this
        sweep wrote is left out (a worker's record informs the report, never a result)."""
        from gemmzoo.results.schema import ResultFileError, parse_document

        found: dict[str, dict[str, Any]] = {}
        for path in sorted((self.path / "workers").glob("*.json")):
            try:
                data = parse_document(path)
            except ResultFileError:
                continue
            if isinstance(data, dict) and data.get("sweep") == self.key:
                label = data.get("label")
                if isinstance(label, str):
                    found[label] = data
        return found


def _atomic_write(path: Path, text: str) -> None:
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(handle, "w") as out:
            out.write(text)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def run_setup(setup: Setup | None, points: Sequence[GridPoint]) -> dict[str, Any]:
    """A worker's ``setup(points)``, timed: ``{"seconds": ..., **what it returned}`` when it
    returned a dict, ``{"seconds": ..., "error": text}`` when it raised (the points then meet the
    same trouble and report it each); ``{}`` without a setup."""
    if setup is None:
        return {}
    began = time.perf_counter()
    try:
        found = setup(points)
        details = found if isinstance(found, dict) else {}
    except Exception as error:  # each point reports it as it meets it
        details = {"error": f"{type(error).__name__}: {error}"}
    return {"seconds": round(time.perf_counter() - began, 3), **details}


def run_point(job: Callable[[GridPoint], Any], point: GridPoint) -> Outcome:
    """``("ok", job(point))``, or ``("error", text)`` when the job raised."""
    try:
        return "ok", job(point)
    except Exception as error:  # reported for this point; the worker goes on
        return "error", f"{type(error).__name__}: {error}"


def default_folder(name: str, key: str) -> str:
    """The results folder when none is given: ``gemmzoo-sweeps/<executor>-<sweep key>`` in the
    current directory (on a cluster it must be on a file system the workers share)."""
    return str(Path("gemmzoo-sweeps") / f"{name}-{key}")
