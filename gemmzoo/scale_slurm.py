"""``--executor slurm``: a sweep as a Slurm job array through submitit, one array task per GPU share.

The points are split into ``workers`` balanced shares (:func:`gemmzoo.scale.shards.assign`); each array
task (:class:`Share`) asks for one GPU and measures its share, writing each finished point into
the results folder (:class:`gemmzoo.scale.executors.PointFolder`) as it goes. A task preempted or
timed out is checkpointed and requeued by submitit (:meth:`Share.checkpoint`): the requeued task
skips the points whose files are there. The submitting process follows the folder and hears each
point as its file appears; when the array has ended, the points still missing (their task was
killed, or failed outside the job) go out again as a new array, up to ``retries`` times, so
nothing is lost and nothing measured twice.

``cluster="local"`` runs the array as processes of this machine (submitit's local executor), for
tests and for a host with several GPUs: each task then sets ``CUDA_VISIBLE_DEVICES`` to its own
entry of ``devices`` before anything starts CUDA.
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
    default_folder,
    require,
    run_point,
    sweep_key,
    worker_identity,
)
from gemmzoo.scale.shards import WorkerReport, assign, point_cost

#: A task's time limit (minutes) unless ``timeout_min`` is passed through.
DEFAULT_TIMEOUT_MIN = 60


class Share:
    """One array task: ``job`` on ``items`` (``(number, point)`` pairs) not yet in the folder.
    Picklable; submitit calls it in the task, and :meth:`checkpoint` on preemption or timeout."""

    def __init__(self, job: Callable[[GridPoint], Any], items: Sequence[tuple[int, GridPoint]], folder: str,
                 key: str, label: str, device: str | None = None) -> None:
        self.job, self.items, self.folder, self.key = job, list(items), folder, key
        self.label, self.device = label, device

    def __call__(self) -> int:
        from gemmzoo.config import process_environment

        if self.device is not None:  # a local array: this task's GPU alone, before CUDA starts
            process_environment()["CUDA_VISIBLE_DEVICES"] = self.device
        folder = PointFolder(self.folder, self.key)
        worker = {**worker_identity("slurm", **_slurm_ids()), "share": self.label}
        measured = 0
        for number, point in self.items:
            if folder.done(number, point):  # finished before a requeue, or by another task
                continue
            began = time.perf_counter()
            outcome = run_point(self.job, point)
            folder.write(number, point, outcome, {**worker, "seconds": round(time.perf_counter() - began, 3)})
            measured += 1
        return measured

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
            on_done: OnDone | None = None) -> tuple[list[Outcome], list[WorkerReport]]:
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
                seconds = worker.get("seconds")
                report.busy_s += float(seconds) if isinstance(seconds, (int, float)) else 0.0
                report.done_s = time.time() - started
                if on_done is not None:
                    on_done(point, label, outcome)

        collect()  # a resumed sweep: what an earlier run finished is not measured again
        workers = max(1, settings.workers or len(settings.devices or ()) or 1)
        for attempt in range(settings.retries + 1):
            pending = [n for n, outcome in enumerate(outcomes) if outcome is None]
            if not pending:
                break
            jobs, labels = self._submit(job, points, pending, folder, key, workers, attempt, reports)
            try:
                while not all(j.done() for j in jobs):
                    time.sleep(settings.poll_s)
                    collect()
            except KeyboardInterrupt:  # the finished points stay in the folder: a rerun resumes
                for submitted in jobs:
                    submitted.cancel(check=False)
                raise
            collect()
            for submitted, label in zip(jobs, labels, strict=True):
                error = _failure(submitted)
                if error:
                    reports[label].error = error
        missing = "not measured: every worker that took this point ended before finishing it"
        return ([o if o is not None else ("error", missing) for o in outcomes], list(reports.values()))

    def _submit(self, job: Callable[[GridPoint], Any], points: Sequence[GridPoint], pending: list[int],
                folder: PointFolder, key: str, workers: int, attempt: int,
                reports: dict[str, WorkerReport]) -> tuple[list[Any], list[str]]:
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
        tasks = [Share(job, share, str(folder.path), key, label, devices[i] if local and devices else None)
                 for i, (share, label) in enumerate(zip(shares, labels, strict=True))]
        for label in labels:
            reports.setdefault(label, WorkerReport(label))
        return executor.submit_array(tasks), labels


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
    """The first line of why a finished array task failed; empty when it completed."""
    try:
        error = submitted.exception()
    except Exception as problem:  # the engine could not tell: say so rather than guess
        return f"state unknown: {type(problem).__name__}"
    if error is None:
        return ""
    text = str(error).strip().splitlines()
    return f"task {submitted.job_id} ended: {text[0] if text else type(error).__name__}"
