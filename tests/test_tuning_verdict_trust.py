"""Verdicts are earned here: an imported conformance verdict never makes a backend selectable or
refused; the import and ``gemmzoo check`` run the suite on this machine, and ``check`` replaces
what is stored."""

from __future__ import annotations

import json
import time
from typing import Any

import numpy as np
import pytest
from sessions import reconfigure, scoped
from tuning_fakes import DelayedBackend, registry_with

import gemmzoo
from gemmzoo.cli import main
from gemmzoo.session import current
from gemmzoo.tuning import ConformanceRecord, explain, portable, state
from gemmzoo.tuning.fingerprint import device_fingerprint, library_versions
from gemmzoo.tuning.tune import conformance_verdict, verdict_versions
from gemmzoo_numpy import NumpyBackend


class TallResult(NumpyBackend):
    """Returns one row too many: C is (M + 1) × N."""

    name = "tall-result"

    def matmul(self, a, b):
        c = super().matmul(a, b)
        return np.concatenate([c, c[:1]], axis=0)


class MutatesA(NumpyBackend):
    """Right product, but A is doubled in place."""

    name = "mutates-a"

    def matmul(self, a, b):
        c = super().matmul(a, b)
        a *= 2
        return c


@pytest.fixture
def backends(empty_cache, monkeypatch):
    """numpy, a correct fake, and two wrong ones in the registry; the cache is empty."""
    liars = [NumpyBackend(), DelayedBackend("honest-fake"), TallResult(), MutatesA()]
    with scoped(registry=registry_with(*liars)):
        yield {b.name: b for b in liars}


def _row(backend: str, shape: tuple[int, int, int], median: float) -> dict[str, Any]:
    m, n, k = shape
    return {"device": json.loads(device_fingerprint("cpu")),
            "versions": json.loads(library_versions(backend, current().registry)),
            "backend": backend, "m": m, "n": n, "k": k, "dtype": "float32", "layout": "NN", "status": "ok",
            "median_s": median, "spread_s": 0.0, "error_ratio": None, "samples": 10, "detail": "",
            "created": time.time() - 10}


def _verdict(backend: Any, passed: bool) -> dict[str, Any]:
    return {"device": json.loads(device_fingerprint("cpu")),
            "versions": json.loads(verdict_versions(backend)), "backend": backend.name, "dtype": "float32",
            "passed": passed, "checks": 41, "failures": 0, "detail": "", "created": time.time() - 10}


def _file(tmp_path, rows: list[dict[str, Any]], verdicts: list[dict[str, Any]]):
    path = tmp_path / "from-elsewhere.json"
    path.write_text(json.dumps({"format": portable.FORMAT, "version": portable.VERSION,
                                "measurements": rows, "conformance": verdicts}))
    return path


@pytest.mark.parametrize("liar", ["tall-result", "mutates-a"])
def test_an_imported_pass_and_a_1_ns_timing_never_pick_a_wrong_backend(backends, tmp_path, capsys, liar):
    shape = (8, 8, 8)
    path = _file(tmp_path, [_row(liar, shape, 1e-9), _row("numpy", shape, 1e-3)],
                 [_verdict(backends[liar], True)])
    assert main(["tune", "--import", str(path)]) == 0
    out = capsys.readouterr().out
    assert "1 conformance verdicts not taken in" in out
    assert f"conformance suite FAILED here, their rows are not used: {liar} float32" in out
    for measure in (False, True):
        choice = explain(shape, measure=measure)
        assert choice.backend.name != liar and "failed conformance" in choice.excluded[liar]
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((8, 8)).astype(np.float32), rng.standard_normal((8, 8)).astype(np.float32)
    before = a.copy()
    c = gemmzoo.matmul(a, b)
    assert c.shape == (8, 8) and np.allclose(c, before @ b, atol=1e-5) and np.array_equal(a, before)


def test_imported_rows_rank_only_after_the_suite_passed_here(backends, tmp_path):
    shape = (16, 16, 16)
    path = _file(tmp_path, [_row("honest-fake", shape, 1e-6), _row("numpy", shape, 1e-3)],
                 [_verdict(backends["honest-fake"], True)])
    report = portable.import_tuning(state.store(), path, check=False)  # the API can skip the suite
    assert report.added == 2 and report.checked == []
    choice = explain(shape, measure=False)
    # no verdict here: the rows rank nothing, and the default (numpy) passed the suite first
    assert choice.source == "default" and choice.backend.name == "numpy"
    assert "not yet run on this machine" in choice.excluded["honest-fake"]
    assert "gemmzoo check honest-fake" in choice.excluded["honest-fake"]
    assert main(["check", "honest-fake", "--dtype", "float32"]) == 0
    choice = explain(shape, measure=False)
    assert choice.source == "database" and choice.backend.name == "honest-fake"  # now it ranks


def test_an_imported_fail_does_not_refuse_a_backend(backends, tmp_path, capsys):
    path = _file(tmp_path, [_row("numpy", (8, 8, 8), 1e-6)], [_verdict(backends["numpy"], False)])
    assert main(["tune", "--import", str(path)]) == 0
    assert "conformance suite passed here: numpy float32" in capsys.readouterr().out
    assert explain((8, 8, 8), measure=False).backend.name == "numpy"


def test_gemmzoo_check_replaces_a_stored_verdict(backends, capsys):
    honest = backends["honest-fake"]
    stale = ConformanceRecord(device_fingerprint("cpu"), verdict_versions(honest), honest.name, "float32",
                              False, 41, 1, "an old failure", time.time())
    state.store().add_conformance(stale)
    with pytest.MonkeyPatch.context() as patched:
        patched.setenv("GEMMZOO_BACKENDS", "honest-fake")
        reconfigure()
        with pytest.raises(gemmzoo.errors.BackendUnavailableError, match="gemmzoo check honest-fake"):
            explain((8, 8, 8), measure=False)
        assert main(["check", "honest-fake"]) == 0
        capsys.readouterr()
        assert explain((8, 8, 8), measure=False).backend.name == "honest-fake"
        stored = state.store().conformance(device_fingerprint("cpu"), verdict_versions(honest), honest.name,
                                           "float32")
        assert stored is not None and stored.passed and stored.checks > 30
    # and the other way: a backend that fails the suite now gets a stored failure from check
    assert main(["check", "tall-result"]) == 1
    assert conformance_verdict(state.store(), backends["tall-result"], "float32", run=False) is False


def test_the_default_pick_passes_the_suite_before_it_is_used(backends, monkeypatch):
    monkeypatch.setenv("GEMMZOO_BACKENDS", "tall-result,mutates-a")
    reconfigure()
    with pytest.raises(gemmzoo.errors.BackendUnavailableError, match="passed conformance on this machine"):
        explain((8, 8, 8), measure=False)  # the suite ran on both (nothing measured) and refused both
    for name in ("tall-result", "mutates-a"):
        assert conformance_verdict(state.store(), backends[name], "float32", run=False) is False
