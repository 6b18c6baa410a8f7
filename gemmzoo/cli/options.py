"""Command-line options that several commands share: which backends and which grid points."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from typing import Any

from gemmzoo.contract.dtypes import DTYPES
from gemmzoo.problems.grids import LAYOUTS, GridPoint, default_grid_name, resolve_points
from gemmzoo.session import current


def number(kind: type, low: float, inclusive: bool = True, high: float | None = None) -> Callable[[str], Any]:
    """An argparse ``type``: a ``kind`` (int or float) at least ``low`` (above it unless
    ``inclusive``) and at most ``high`` where given, with a one-line error otherwise."""
    words = f"at least {low:g}" if inclusive else f"greater than {low:g}"
    if high is not None:
        words += f" and at most {high:g}"

    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        below = value < low or (value == low and not inclusive)
        if value != value or below or (high is not None and value > high):  # NaN fails too
            raise argparse.ArgumentTypeError(f"{text} is out of range: must be {words}")
        return value

    parse.__name__ = kind.__name__  # argparse names the type in its messages
    return parse


POSITIVE_SECONDS = number(float, 0.0, inclusive=False)
COUNT = number(int, 1)
SIZE = number(int, 0)

#: Options whose value may begin with '-' (a negative number, a shape such as -5x10x10): joined
#: to their option before argparse reads them, so that the value is checked and refused by name
#: instead of argparse reporting a missing argument.
_VALUE_OPTIONS = ("--shape", "--budget", "--rounds", "--timeout", "--threshold", "--random", "--max-work",
                  "--threads", "--seed", "--max-noise")


def join_dashed_values(argv: Sequence[str]) -> list[str]:
    """``["--shape", "-5x10x10"]`` as ``["--shape=-5x10x10"]`` (see :data:`_VALUE_OPTIONS`)."""
    joined: list[str] = []
    items = list(argv)
    index = 0
    while index < len(items):
        item = items[index]
        following = items[index + 1] if index + 1 < len(items) else ""
        if item in _VALUE_OPTIONS and following[:1] == "-" and (following[1:2].isdigit()
                                                                   or following[1:2] == "."):
            joined.append(f"{item}={following}")
            index += 2
            continue
        joined.append(item)
        index += 1
    return joined


def interpreted(backend: Any) -> bool:
    """Whether ``backend`` would run under Triton's CPU interpreter here: ``TRITON_INTERPRET=1``
    is set, torch sees no CUDA device, and the backend is a Triton one (a bundled Triton backend,
    or one whose name says ``triton``) that is available."""
    if not current().config.triton_interpret:
        return False
    module = type(backend).__module__.split(".")[0]
    if module != "gemmzoo_triton" and "triton" not in str(getattr(backend, "name", "")):
        return False
    try:
        import torch

        if torch.cuda.is_available():
            return False
    except ImportError:
        pass
    try:
        return backend.unavailable_reason() is None
    except Exception:  # a broken backend is reported elsewhere, not left out here
        return False


def default_selection(backends: Sequence[Any], named: bool, say: Callable[[str], None]) -> list[Any]:
    """``backends`` without those Triton's interpreter would run, unless they were named: the
    interpreter takes about a second per 512³ call, so a default grid would run for many minutes
    with nothing shown. Backends named in ``GEMMZOO_BACKENDS`` count as named. ``say`` hears one
    line naming those left out."""
    if named or current().config.backends:
        return list(backends)
    slow = [b for b in backends if interpreted(b)]
    if slow:
        say(f"left out under TRITON_INTERPRET=1 (Triton's CPU interpreter: about a second per 512³ call): "
            f"{', '.join(b.name for b in slow)}; name them with --backend to include them")
    return [b for b in backends if b not in slow]


def add_point_arguments(parser: argparse.ArgumentParser, verb: str) -> None:
    """``--backend``, ``--grid``, ``--shape``, ``--file``, ``--dtype``, ``--layout``, ``--budget``."""
    parser.add_argument("--backend", action="append", metavar="NAME",
                        help=f"backend to {verb} (repeatable; default: GEMMZOO_BACKENDS, else all available)")
    parser.add_argument("--grid", metavar="NAME",
                        help=f"named grid (default here: {default_grid_name()}; see bench --list-grids)")
    parser.add_argument("--shape", action="append", default=[], metavar="MxNxK",
                        help="add a shape: MxNxK, or MxNxK-DTYPE-LAYOUT, or a problem of another class: "
                             "bmm:BxMxNxK, scaled:rowwise|blockwise|tensorwise:MxNxK, grouped:gG:NxK:m=M or "
                             "grouped:NxK:m=M1,M2,... (repeatable)")
    parser.add_argument("--file", action="append", default=[], metavar="FILE",
                        help="add the points of a CSV (m,n,k[,dtype][,layout]) or JSON file (repeatable)")
    parser.add_argument("--dtype", action="append", choices=DTYPES,
                        help="dtype (repeatable; default: float16 with a GPU, else float32; float32 when "
                             "every backend runs on the CPU)")
    parser.add_argument("--layout", action="append", choices=LAYOUTS,
                        help="operand layout, BLAS-style N or T for A then B (repeatable; default NN)")
    parser.add_argument("--budget", type=POSITIVE_SECONDS, default=0.2, metavar="SECONDS",
                        help="timing budget per backend and point (default 0.2)")
    parser.add_argument("--devices", metavar="all|0,1,...",
                        help="one worker process per GPU (all visible ones, or these positions in "
                             "CUDA_VISIBLE_DEVICES' order); points go to whichever is free; one result")
    parser.add_argument("--shard", metavar="I/N",
                        help=f"{verb} only the I-th of N disjoint, balanced parts of the grid (a cluster's "
                             "job array: 1/N .. N/N cover it once; same grid arguments on every machine)")
    add_executor_arguments(parser)
    add_timeout_argument(parser)


def add_executor_arguments(parser: argparse.ArgumentParser) -> None:
    """``--executor local|slurm|ray`` and its options (see :mod:`gemmzoo.scale.executors`)."""
    from gemmzoo.scale.executors import EXECUTORS

    group = parser.add_argument_group("executors (see README: Sweeps on Slurm and Ray)")
    group.add_argument("--executor", choices=EXECUTORS, default="local",
                       help="where the points run: local (this process, or one process per GPU with "
                            "--devices), slurm (a Slurm job array through submitit, one task per GPU: "
                            "pip install 'gemmzoo[slurm]'), ray (Ray actors, one GPU each: "
                            "pip install 'gemmzoo[ray]')")
    group.add_argument("--workers", type=COUNT, metavar="N",
                       help="slurm: array tasks (default: one per --devices entry, else 1); ray: actors "
                            "(default: the cluster's GPUs)")
    group.add_argument("--results-dir", metavar="DIR",
                       help="slurm, ray: keep each finished point here; a point found here is not measured "
                            "again (a requeued task, a rerun). Slurm default: gemmzoo-sweeps/ in the current "
                            "directory, which the nodes must share")
    group.add_argument("--slurm-partition", metavar="NAME", help="slurm: the partition (sbatch --partition)")
    group.add_argument("--slurm-time", type=COUNT, metavar="MINUTES",
                       help="slurm: each task's time limit in minutes (default 60); a task that reaches it "
                            "is requeued and resumes")
    group.add_argument("--slurm-account", metavar="NAME", help="slurm: the account (sbatch --account)")
    group.add_argument("--slurm-cluster", choices=("slurm", "local"), default="slurm",
                       help="slurm: submit to Slurm (default), or run the array here through submitit's "
                            "local executor, one task per --devices GPU")
    group.add_argument("--ray-address", metavar="ADDRESS",
                       help="ray: the cluster to join (auto: the one this node belongs to; default: start a "
                            "Ray on this machine)")
    group.add_argument("--executor-option", action="append", default=[], metavar="KEY=VALUE",
                       help="an engine parameter passed through as given (repeatable): submitit's "
                            "(slurm_qos, slurm_constraint, mem_gb, ...) or Ray's per actor (num_gpus, "
                            "num_cpus, ...)")


def executor_settings(args: argparse.Namespace) -> Any:
    """The :class:`gemmzoo.scale.executors.ExecutorSettings` of ``args`` for an engine executor
    (slurm, ray); ``None`` for ``local``, which runs as before (this process, or ``--devices``).
    Raises :class:`gemmzoo.scale.executors.ExecutorError` for a bad option or a missing engine."""
    from gemmzoo.scale.executors import ExecutorError, ExecutorSettings, parse_option, require
    from gemmzoo.scale.shards import parse_devices, visible_gpus

    name = getattr(args, "executor", "local")
    if name == "local":
        return None
    if getattr(args, "shard", None):
        raise ExecutorError(f"--executor {name} splits the grid itself: leave out --shard")
    require({"slurm": "submitit", "ray": "ray"}[name])
    options = dict(parse_option(text) for text in args.executor_option)
    if name == "slurm":
        for key, value in (("slurm_partition", args.slurm_partition), ("timeout_min", args.slurm_time),
                           ("slurm_account", args.slurm_account)):
            if value is not None:
                options[key] = value
    devices = parse_devices(args.devices, visible_gpus()) if args.devices else None
    cluster = args.slurm_cluster if name == "slurm" else None
    return ExecutorSettings(name, workers=args.workers, devices=devices, folder=args.results_dir,
                            options=options, cluster=cluster, ray_address=args.ray_address)


def grid_from_arguments(args: argparse.Namespace, device: str | None = None) -> list[GridPoint]:
    """The whole grid the shared options ask for, before ``--shard`` (raises ``GridError``);
    ``device`` as in :func:`gemmzoo.problems.grids.resolve_points`."""
    return resolve_points(args.grid, args.shape, args.file, args.dtype, args.layout or ("NN",), device)


def points_from_arguments(args: argparse.Namespace, device: str | None = None) -> list[GridPoint]:
    """The grid points the shared options ask for, this ``--shard``'s part of them when given
    (raises ``GridError`` or ``ShardError`` on bad input)."""
    from gemmzoo.scale.shards import parse_shard, shard_points

    points = grid_from_arguments(args, device)
    shard = getattr(args, "shard", None)
    return shard_points(points, parse_shard(shard)) if shard else points


def shard_meta(args: argparse.Namespace, device: str | None = None) -> dict[str, object] | None:
    """``{"index", "count", "grid", "points"}`` for a ``--shard`` run (see :mod:`gemmzoo.results.runs`);
    ``device`` as given to :func:`points_from_arguments`."""
    from gemmzoo.scale.shards import grid_digest, parse_shard

    if not getattr(args, "shard", None):
        return None
    shard, grid = parse_shard(args.shard), grid_from_arguments(args, device)
    return {"index": shard.index, "count": shard.count, "grid": grid_digest(grid), "points": len(grid)}


def add_timeout_argument(parser: argparse.ArgumentParser) -> None:
    """``--timeout SECONDS``: the time limit of each backend task (see :mod:`gemmzoo.plugins.watchdog`); the
    command runs in a session whose ``timeout`` it is (:func:`gemmzoo.cli.main`), and worker
    processes inherit it."""
    from gemmzoo.config import DEFAULT_TIMEOUT_S, parse_timeout

    def seconds(text: str) -> float | None:
        try:
            return parse_timeout(text)
        except ValueError as error:
            raise argparse.ArgumentTypeError(str(error)) from None

    parser.add_argument("--timeout", type=seconds, default=argparse.SUPPRESS, metavar="SECONDS",
                        help="time limit of each backend call (one backend's check and timing at one point, "
                             "one conformance check); one that overruns is TIMEOUT, its backend is set aside "
                             "and the run goes on (exit 1). Default: GEMMZOO_TIMEOUT, else "
                             f"{DEFAULT_TIMEOUT_S:g}; 0 for none")


def timeout_lines() -> list[str]:
    """One ``TIMEOUT backend: what took longer than N s`` line per call that overran in this
    process (empty when none did)."""
    from gemmzoo.plugins.watchdog import timeouts

    return [f"TIMEOUT {event.describe()}" for event in timeouts()]
