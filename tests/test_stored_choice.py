"""A problem whose shape is stored is chosen in memory: at most 4 modules on a first gemmzoo.matmul,
no database read but one data_version question, and what this process or another one writes is
seen by the next new problem."""

from __future__ import annotations

import dataclasses
import importlib.util
import time
from pathlib import Path

import numpy as np
import pytest

import gemmzoo
from gemmzoo.dispatch.matmul import choice_for
from gemmzoo.tuning.db import Record, open_store
from gemmzoo.tuning.fingerprint import device_fingerprint, library_versions
from gemmzoo.tuning.tune import conformance_verdict

ROOT = Path(__file__).resolve().parents[1]

# What may run during a first gemmzoo.matmul of a stored problem: the dispatch entry and at most 3
# modules after it, the backend's own module one of them (docs/architecture.md, "A stored
# problem's first call").
ENTRY = "gemmzoo.dispatch.matmul"
BELOW = {"gemmzoo.arrays.libraries", "gemmzoo.tuning.select"}
PLUGINS = {"numpy": "gemmzoo_numpy.backend", "torch-cpu": "gemmzoo_torch.backend"}


def _tool():
    path = ROOT / "benchmarks" / "first_call_modules.py"
    spec = importlib.util.spec_from_file_location("first_call_modules", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# each library's arrays served by the other library's backend: the plan converts and calls that
# backend's prepared product (benchmarks/first_call_modules.py also counts the library's own)
@pytest.mark.parametrize(("library", "winner"), [("numpy", "torch-cpu"), ("torch", "numpy")])
def test_a_first_stored_problem_call_runs_at_most_three_modules_after_the_entry(library, winner, tmp_path):
    pytest.importorskip("torch")
    tool = _tool()
    with gemmzoo.Session(cache_dir=tmp_path / "warm"):  # the process has planned these arrays before
        gemmzoo.matmul(*tool.operands(library, (8, 8, 8)))
    case = tool.measure_case(library, winner, loaded=True)
    assert case["served"] == winner and case["source"] == "database"
    modules = case["modules"]
    plugin = PLUGINS[winner]
    assert modules[0] == ENTRY and {ENTRY, "gemmzoo.tuning.select", plugin} <= set(modules), modules
    assert set(modules) <= {ENTRY, plugin} | BELOW, set(modules) - ({ENTRY, plugin} | BELOW)
    assert len(modules) <= 4, modules
    # one call stack holds the entry and at most 3 modules below it, none of them met twice:
    # no lower module calls back up into a higher one
    chain = case["deepest_chain"]
    assert chain[0] == ENTRY and len(chain) <= 4, chain
    assert len(set(chain)) == len(chain), chain


def _row(name: str, shape: tuple[int, int, int], median: float) -> Record:
    m, n, k = shape
    return Record(device_fingerprint("cpu"), library_versions(name, gemmzoo.session.current().registry), name,
                  m, n, k, "float32", "NN", "ok", median, median / 100, 0.1, 50, "", time.time(),
                  median / 2, median / 200)


def _operands(shape: tuple[int, int, int]) -> tuple[np.ndarray, np.ndarray]:
    m, n, k = shape
    rng = np.random.default_rng(3)
    return (rng.standard_normal((m, k)).astype(np.float32), rng.standard_normal((k, n)).astype(np.float32))


@pytest.fixture
def two_backends(tmp_path):
    """A session of a new database in which numpy and torch-cpu have passed their float32 suite."""
    pytest.importorskip("torch")
    with gemmzoo.Session(cache_dir=tmp_path, backends=("numpy", "torch-cpu")) as session:
        for name in ("numpy", "torch-cpu"):
            assert conformance_verdict(session.store(), session.get_backend(name), "float32") is True
        yield session
        session.close()


def _statements(session):
    seen: list[str] = []
    session.store()._db.set_trace_callback(seen.append)
    return seen


def test_a_new_stored_problem_asks_the_database_only_whether_it_changed(two_backends):
    store = two_backends.store()
    store.add([_row("numpy", (24, 16, 8), 1e-5), _row("torch-cpu", (24, 16, 8), 1e-4),
               _row("numpy", (40, 24, 16), 1e-4), _row("torch-cpu", (40, 24, 16), 1e-5)])
    a, b = _operands((24, 16, 8))
    np.testing.assert_allclose(gemmzoo.matmul(a, b), a @ b, rtol=1e-5, atol=1e-5)  # the kind's first answer
    seen = _statements(two_backends)
    a, b = _operands((40, 24, 16))
    c = gemmzoo.matmul(a, b)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)
    assert seen == ["PRAGMA data_version"]
    assert choice_for(a, b).backend.name == "torch-cpu" and choice_for(a, b).source == "database"


def test_what_this_process_and_another_one_store_is_seen_by_the_next_new_problem(two_backends, tmp_path):
    store = two_backends.store()
    store.add([_row("numpy", (24, 16, 8), 1e-5), _row("torch-cpu", (24, 16, 8), 1e-4)])
    first = _operands((24, 16, 8))
    assert choice_for(*first).backend.name == "numpy"
    # this process's own write goes to memory too: nothing is read back
    store.add([_row("numpy", (40, 24, 16), 1e-4), _row("torch-cpu", (40, 24, 16), 1e-5)])
    seen = _statements(two_backends)
    assert choice_for(*_operands((40, 24, 16))).backend.name == "torch-cpu"
    assert not [s for s in seen if s.startswith("SELECT")]
    # another connection's (another process's) write: data_version moves, the rows are read again
    other = open_store(tmp_path)
    other.add([_row("numpy", (56, 32, 24), 1e-4), _row("torch-cpu", (56, 32, 24), 1e-5)])
    other.close()
    a, b = _operands((56, 32, 24))
    assert choice_for(a, b).backend.name == "torch-cpu" and choice_for(a, b).source == "database"
    np.testing.assert_allclose(gemmzoo.matmul(a, b), a @ b, rtol=1e-5, atol=1e-5)


