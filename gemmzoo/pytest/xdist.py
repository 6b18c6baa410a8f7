"""gemmzoo's GEMM benchmarks under pytest-xdist: one GPU per worker, one report.

Each worker gets its own GPU through ``CUDA_VISIBLE_DEVICES`` before CUDA starts; pytest-benchmark
(which turns itself off under xdist) is turned back on in the workers with its outputs off, and
each worker sends its finished benchmarks to the controller, which hands them to pytest-benchmark
there, so ``--benchmark-json``, ``--benchmark-save``, ``--benchmark-compare`` and
``--benchmark-histogram`` see every result. The session accesses this needs are in
:mod:`gemmzoo.adapters.pytest_benchmark`; only runs of gemmzoo's own benchmarks use them.
"""

from __future__ import annotations

import glob
import warnings
from collections.abc import MutableMapping, Sequence
from typing import Any

import pytest

from gemmzoo.adapters import pytest_benchmark as session
from gemmzoo.config import environment_value, process_environment

WORKEROUTPUT_KEY = "gemmzoo_benchmarks"


def worker_index(environ: MutableMapping[str, str] | None = None) -> int | None:
    """This process's pytest-xdist worker number (``gw3`` → 3), or ``None`` outside a worker."""
    name = "PYTEST_XDIST_WORKER"
    worker = (environ.get(name) if environ is not None else environment_value(name)) or ""
    return int(worker[2:]) if worker.startswith("gw") and worker[2:].isdigit() else None


def assign_worker_gpu(environ: MutableMapping[str, str] | None = None,
                      device_files: Sequence[str] | None = None) -> str | None:
    """Give this xdist worker its own GPU through ``CUDA_VISIBLE_DEVICES`` (before CUDA starts).

    Worker ``gwI`` gets the I-th visible GPU (of ``CUDA_VISIBLE_DEVICES`` if set, else of the
    driver's device files); with more workers than GPUs they wrap around and share, with a
    warning. Returns the value set, or ``None`` outside a worker or without a GPU.
    """
    environ = process_environment() if environ is None else environ
    index = worker_index(environ)
    if index is None:
        return None
    visible = environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        devices = [d.strip() for d in visible.split(",") if d.strip() and d.strip() != "-1"]
    else:
        files = glob.glob("/dev/nvidia[0-9]*") if device_files is None else device_files
        devices = [str(i) for i in range(len(files))]
    if not devices:
        return None
    if index >= len(devices):
        warnings.warn(f"xdist worker gw{index}: only {len(devices)} GPU(s); sharing GPU "
                      f"{devices[index % len(devices)]}, so timings of the workers that share it disturb "
                      f"each other", stacklevel=2)
    chosen = devices[index % len(devices)]
    environ["CUDA_VISIBLE_DEVICES"] = chosen
    return chosen


def requested(config: pytest.Config) -> bool:
    """Whether this run uses pytest-xdist workers (controller or worker)."""
    if environment_value("PYTEST_XDIST_WORKER"):
        return True
    numprocesses = getattr(config.option, "numprocesses", None)
    return bool(numprocesses) or getattr(config.option, "dist", "no") != "no"


def enable_in_worker(config: pytest.Config) -> None:
    """pytest-benchmark turns itself off under xdist; turn it on again in a worker, with its
    own outputs off (the controller writes them from everything the workers send)."""
    if not environment_value("PYTEST_XDIST_WORKER") or not session.supported(config):
        return
    if config.getoption("benchmark_disable") or config.getoption("benchmark_skip"):
        return
    session.enable_reporting_off(config)


def export_from_worker(config: pytest.Config) -> None:
    """Put this worker's finished benchmarks (with their samples) in its workeroutput."""
    output = getattr(config, "workeroutput", None)
    if output is None or not session.supported(config):
        return
    output[WORKEROUTPUT_KEY] = session.finished_json(config)


def import_from_worker(config: pytest.Config, workeroutput: dict[str, Any]) -> int:
    """Add a finished worker's benchmarks to the controller's pytest-benchmark session, as if they
    had run here. Returns how many were added."""
    text = workeroutput.get(WORKEROUTPUT_KEY)
    if not text or not session.supported(config):
        return 0
    return session.add_finished(config, text)
