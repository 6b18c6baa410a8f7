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


def points_from_arguments(args: argparse.Namespace) -> list[GridPoint]:
    """The grid points the shared options ask for (raises ``GridError`` on bad input)."""
    return resolve_points(args.grid, args.shape, args.file, args.dtype, args.layout or ("NN",))
