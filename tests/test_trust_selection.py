"""Selection never trusts what it should not: a backend stored WRONG at a shape is never the
answer there, and a backend whose identity moves after registration inherits nothing."""

from __future__ import annotations

import time

import pytest
from sessions import reconfigure, scoped
from tuning_fakes import DelayedBackend, registry_with

from gemmzoo.errors import BackendUnavailableError
from gemmzoo.plugins import registry as registry_module
from gemmzoo.session import current
from gemmzoo.tuning import Record, state
from gemmzoo.tuning.fingerprint import device_fingerprint, library_versions
from gemmzoo.tuning.select import best_backend
from gemmzoo.tuning.tune import conformance_verdict

ONLY = "only-fake"


@pytest.fixture
def alone(tmp_path, monkeypatch):
    """One conforming backend, and an empty cache."""
    monkeypatch.setenv("GEMMZOO_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("GEMMZOO_BACKENDS", raising=False)
    monkeypatch.delenv("GEMMZOO_TUNE", raising=False)
    backend = DelayedBackend(ONLY)
    with scoped(registry=registry_with(backend)):
        yield backend


def _row(shape, status: str, median: float | None) -> Record:
    m, n, k = shape
    return Record(device_fingerprint("cpu"), library_versions(ONLY, current().registry), ONLY,
                  m, n, k, "float32", "NN", status, median, 0.0 if median else None, 0.5, 10,
                  "58.8 of the bound" if status == "wrong" else "", time.time())


def test_a_backend_stored_wrong_at_a_shape_is_never_the_answer_there(alone):
    assert conformance_verdict(state.store(), alone, "float32") is True
    state.store().add([_row((8, 8, 8), "wrong", None), _row((16, 16, 16), "ok", 1e-5)])
    with pytest.raises(BackendUnavailableError, match="wrong at this shape"):
        best_backend((8, 8, 8), "float32", measure=False)
    assert best_backend((16, 16, 16), "float32", measure=False) is alone  # right elsewhere: still used


def test_a_name_changed_after_registration_inherits_no_verdict(alone):
    assert conformance_verdict(state.store(), alone, "float32") is True
    impostor = DelayedBackend("impostor-fake")
    registry = registry_with(alone, impostor)
    reconfigure(registry=registry)
    assert conformance_verdict(state.store(), alone, "float32") is True
    impostor.name = ONLY  # after registration: now claims the name whose verdict is stored
    assert registry.drift(impostor) is not None and registry.drift(alone) is None
    assert conformance_verdict(state.store(), impostor, "float32") is False
    assert current().drift(impostor) is not None and current().drift(alone) is None
    reason = registry_module.unavailable_reason(impostor, registry)
    assert reason is not None and "after registration" in reason


def test_a_shape_too_large_for_memory_stores_no_row_that_breaks_it(alone, monkeypatch):
    import gemmzoo.tuning.select as select

    def out_of_memory(backends, point, budget, verify):
        versions = library_versions(ONLY, current().registry)
        detail = "MemoryError: Unable to allocate 75.0 GiB"
        return [Record(device_fingerprint("cpu"), versions, ONLY, point.m, point.n, point.k, point.dtype,
                       "NN", "failed", None, None, None, None, detail, time.time())]

    monkeypatch.setattr(select, "measure_records", out_of_memory)
    assert conformance_verdict(state.store(), alone, "float32") is True
    with pytest.raises(Exception):  # noqa: B017 - whatever this process says, nothing is kept
        best_backend((100_000, 100_000, 100_000), "float32")
    shape = (100_000, 100_000, 100_000)
    assert state.store().records(device_fingerprint("cpu"), "float32", "NN", shape) == []
