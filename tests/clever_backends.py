"""A corpus of clever backends: each is right where a careless check looks and wrong elsewhere.

Every backend computes on the CPU with NumPy like :class:`misbehaving_plugins.Plain` (float32,
and float64 where a case needs it), and cheats in the one way its case names. Used in process
and, through :func:`install`, as installed plugins (one entry point per case).
"""

from __future__ import annotations

import weakref
from pathlib import Path
from typing import Any

import numpy as np
from fake_distributions import write_distribution
from misbehaving_plugins import Plain

import gemmzoo

DISTRIBUTION = "gemmzoo-clever"


class Wide(Plain):
    """Plain, in float32 and float64."""

    dtypes = frozenset({"float32", "float64"})

    def from_numpy(self, x: np.ndarray, dtype: str) -> Any:
        self.check_dtype(dtype, x.shape)
        return np.array(x, dtype=np.float64 if dtype == "float64" else np.float32, copy=True)


class ZerosStrided(Wide):
    """Zeros whenever A is not a plain C-ordered array (a strided or transposed view)."""

    name = "clever-zeros-strided"

    def matmul(self, a: Any, b: Any) -> Any:
        self.check_operands(a, b)
        if not a.flags.c_contiguous:
            return np.zeros((a.shape[0], b.shape[1]), a.dtype)
        return np.matmul(a, b)


class HoldsFloat32(Wide):
    """Declares float64 but holds the caller's values rounded through float32."""

    name = "clever-holds-float32"

    def from_numpy(self, x: np.ndarray, dtype: str) -> Any:
        self.check_dtype(dtype, x.shape)
        held = np.asarray(x).astype(np.float32)
        return held.astype(np.float64) if dtype == "float64" else held


class SameOutput(Wide):
    """Every call of a shape writes into, and returns, the same preallocated array."""

    name = "clever-same-output"

    def __init__(self) -> None:
        self._out: dict[tuple[Any, ...], np.ndarray] = {}

    def matmul(self, a: Any, b: Any) -> Any:
        self.check_operands(a, b)
        key = (a.shape[0], b.shape[1], a.dtype)
        out = self._out.get(key)
        if out is None:
            out = self._out[key] = np.empty((a.shape[0], b.shape[1]), a.dtype)
        np.matmul(a, b, out=out)
        return out


class ReturnsA(Wide):
    """``matmul`` (not the plan) writes the product over A and returns A, where shapes allow."""

    name = "clever-returns-a"

    def prepare(self, a: Any, b: Any) -> Any:
        self.check_operands(a, b)
        plain = Wide.matmul
        return lambda x, y: plain(self, x, y)

    def matmul(self, a: Any, b: Any) -> Any:
        self.check_operands(a, b)
        c = np.matmul(a, b)
        if c.shape == a.shape and a.flags.writeable:
            a[...] = c
            return a
        return c


class WrongAbove256(Wide):
    """Right up to M = 256; beyond, every element is off by one."""

    name = "clever-wrong-above-256"

    def matmul(self, a: Any, b: Any) -> Any:
        self.check_operands(a, b)
        c = np.matmul(a, b)
        return c + 1 if a.shape[0] > 256 else c


class WrongWhenTimed(Wide):
    """Right for the first three calls on one operand array, then half the product: what a check
    of one call before the timing never sees (the suite calls at most three times on one A)."""

    name = "clever-wrong-when-timed"

    def __init__(self) -> None:
        self._calls: dict[int, tuple[Any, int]] = {}

    def matmul(self, a: Any, b: Any) -> Any:
        self.check_operands(a, b)
        ref, count = self._calls.get(id(a), (None, 0))
        if ref is None or ref() is not a:
            count = 0
        self._calls[id(a)] = (weakref.ref(a), count + 1)
        c = np.matmul(a, b)
        return c * 0.5 if count >= 3 else c


CLASSES = {cls.name: cls for cls in (ZerosStrided, HoldsFloat32, SameOutput, ReturnsA, WrongAbove256,
                                      WrongWhenTimed)}


def register_all(names: list[str] | None = None) -> Any:
    """A ``gemmzoo_register_backends`` hook registering the named clever backends (all by default)."""

    @gemmzoo.hookimpl
    def gemmzoo_register_backends(register: Any) -> None:
        for name in names or list(CLASSES):
            register(CLASSES[name]())

    return gemmzoo_register_backends


def install(site: Path, names: list[str] | None = None) -> Path:
    """Write a distribution registering the named clever backends into ``site``; its module
    imports this file, so this folder must be on the path too."""
    module = ("from clever_backends import register_all\n"
              f"gemmzoo_register_backends = register_all({names!r})\n")
    return write_distribution(site, DISTRIBUTION, "1.0", {"clever": "gemmzoo_clever"},
                              {"gemmzoo_clever": module})