def test_a_verdict_stored_after_the_first_answer_counts_for_the_next_problem(tmp_path):
    pytest.importorskip("torch")
    with gemmzoo.Session(cache_dir=tmp_path, backends=("numpy", "torch-cpu")) as session:
        store = session.store()
        assert conformance_verdict(store, session.get_backend("numpy"), "float32") is True
        store.add([_row("numpy", (24, 16, 8), 1e-4), _row("torch-cpu", (24, 16, 8), 1e-5),
                   _row("numpy", (40, 24, 16), 1e-4), _row("torch-cpu", (40, 24, 16), 1e-5)])
        choice = choice_for(*_operands((24, 16, 8)))
        assert choice.backend.name == "numpy" and "not yet run" in choice.excluded["torch-cpu"]
        assert conformance_verdict(store, session.get_backend("torch-cpu"), "float32") is True
        assert choice_for(*_operands((40, 24, 16))).backend.name == "torch-cpu"
        session.close()


def test_an_answer_from_memory_is_the_answer_of_the_slow_way(tmp_path):
    pytest.importorskip("torch")
    shapes = [(24, 16, 8), (40, 24, 16), (56, 32, 24)]
    with gemmzoo.Session(cache_dir=tmp_path, backends=("numpy", "torch-cpu", "jax")) as session:
        store = session.store()
        for name in ("numpy", "torch-cpu"):
            assert conformance_verdict(store, session.get_backend(name), "float32") is True
        rng = np.random.default_rng(5)
        rows = [_row(name, shape, float(rng.uniform(1e-5, 2e-5))) for shape in shapes
                for name in ("numpy", "torch-cpu", "jax")]
        store.add([*rows, dataclasses.replace(_row("numpy", shapes[2], 1e-5), status="wrong")])
        first = choice_for(*_operands(shapes[0]))  # the slow way: the kind's first answer
        seen = _statements(session)
        from_memory = [choice_for(*_operands(shape)) for shape in shapes[1:]]
        assert set(seen) == {"PRAGMA data_version"}  # answered from memory indeed
        session.close()
    for shape, fast in zip(shapes[1:], from_memory, strict=True):
        with gemmzoo.Session(cache_dir=tmp_path, backends=("numpy", "torch-cpu", "jax")) as fresh:
            slow = choice_for(*_operands(shape))  # a fresh session's first answer: the slow way
            fresh.close()
        assert _fields(fast) == _fields(slow)
    assert first.source == "database" and "jax" in first.excluded
    assert "wrong" in from_memory[1].excluded["numpy"]


def _fields(choice):
    return (choice.backend.name, choice.source, choice.basis, choice.ranking, choice.tied, choice.note,
            choice.excluded)


def test_rows_this_process_stores_again_at_a_stored_shape_change_its_answer(two_backends):
    store = two_backends.store()
    store.add([_row("numpy", (24, 16, 8), 1e-5), _row("torch-cpu", (24, 16, 8), 1e-4),
               _row("numpy", (40, 24, 16), 1e-5), _row("torch-cpu", (40, 24, 16), 1e-4)])
    assert choice_for(*_operands((24, 16, 8))).backend.name == "numpy"  # the kind's answers derived
    store.add([_row("numpy", (40, 24, 16), 1e-4), _row("torch-cpu", (40, 24, 16), 1e-5)])
    seen = _statements(two_backends)
    a, b = _operands((40, 24, 16))
    assert choice_for(a, b).backend.name == "torch-cpu" and choice_for(a, b).source == "database"
    assert not [s for s in seen if s.startswith("SELECT")]
    np.testing.assert_allclose(gemmzoo.matmul(a, b), a @ b, rtol=1e-5, atol=1e-5)


def test_a_stored_answer_that_would_probe_a_backends_library_waits_until_it_is_met(tmp_path):
    pytest.importorskip("torch")
    from gemmzoo.arrays.libraries import native_kind_known
    from gemmzoo.plugins.registry import Registry

    registry = Registry(strict=False)  # backends of their own: no probe of them made yet
    registry.load_entry_points()
    with gemmzoo.Session(cache_dir=tmp_path, registry=registry, backends=("numpy", "torch-cpu")) as session:
        store = session.store()
        for name in ("numpy", "torch-cpu"):
            assert conformance_verdict(store, session.get_backend(name), "float32") is True
        store.add([_row("numpy", (24, 16, 8), 1e-5), _row("torch-cpu", (24, 16, 8), 1e-4),
                   _row("numpy", (40, 24, 16), 1e-4), _row("torch-cpu", (40, 24, 16), 1e-5)])
        torch_cpu = session.get_backend("torch-cpu")
        assert not native_kind_known(torch_cpu, "float32")
        assert choice_for(*_operands((24, 16, 8))).backend.name == "numpy"  # the kind's answers derived
        assert not native_kind_known(torch_cpu, "float32")  # torch-cpu's winning shape not answered yet
        a, b = _operands((40, 24, 16))
        fast = choice_for(a, b)
        assert fast.backend.name == "torch-cpu" and native_kind_known(torch_cpu, "float32")
        np.testing.assert_allclose(gemmzoo.matmul(a, b), a @ b, rtol=1e-5, atol=1e-5)
        session.close()
    with gemmzoo.Session(cache_dir=tmp_path, registry=registry, backends=("numpy", "torch-cpu")) as fresh:
        slow = choice_for(a, b)  # a fresh session's first answer: the slow way
        fresh.close()
    assert _fields(fast) == _fields(slow)
