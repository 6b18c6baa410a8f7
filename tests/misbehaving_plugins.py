"""A corpus of misbehaving backends: each raises in, returns the wrong type from, or hangs in one
member, or computes something wrong. Used in-process and as installed plugins (one entry point per
case: see :func:`install`).

Every backend computes float32 on the CPU with NumPy when the member under test is left alone, so
that what goes wrong is only the member each case names.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from fake_distributions import write_distribution

import gemmzoo
from gemmzoo import Backend

#: How long a hanging member sleeps: far beyond the time limits the tests set (1-2 s).
HANG_S = 120.0
DISTRIBUTION = "gemmzoo-misbehaving"


class Plain(Backend):
    """A correct float32 backend on NumPy, implementing only the contract's members."""

    name = "plain"
    device = "cpu"
    dtypes = frozenset({"float32"})

    def from_numpy(self, x: np.ndarray, dtype: str) -> Any:
        self.check_dtype(dtype, x.shape)
        return np.array(x, dtype=np.float32, copy=True)

    def to_numpy(self, y: Any) -> np.ndarray:
        return np.array(y, copy=True)

    def matmul(self, a: Any, b: Any) -> Any:
        self.check_operands(a, b)
        return np.matmul(a, b)


class UnprintableError(Exception):
    """An exception whose own ``str()`` raises."""

    def __str__(self) -> str:
        raise ValueError("no text for you")


def _hang(*_args: Any) -> Any:
    time.sleep(HANG_S)
    return None


def _raise(*_args: Any) -> Any:
    raise RuntimeError("plugin bug [red]not markup[/]")


def _raise_unprintable(*_args: Any) -> Any:
    raise UnprintableError()


# case -> the class attributes that replace Plain's
CASES: dict[str, dict[str, Any]] = {
    # exceptions from each member
    "raise-name": {"name": property(_raise)},
    "raise-device": {"device": property(_raise)},
    "raise-dtypes": {"dtypes": property(_raise)},
    "raise-accuracy": {"accuracy": property(_raise)},
    "raise-selectable": {"selectable": property(_raise)},
    "raise-searches-over": {"searches_over": property(_raise)},
    "raise-unavailable-reason": {"unavailable_reason": _raise},
    "raise-unprintable-reason": {"unavailable_reason": _raise_unprintable},
    "raise-from-numpy": {"from_numpy": _raise},
    "raise-to-numpy": {"to_numpy": _raise},
    "raise-prepare": {"prepare": _raise},
    "raise-synchronize": {"synchronize": _raise},
    "raise-matmul": {"matmul": _raise},
    "exit-in-matmul": {"matmul": lambda self, a, b: sys.exit(3)},
    "interrupt-in-matmul": {"matmul": lambda self, a, b: (_ for _ in ()).throw(KeyboardInterrupt())},
    # wrong types from each member
    "int-name": {"name": 7},
    "none-device": {"device": None},
    "string-dtypes": {"dtypes": "float32"},
    "unknown-dtypes": {"dtypes": frozenset({"int8"})},
    "empty-dtypes": {"dtypes": frozenset()},
    "odd-accuracy": {"accuracy": 3},
    "odd-selectable": {"selectable": "yes"},
    "string-searches-over": {"searches_over": "torch"},
    "uncallable-matmul": {"matmul": 42},
    "int-reason": {"unavailable_reason": lambda self: 42},
    "empty-reason": {"unavailable_reason": lambda self: ""},
    "list-from-numpy": {"from_numpy": lambda self, x, dtype: np.asarray(x).tolist()},
    "list-to-numpy": {"to_numpy": lambda self, y: np.asarray(y).tolist()},
    "none-prepare": {"prepare": lambda self, a, b: None},
    "string-matmul": {"matmul": lambda self, a, b: "C"},
    "value-synchronize": {"synchronize": lambda self: 5},
    # hangs
    "hang-unavailable-reason": {"unavailable_reason": _hang},
    "hang-from-numpy": {"from_numpy": _hang},
    "hang-prepare": {"prepare": _hang},
    "hang-synchronize": {"synchronize": _hang},
    "hang-matmul": {"matmul": _hang},
    # wrong results
    "wrong-shape": {"matmul": lambda self, a, b: np.vstack([np.matmul(a, b), np.zeros((1, b.shape[1]),
                                                                                    np.float32)])},
    "mutates-inputs": {"matmul": lambda self, a, b: (a.__setitem__((0, 0), a[0, 0] + 1), np.matmul(a, b))[1]},
}

#: Cases whose backend is refused at registration (a malformed member): never listed, never run.
REFUSED = {"raise-name", "raise-device", "raise-dtypes", "raise-accuracy", "raise-selectable", "int-name",
           "none-device", "string-dtypes", "unknown-dtypes", "empty-dtypes", "odd-accuracy",
           "odd-selectable", "uncallable-matmul", "raise-searches-over", "string-searches-over"}
#: Cases whose backend is unavailable because its ``unavailable_reason()`` misbehaves.
UNAVAILABLE = {"raise-unavailable-reason", "raise-unprintable-reason", "int-reason", "empty-reason",
               "hang-unavailable-reason"}
#: Cases that hang in a member the conformance suite and the benchmarks call.
HANGS = {"hang-from-numpy", "hang-prepare", "hang-synchronize", "hang-matmul"}


def backend_name(case: str) -> str:
    """The registered name of a case's backend."""
    return f"bad-{case}"


def make_backend(case: str) -> Backend:
    """A new backend instance that misbehaves as ``case`` says."""
    members = dict(CASES[case])
    if "name" not in members:
        members["name"] = backend_name(case)
    cls = type("Misbehaving_" + case.replace("-", "_"), (Plain,), members)
    return cls()


def register_case(case: str) -> Any:
    """A ``gemmzoo_register_backends`` hook that registers the backend of ``case``."""

    @gemmzoo.hookimpl
    def gemmzoo_register_backends(register: Any) -> None:
        register(make_backend(case))

    return gemmzoo_register_backends


def module_name(case: str) -> str:
    return "gemmzoo_misbehaving_" + case.replace("-", "_")


def install(site: Path, cases: list[str] | None = None) -> Path:
    """Write a distribution with one entry point per case (all of them by default) into ``site``;
    its modules import this file, so ``site`` and this folder must both be on the path."""
    chosen = list(CASES) if cases is None else cases
    modules = {module_name(case): f"from misbehaving_plugins import register_case\n"
                                  f"gemmzoo_register_backends = register_case({case!r})\n"
               for case in chosen}
    entry_points = {case: module_name(case) for case in chosen}
    return write_distribution(site, DISTRIBUTION, "6.6.6", entry_points, modules)
