"""``--executor ray``: a sweep on Ray actors, one per GPU (``num_gpus=1``: Ray never gives one GPU
to two of them, and sets each actor's ``CUDA_VISIBLE_DEVICES`` to its own).

The submitting process connects with ``ray.init(address=...)`` (``None`` starts a Ray on this
machine; ``"auto"`` joins the cluster this node belongs to), or uses the connection it already
has. It keeps one point in flight per actor, costliest first, and hears each result as it comes
back. An actor that dies (its node lost, its process killed) loses only the point it was on: that
point goes back to the front of the queue for the other actors, and a replacement actor is
started, up to ``retries`` times. With a results folder each finished point is also kept there
(:class:`gemmzoo.scale.executors.PointFolder`) and skipped when the same sweep runs again.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from typing import Any

from gemmzoo.problems.grids import GridPoint
from gemmzoo.scale.executors import (
    Executor,
    ExecutorError,
    OnDone,
    Outcome,
    PointFolder,
    Setup,
    require,
    run_point,
    run_setup,
    sweep_key,
    worker_identity,
)
from gemmzoo.scale.shards import WorkerReport, point_cost

_ANSI = re.compile(r"\x1b\[[0-9;]*m")


class PointWorker:
    """The body of one Ray actor: runs ``setup(points)`` once, before the first point it is sent
    (``points``: those it may be sent), then ``job`` on each point it is sent."""

    def __init__(self, job: Callable[[GridPoint], Any], label: str, setup: Setup | None = None,
                 points: Sequence[GridPoint] = ()) -> None:
        self.job, self.label, self.setup, self.points = job, label, setup, list(points)
        self.began, self.ready = time.time(), None
        self.setup_done: dict[str, Any] | None = None

    def gpus(self) -> list[str]:
        """The GPU ids Ray gave this actor."""
        import ray

        return [str(g) for g in ray.get_gpu_ids()]

    def run(self, point: GridPoint) -> tuple[Outcome, dict[str, Any]]:
        """The point's outcome, and who measured it (with this actor's GPU ids) and how long it took."""
        if self.ready is None:
            self.setup_done = run_setup(self.setup, self.points)
            self.ready = time.time()
        began = time.perf_counter()
        outcome = run_point(self.job, point)
        worker = {**worker_identity("ray"), "share": self.label, "ray_gpu_ids": self.gpus(),
                  "seconds": round(time.perf_counter() - began, 3), "finished": time.time(),
                  "began": self.began, "ready": self.ready, "setup": self.setup_done}
        return outcome, worker


class RayExecutor(Executor):
    """See the module docstring; settings: ``ray_address``, ``workers`` (default: the cluster's
    GPUs over ``num_gpus`` per actor), ``options`` (``num_gpus``, default 1; ``num_cpus``,
    default 1), ``folder`` (optional), ``retries``."""

    name = "ray"

    def __init__(self, settings: Any) -> None:
        super().__init__(settings)
        self.ray = require("ray")

    def run(self, job: Callable[[GridPoint], Any], points: Sequence[GridPoint],
            on_done: OnDone | None = None, setup: Setup | None = None,
            ) -> tuple[list[Outcome], list[WorkerReport]]:
        ray = self.ray
        started_here = not ray.is_initialized()
        if started_here:
            extra = {} if self.settings.ray_address else {"include_dashboard": False}
            ray.init(address=self.settings.ray_address, **extra)
        try:
            return self._run(job, points, on_done, setup)
        finally:
            if started_here:
                ray.shutdown()

    def _run(self, job: Callable[[GridPoint], Any], points: Sequence[GridPoint],
             on_done: OnDone | None, setup: Setup | None) -> tuple[list[Outcome], list[WorkerReport]]:
        ray, settings = self.ray, self.settings
        options = dict(settings.options)
        gpus_each = float(options.pop("num_gpus", 1))
        cpus_each = float(options.pop("num_cpus", 1))
        cluster_gpus = float(ray.cluster_resources().get("GPU", 0))
        workers = settings.workers or (int(cluster_gpus // gpus_each) if gpus_each > 0 else 1)
        if workers < 1 or (gpus_each > 0 and cluster_gpus < gpus_each):
            raise ExecutorError(f"--executor ray: the Ray cluster has {cluster_gpus:g} GPUs, and each "
                                f"worker needs {gpus_each:g} (--executor-option num_gpus=0 runs workers "
                                "without a GPU)")
        key = sweep_key(job, points)
        folder = PointFolder(settings.folder, key).open() if settings.folder else None
        outcomes: list[Outcome | None] = [None] * len(points)
        reports: dict[str, WorkerReport] = {}
        began = time.time()
        if folder is not None:
            for number, point in enumerate(points):
                found = folder.read(number, point)
                if found is not None:
                    outcomes[number] = found[0]
                    reports.setdefault("earlier run", WorkerReport("earlier run")).points += 1
                    if on_done is not None:
                        on_done(point, "earlier run", found[0])
        queue = sorted((n for n, o in enumerate(outcomes) if o is None),
                       key=lambda n: (-point_cost(points[n]), n))
        actor_class = ray.remote(num_gpus=gpus_each, num_cpus=cpus_each, max_restarts=0,
                                 max_task_retries=0, **options)(PointWorker)
        actors: dict[str, Any] = {}
        in_flight: dict[Any, tuple[int, str]] = {}
        made = 0

        def start_actor() -> str:
            nonlocal made
            made += 1
            label = f"actor {made}"
            actors[label] = actor_class.remote(job, label, setup, [points[n] for n in queue] or points)
            reports[label] = WorkerReport(label)
            return label

        def feed(label: str) -> None:
            if queue and label in actors:
                number = queue.pop(0)
                in_flight[actors[label].run.remote(points[number])] = (number, label)

        for _ in range(min(workers, len(queue))):
            feed(start_actor())
        try:
            while in_flight:
                (ready,), _ = ray.wait(list(in_flight), num_returns=1)
                number, label = in_flight.pop(ready)
                try:
                    outcome, worker = ray.get(ready)
                except (ray.exceptions.RayActorError, ray.exceptions.WorkerCrashedError) as error:
                    queue.insert(0, number)  # not measured: it goes to another actor
                    lines = _ANSI.sub("", str(error)).strip().splitlines()
                    first = lines[0] if lines else type(error).__name__
                    reports[label].error = f"ended on {points[number].id}: {first}"
                    ray.kill(actors.pop(label), no_restart=True)
                    busy = {owner for _number, owner in in_flight.values()}
                    idle = [other for other in actors if other not in busy]
                    if idle:  # a live actor with nothing to do takes the point
                        feed(idle[0])
                    elif made - workers < settings.retries:
                        feed(start_actor())
                    elif not actors:
                        break
                    continue
                outcomes[number] = outcome
                report = reports[label]
                report.device = f"{label} (GPU {','.join(worker.get('ray_gpu_ids') or []) or 'none'})"
                report.points += 1
                report.busy_s += float(worker.get("seconds") or 0.0)
                stamps = {name: worker.get(name) for name in ("began", "ready", "finished")}
                if all(isinstance(value, (int, float)) for value in stamps.values()):
                    report.began_s, report.ready_s = stamps["began"] - began, stamps["ready"] - began
                    report.done_s = stamps["finished"] - began
                    report.setup = worker.get("setup") if isinstance(worker.get("setup"), dict) else None
                else:
                    report.done_s = time.time() - began
                if folder is not None:
                    folder.write(number, points[number], outcome, worker)
                if on_done is not None:
                    on_done(points[number], report.device, outcome)
                feed(label)
        finally:
            for handle in actors.values():
                ray.kill(handle, no_restart=True)
        missing = "not measured: every Ray worker that took this point died before finishing it"
        return [o if o is not None else ("error", missing) for o in outcomes], list(reports.values())
