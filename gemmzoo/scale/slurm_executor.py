"""``--executor slurm``: a sweep as a Slurm job array through submitit, one array task per GPU share.

The points are split into ``workers`` balanced shares (:func:`gemmzoo.scale.shards.assign`); each array
task (:class:`Share`) asks for one GPU and measures its share, writing each finished point into
the results folder (:class:`gemmzoo.scale.executors.PointFolder`) as it goes. A task preempted or
timed out is checkpointed and requeued by submitit (:meth:`Share.checkpoint`): the requeued task
skips the points whose files are there. The submitting process follows the folder and hears each
point as its file appears; when the array has ended, the points still missing (their task was
killed, or failed outside the job) go out again as a new array, up to ``retries`` times, so
nothing is lost and nothing measured twice.

Each task runs the sweep's setup once (:func:`gemmzoo.scale.executors.run_setup`) before its first
point and records when it began and when it was ready in the folder (``workers/``), which the
report per worker carries (``began_s``, ``ready_s``, ``setup``).

``cluster="local"`` runs the array as processes of this machine (submitit's local executor), for
tests and for a host with several GPUs: each task then sets ``CUDA_VISIBLE_DEVICES`` to its own
entry of ``devices`` before anything starts CUDA, and keeps to its own share of the host's cores
(:func:`gemmzoo.scale.shards.core_shares`), as a Slurm task keeps to the cores of its allocation.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from gemmzoo.problems.grids import GridPoint
from gemmzoo.scale.executors import (
    Executor,
    ExecutorError,
    OnDone,
    Outcome,
    PointFolder,
    Setup,
    default_folder,
    require,
    run_point,
    run_setup,
    sweep_key,
    worker_identity,
)
from gemmzoo.scale.shards import WorkerReport, assign, core_shares, host_cores, point_cost

#: The thread pools a local task sizes to its share of the cores, before numpy or torch start them.
_POOL_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")

#: A task's time limit (minutes) unless ``timeout_min`` is passed through.
DEFAULT_TIMEOUT_MIN = 60


class Share:
    """One array task: ``setup`` once, then ``job`` on ``items`` (``(number, point)`` pairs) not
    yet in the folder. Picklable; submitit calls it in the task, and :meth:`checkpoint` on
    preemption or timeout. ``device`` and ``cores``: this task's GPU and host cores in a local
    array (Slurm gives a cluster's tasks theirs)."""

    def __init__(self, job: Callable[[GridPoint], Any], items: Sequence[tuple[int, GridPoint]], folder: str,
                 key: str, label: str, device: str | None = None, setup: Setup | None = None,
                 cores: Sequence[int] | None = None) -> None:
        self.job, self.items, self.folder, self.key = job, list(items), folder, key
        self.label, self.device, self.setup = label, device, setup
        self.cores = list(cores) if cores else None

    def __call__(self) -> int:
        began = time.time()
        self._confine()
        folder = PointFolder(self.folder, self.key)
        worker = {**worker_identity("slurm", **_slurm_ids()), "share": self.label}
        pending = [(number, point) for number, point in self.items if not folder.done(number, point)]
        if not pending:
            return 0
        done_setup = run_setup(self.setup, [point for _number, point in pending])
        folder.write_worker(self.label, {"began": began, "ready": time.time(), "setup": done_setup,
                                         "worker": worker})
        measured = 0
        for number, point in pending:
            if folder.done(number, point):  # finished before a requeue, or by another task
                continue
            began = time.perf_counter()
            outcome = run_point(self.job, point)
            folder.write(number, point, outcome, {**worker, "seconds": round(time.perf_counter() - began, 3),
                                                  "finished": time.time()})
            measured += 1
        return measured

    def _confine(self) -> None:
        """A local array's task: its own GPU and cores, before anything starts CUDA or a pool."""
        import os

        from gemmzoo.config import process_environment

        environ = process_environment()
        if self.device is not None:
            environ["CUDA_VISIBLE_DEVICES"] = self.device
        if self.cores:
            try:
                os.sched_setaffinity(0, self.cores)
            except (AttributeError, OSError):  # not on this OS: the pools are still sized to the share
                pass
            for name in _POOL_VARIABLES:
                environ.setdefault(name, str(len(self.cores)))

    def checkpoint(self, *args: Any, **kwargs: Any) -> Any:
        """Requeue this task as it is: the points already in the folder are skipped when it runs again."""
        import submitit

        return submitit.helpers.DelayedSubmission(self)


class SlurmExecutor(Executor):
    """See the module docstring; settings: ``workers`` (array tasks), ``folder``, ``options``
    (submitit parameters, e.g. ``slurm_partition``, ``timeout_min``, ``slurm_account``,
    ``slurm_qos``), ``cluster``, ``devices`` (local cluster), ``retries``."""

    name = "slurm"

    def __init__(self, settings: Any) -> None:
        super().__init__(settings)
        self.submitit = require("submitit")

    def run(self, job: Callable[[GridPoint], Any], points: Sequence[GridPoint],
            on_done: OnDone | None = None, setup: Setup | None = None,
            ) -> tuple[list[Outcome], list[WorkerReport]]:
        settings = self.settings
        key = sweep_key(job, points)
        folder = PointFolder(settings.folder or default_folder("slurm", key), key).open()
        outcomes: list[Outcome | None] = [None] * len(points)
        reports: dict[str, WorkerReport] = {}
        started = time.time()

        def collect() -> None:
            present = folder.names()
            for number, point in enumerate(points):
                if outcomes[number] is not None or folder.file(number, point).name not in present:
                    continue
                found = folder.read(number, point)
                if found is None:
                    continue
                outcome, worker = found
                outcomes[number] = outcome
                label = str(worker.get("share") or "earlier run")
                report = reports.setdefault(label, WorkerReport(label))
                report.points += 1
                seconds, finished = worker.get("seconds"), worker.get("finished")
                report.busy_s += float(seconds) if isinstance(seconds, (int, float)) else 0.0
                # when the worker finished it, not when this process noticed
                at = (float(finished) if isinstance(finished, (int, float)) else time.time()) - started
                report.done_s = at if report.done_s is None else max(report.done_s, at)
                if on_done is not None:
                    on_done(point, label, outcome)

        def heard_workers() -> None:
            for label, record in folder.workers().items():
                began, ready = record.get("began"), record.get("ready")
                if not all(isinstance(v, (int, float)) for v in (began, ready)) or began < started - 1:
                    continue  # a record of an earlier run of this sweep
                report = reports.setdefault(label, WorkerReport(label))
                report.began_s, report.ready_s = began - started, ready - started
                report.setup = record.get("setup") if isinstance(record.get("setup"), dict) else None

        collect()  # a resumed sweep: what an earlier run finished is not measured again
        workers = max(1, settings.workers or len(settings.devices or ()) or 1)
        for attempt in range(settings.retries + 1):
            pending = [n for n, outcome in enumerate(outcomes) if outcome is None]
            if not pending:
                break
            jobs, labels, tasks = self._submit(job, points, pending, folder, key, workers, attempt, reports,
                                               setup)
            try:
                while not all(j.done() for j in jobs):
                    time.sleep(settings.poll_s)
                    collect()
            except KeyboardInterrupt:  # the finished points stay in the folder: a rerun resumes
                for submitted in jobs:
                    submitted.cancel(check=False)
                raise
            collect()
            heard_workers()
            for submitted, label, task in zip(jobs, labels, tasks, strict=True):
                if all(outcomes[number] is not None for number, _point in task.items):
                    continue  # its points are all in: whatever its result file says, nothing was lost
                error = _failure(submitted)
                if error:
                    reports[label].error = error
        missing = "not measured: every worker that took this point ended before finishing it"
        return ([o if o is not None else ("error", missing) for o in outcomes], list(reports.values()))

    def _submit(self, job: Callable[[GridPoint], Any], points: Sequence[GridPoint], pending: list[int],
                folder: PointFolder, key: str, workers: int, attempt: int,
                reports: dict[str, WorkerReport], setup: Setup | None,
                ) -> tuple[list[Any], list[str], list[Share]]:
        settings = self.settings
        count = min(workers, len(pending))
        parts = assign([points[n] for n in pending], count)
        shares: list[list[tuple[int, GridPoint]]] = [[] for _ in range(count)]
        for number, part in zip(pending, parts, strict=True):
            shares[part].append((number, points[number]))
        for share in shares:  # costliest first, so a share's long points do not come last
            share.sort(key=lambda item: (-point_cost(item[1]), item[0]))
        local = settings.cluster in ("local", "debug")
        devices = list(settings.devices or [])
        if local and not devices:  # this machine's GPUs, one per task (none: CPU backends only)
            from gemmzoo.scale.shards import visible_gpus

            devices = visible_gpus()
        if local and devices and count > len(devices):
            raise ExecutorError(f"--executor slurm on this machine: {count} workers for {len(devices)} GPUs "
                                "(--devices); a GPU is never shared")
        try:
            executor = self.submitit.AutoExecutor(folder=str(Path(folder.path) / "submitit"),
                                                  cluster=settings.cluster)
        except RuntimeError as error:  # no Slurm here
            raise ExecutorError(f"--executor slurm: {error} (--slurm-cluster local runs the array on "
                                "this machine)") from None
        parameters: dict[str, Any] = {"name": "gemmzoo-sweep", "timeout_min": DEFAULT_TIMEOUT_MIN,
                                      "tasks_per_node": 1, "nodes": 1}
        if local:
            parameters["gpus_per_node"] = 0  # each task picks its own GPU (Share.device)
        else:
            parameters.update(gpus_per_node=1, slurm_array_parallelism=count)
        parameters.update(settings.options)
        try:
            executor.update_parameters(**parameters)
        except (ValueError, TypeError, AssertionError) as error:  # submitit checks types by assertion
            raise ExecutorError(f"--executor slurm: submitit refused the options: {error}") from None
        labels = [f"try {attempt + 1} task {i + 1}/{count}" for i in range(count)]
        cores = core_shares(host_cores(), count) if local else [None] * count
        tasks = [Share(job, share, str(folder.path), key, label, devices[i] if local and devices else None,
                       setup, cores[i])
                 for i, (share, label) in enumerate(zip(shares, labels, strict=True))]
        for label in labels:
            reports.setdefault(label, WorkerReport(label))
        return executor.submit_array(tasks), labels, tasks


def _slurm_ids() -> dict[str, Any]:
    """The job, array job and array task ids submitit reports for this task (none outside one)."""
    try:
        import submitit

        environment = submitit.JobEnvironment()
        ids = {"job_id": environment.job_id, "array_job_id": environment.array_job_id,
               "array_task_id": environment.array_task_id}
        return {key: str(value) for key, value in ids.items() if value is not None}
    except Exception:  # not inside a submitit job (a test calling the task directly)
        return {}


def _failure(submitted: Any) -> str:
    """The first line of why a finished array task failed; empty when it completed. A task that
    left no result (killed, its node lost) is said so at once: submitit would wait for its result
    file to appear first, and the points it left go out again meanwhile."""
    paths = getattr(submitted, "paths", None)
    result = getattr(paths, "result_pickle", None)
    if result is not None and not Path(result).exists():
        return f"task {submitted.job_id} ended without a result (killed, or its node lost)"
    try:
        error = submitted.exception()
    except Exception as problem:  # the engine could not tell: say so rather than guess
        return f"state unknown: {type(problem).__name__}"
    if error is None:
        return ""
    text = str(error).strip().splitlines()
    return f"task {submitted.job_id} ended: {text[0] if text else type(error).__name__}"
