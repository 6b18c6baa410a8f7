"""Lengths rounded up to whole units of bytes: rows that start 16-byte aligned for TMA, or on
the wider boundaries torch-padded rounds to."""

from __future__ import annotations

from typing import Any


def units(element_size: int, unit_bytes: int = 16) -> int:
    """Elements in ``unit_bytes`` bytes (at least 1)."""
    return max(1, unit_bytes // element_size)


def round_up(length: int, unit: int) -> int:
    """``length`` rounded up to a multiple of ``unit``."""
    return -(-length // unit) * unit


def padded(length: int, element_size: int, unit_bytes: int = 16) -> int:
    """``length`` elements rounded up to a whole number of ``unit_bytes``-byte units."""
    return round_up(length, units(element_size, unit_bytes))


def zero(tensor: Any) -> None:
    """Fill a torch tensor with zeros in place; one of one-byte elements (fp8) as bytes, as fills
    of fp8 are not in every torch."""
    import torch

    (tensor.view(torch.uint8) if tensor.element_size() == 1 else tensor).zero_()
