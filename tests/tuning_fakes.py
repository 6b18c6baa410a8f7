"""Backends with known speeds and faults, and a registry holding only them, for the tuning tests."""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from gemmzoo import hookimpl
from gemmzoo.plugins.registry import Registry
from gemmzoo_numpy.backend import NumpyBackend


class DelayedBackend(NumpyBackend):
    """NumPy's matmul plus a fixed sleep: a backend whose speed a test controls."""

    def __init__(self, name: str, delay_s: float = 0.0) -> None:
        self.name = name
        self.delay_s = delay_s

    def matmul(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        result = super().matmul(a, b)
        if self.delay_s:
            time.sleep(self.delay_s)
        return result


class WrongBackend(NumpyBackend):
    """Fast and wrong: adds 1 to every element (fails conformance)."""

    name = "wrong-fake"

    def matmul(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return super().matmul(a, b) + a.dtype.type(1)


class MissingBackend(NumpyBackend):
    """Never available."""

    name = "missing-fake"

    def unavailable_reason(self) -> str | None:
        return "not installed here"


class _Plugin:
    def __init__(self, backends: list[Any]) -> None:
        self.backends = backends

    @hookimpl
    def gemmzoo_register_backends(self, register: Any) -> None:
        for backend in self.backends:
            register(backend)


def registry_with(*backends: Any) -> Registry:
    """A registry holding exactly ``backends`` (no entry points loaded)."""
    registry = Registry(strict=True)
    registry.register_plugin(_Plugin(list(backends)))
    return registry



class Boxed(np.ndarray):
    """An array type of no library gemmzoo exchanges arrays with (as JAX's are to it): a NumPy
    array subclass defined outside NumPy, so it computes like one."""


class ForeignBackend(NumpyBackend):
    """Correct, computing on :class:`Boxed` arrays: gemmzoo.matmul can reach it from NumPy only
    by copying through the host."""

    name = "foreign-fake"

    def from_numpy(self, x: np.ndarray, dtype: str) -> Boxed:
        return super().from_numpy(x, dtype).view(Boxed)

    def to_numpy(self, y: Boxed) -> np.ndarray:
        return np.array(y, copy=True)
