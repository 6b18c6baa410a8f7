"""A backend that compiles each new problem (``compiles_per_problem``) is left out of first
answers: best_backend neither runs its suite nor measures it on a miss, says why, and ranks it
once `gemmzoo tune` (or check and stored timings) has measured it."""

from __future__ import annotations

import numpy as np
import pytest
from sessions import scoped
from tuning_fakes import DelayedBackend, registry_with

from gemmzoo.problems.grids import GridPoint
from gemmzoo.tuning import explain, state, tune
from gemmzoo.tuning import select as select_module

FAST, COMPILED = "plain-fake", "compiled-fake"


class CompilingBackend(DelayedBackend):
    """Faster than the plain fake, but compiles each problem: counts its suite runs and calls."""

    compiles_per_problem = True

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.calls = 0

    def matmul(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        self.calls += 1
        return super().matmul(a, b)


@pytest.fixture
def compiled(tmp_path, monkeypatch):
    monkeypatch.setenv("GEMMZOO_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("GEMMZOO_BACKENDS", raising=False)
    monkeypatch.delenv("GEMMZOO_TUNE", raising=False)
    backend = CompilingBackend(COMPILED)
    with scoped(registry=registry_with(DelayedBackend(FAST, 0.002), backend)):
        yield backend


def test_a_first_answer_neither_checks_nor_measures_a_compiling_backend(compiled):
    choice = explain((24, 16, 8))
    assert choice.backend.name == FAST and choice.source == "measured now"
    assert compiled.calls == 0  # no conformance case and no timing called it
    assert "compiles each new problem" in choice.excluded[COMPILED]


def test_once_tuned_a_compiling_backend_ranks_from_its_stored_timings(compiled, monkeypatch):
    records = tune([GridPoint(24, 16, 8)], budget_s=0.02)
    assert {r.backend for r in records} == {FAST, COMPILED} and compiled.calls > 0
    state.forget_answers()

    def refuse(*args, **kwargs):
        raise AssertionError("measured again, but the stored timings answer")

    monkeypatch.setattr(select_module, "measure_records", refuse)
    choice = explain((24, 16, 8))
    assert choice.backend.name == COMPILED and choice.source == "database"
    assert COMPILED not in choice.excluded


def test_an_unreadable_flag_counts_as_not_compiling():
    class Broken:
        @property
        def compiles_per_problem(self):
            raise RuntimeError("plugin bug")

    assert select_module._compiles(Broken()) is False
    assert select_module._compiles(CompilingBackend("x")) is True
