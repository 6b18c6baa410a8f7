"""Command-line options that several commands share: which backends and which grid points."""

from __future__ import annotations

import argparse

from gemmzoo.dtypes import DTYPES
from gemmzoo.grids import LAYOUTS, GridPoint, default_grid_name, resolve_points


def add_point_arguments(parser: argparse.ArgumentParser, verb: str) -> None:
    """``--backend``, ``--grid``, ``--shape``, ``--file``, ``--dtype``, ``--layout``, ``--budget``."""
    parser.add_argument("--backend", action="append", metavar="NAME",
                        help=f"backend to {verb} (repeatable; default: GEMMZOO_BACKENDS, else all available)")
    parser.add_argument("--grid", metavar="NAME",
                        help=f"named grid (default here: {default_grid_name()}; see bench --list-grids)")
    parser.add_argument("--shape", action="append", default=[], metavar="MxNxK",
                        help="add a shape: MxNxK, or MxNxK-DTYPE-LAYOUT (repeatable)")
    parser.add_argument("--file", action="append", default=[], metavar="FILE",
                        help="add the points of a CSV (m,n,k[,dtype][,layout]) or JSON file (repeatable)")
    parser.add_argument("--dtype", action="append", choices=DTYPES,
                        help="dtype (repeatable; default: float16 with a GPU, else float32)")
    parser.add_argument("--layout", action="append", choices=LAYOUTS,
                        help="operand layout, BLAS-style N or T for A then B (repeatable; default NN)")
    parser.add_argument("--budget", type=float, default=0.2, metavar="SECONDS",
                        help="timing budget per backend and point (default 0.2)")
    parser.add_argument("--devices", metavar="all|0,1,...",
                        help="one worker process per GPU (all visible ones, or these positions in "
                             "CUDA_VISIBLE_DEVICES' order); points go to whichever is free; one result")
    parser.add_argument("--shard", metavar="I/N",
                        help=f"{verb} only the I-th of N disjoint, balanced parts of the grid (a cluster's "
                             "job array: 1/N .. N/N cover it once; same grid arguments on every machine)")
    add_timeout_argument(parser)


def grid_from_arguments(args: argparse.Namespace) -> list[GridPoint]:
    """The whole grid the shared options ask for, before ``--shard`` (raises ``GridError``)."""
    return resolve_points(args.grid, args.shape, args.file, args.dtype, args.layout or ("NN",))


def points_from_arguments(args: argparse.Namespace) -> list[GridPoint]:
    """The grid points the shared options ask for, this ``--shard``'s part of them when given
    (raises ``GridError`` or ``ShardError`` on bad input)."""
    from gemmzoo.scale import parse_shard, shard_points

    points = grid_from_arguments(args)
    shard = getattr(args, "shard", None)
    return shard_points(points, parse_shard(shard)) if shard else points


def shard_meta(args: argparse.Namespace) -> dict[str, object] | None:
    """``{"index", "count", "grid", "points"}`` for a ``--shard`` run (see :mod:`gemmzoo.runs`)."""
    from gemmzoo.scale import grid_digest, parse_shard

    if not getattr(args, "shard", None):
        return None
    shard, grid = parse_shard(args.shard), grid_from_arguments(args)
    return {"index": shard.index, "count": shard.count, "grid": grid_digest(grid), "points": len(grid)}


def add_timeout_argument(parser: argparse.ArgumentParser) -> None:
    """``--timeout SECONDS``: the time limit of each backend task (see :mod:`gemmzoo.watchdog`)."""
    from gemmzoo.watchdog import DEFAULT_TIMEOUT_S, parse_timeout

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


def apply_timeout(args: argparse.Namespace) -> None:
    """Make ``--timeout`` the limit of this process and of the workers it starts
    (through ``GEMMZOO_TIMEOUT``)."""
    import os

    from gemmzoo.watchdog import ENV

    value = getattr(args, "timeout", "unset")
    if value != "unset":
        os.environ[ENV] = "0" if value is None else repr(value)


def timeout_lines() -> list[str]:
    """One ``TIMEOUT backend: what took longer than N s`` line per call that overran in this
    process (empty when none did)."""
    from gemmzoo.watchdog import timeouts

    return [f"TIMEOUT {event.describe()}" for event in timeouts()]
