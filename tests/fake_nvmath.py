"""Test double: the part of nvmath-python's ``nvmath.linalg.advanced`` that ``nvmath-cublaslt`` uses,
on torch CPU tensors, recording every call, so that the backend's plans can be tested without a GPU.

The fake keeps the rules of the real ``Matmul`` that the backend's plan is built around: extents
must be positive, an operand needs a unit stride (or a single row or column), operands are held
from construction until ``release_operands``, ``execute`` needs operands and a plan, and it
returns a new tensor. ``autotune`` puts the heuristic's third candidate first, so a test can tell
the autotuned pick from the heuristic's.
"""

from __future__ import annotations

import importlib.machinery
import sys
import threading
import types
from dataclasses import dataclass, field
from typing import Any

import pytest


@dataclass
class Log:
    """What the fakes were asked, in order: ``(event, details)``."""

    events: list[tuple[str, Any]] = field(default_factory=list)

    def count(self, event: str) -> int:
        return sum(1 for name, _ in self.events if name == event)

    def of(self, event: str) -> list[Any]:
        return [details for name, details in self.events if name == event]


class FakeAlgorithm:
    def __init__(self, algorithm_id: int) -> None:
        self.algorithm_id = algorithm_id

    def __repr__(self) -> str:
        return f"FakeAlgorithm({self.algorithm_id})"


def _layout_ok(tensor: Any) -> bool:
    (rows, cols), (row_stride, col_stride) = tensor.shape, tensor.stride()
    return row_stride == 1 or col_stride == 1 or rows == 1 or cols == 1


def install(monkeypatch: pytest.MonkeyPatch) -> Log:
    """Put the fake ``nvmath``, ``nvmath.linalg`` and ``nvmath.linalg.advanced`` in ``sys.modules``
    for one test; returns the log of calls."""
    import torch

    log = Log()

    class Matmul:
        algorithms: tuple[FakeAlgorithm, ...] = ()  # a property of the real class

        def __init__(self, a: Any, b: Any, /, *, options: Any = None) -> None:
            for name, operand in (("a", a), ("b", b)):
                if any(extent <= 0 for extent in operand.shape):
                    raise ValueError(f"The extents must be positive ({name}: {tuple(operand.shape)})")
                if not _layout_ok(operand):
                    raise ValueError("Unsupported layout.")
            self.options = options
            self.operands = [a, b]
            self.thread = threading.get_ident()
            self.algorithms = ()
            self.freed = False
            log.events.append(("construct", {"shapes": (tuple(a.shape), tuple(b.shape)),
                                             "strides": (a.stride(), b.stride()),
                                             "compute_type": options.compute_type,
                                             "pointers": (a.data_ptr(), b.data_ptr()),
                                             "thread": self.thread}))

        def plan(self, *, preferences: Any = None, algorithms: Any = None) -> tuple[FakeAlgorithm, ...]:
            if algorithms is None:
                self.algorithms = tuple(FakeAlgorithm(i) for i in range(preferences.limit))
                log.events.append(("plan", {"reduction": preferences.reduction_scheme_mask}))
            else:
                self.algorithms = tuple(algorithms)
                log.events.append(("plan-with", [algorithm.algorithm_id for algorithm in algorithms]))
            return self.algorithms

        def autotune(self, iterations: int = 10, prune: Any = None, release_workspace: bool = False) -> None:
            assert self.operands is not None, "autotune needs operands"
            picked = self.algorithms[min(2, len(self.algorithms) - 1)]
            self.algorithms = (picked, *(a for a in self.algorithms if a is not picked))
            log.events.append(("autotune", iterations))

        def release_operands(self) -> None:
            self.operands = None
            log.events.append(("release", None))

        def reset_operands(self, *, a: Any = None, b: Any = None) -> None:
            if self.operands is None and (a is None or b is None):
                raise ValueError("After release_operands(), all required operands must be provided")
            self.operands = [a, b]
            log.events.append(("reset", None))

        def execute(self, *, release_workspace: bool = False) -> Any:
            assert self.operands is not None and self.algorithms, "execute needs operands and a plan"
            assert threading.get_ident() == self.thread, "a Matmul is used only by its creating thread"
            a, b = self.operands
            log.events.append(("execute", {"algorithm": self.algorithms[0].algorithm_id,
                                           "strides": (a.stride(), b.stride()),
                                           "release_workspace": release_workspace}))
            wide = torch.float64 if a.dtype == torch.float64 else torch.float32
            return torch.mm(a.to(wide), b.to(wide)).to(a.dtype)

        def free(self) -> None:
            self.freed = True

    class MatmulOptions:
        def __init__(self, compute_type: Any = None, logger: Any = None) -> None:
            self.compute_type, self.logger = compute_type, logger

    class MatmulPlanPreferences:
        def __init__(self, reduction_scheme_mask: Any = None, limit: int = 8) -> None:
            self.reduction_scheme_mask, self.limit = reduction_scheme_mask, limit

    compute_types = ("COMPUTE_32F", "COMPUTE_32F_FAST_TF32", "COMPUTE_64F")
    compute_type = types.SimpleNamespace(**{name: name for name in compute_types})
    schemes = types.SimpleNamespace(NONE="NONE", INPLACE="INPLACE", COMPUTE_TYPE="COMPUTE_TYPE",
                                    OUTPUT_TYPE="OUTPUT_TYPE", MASK="MASK")
    names = ("nvmath", "nvmath.linalg", "nvmath.linalg.advanced")
    root, linalg, advanced = (types.ModuleType(name) for name in names)
    for module in (root, linalg, advanced):  # importlib.util.find_spec reads it of a loaded module
        module.__spec__ = importlib.machinery.ModuleSpec(module.__name__, None)
    linalg.ComputeType = compute_type
    advanced.Matmul = Matmul
    advanced.MatmulOptions = MatmulOptions
    advanced.MatmulPlanPreferences = MatmulPlanPreferences
    advanced.MatmulReductionScheme = schemes
    root.linalg, linalg.advanced = linalg, advanced
    for name, module in (("nvmath", root), ("nvmath.linalg", linalg), ("nvmath.linalg.advanced", advanced)):
        monkeypatch.setitem(sys.modules, name, module)
    return log
