"""The grouped tile order the ``tl`` kernels share (Triton's matmul tutorial's)."""

# ruff: noqa: N803 - an upper-case constexpr, as in the kernels

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def tile_position(tile_id, num_pid_m, num_pid_n, GROUP_SIZE_M: tl.constexpr):
    """The (row, column) of C's tile number ``tile_id`` in grouped order: GROUP_SIZE_M rows of
    tiles at a time, column-major inside a group, so that tiles computed together share rows of
    A and columns of B in L2."""
    tiles_in_group = GROUP_SIZE_M * num_pid_n
    first_pid_m = (tile_id // tiles_in_group) * GROUP_SIZE_M
    group_rows = min(num_pid_m - first_pid_m, GROUP_SIZE_M)
    in_group = tile_id % tiles_in_group
    return first_pid_m + in_group % group_rows, in_group // group_rows
