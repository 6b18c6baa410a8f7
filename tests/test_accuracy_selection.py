"""best_backend and gemmzoo.matmul pick a normwise backend only for a caller who accepts it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import strassen_plugin
from fake_distributions import run_gemmzoo, write_distribution
from sessions import restart, scoped
from tuning_fakes import DelayedBackend, registry_with

import gemmzoo
from gemmzoo.errors import BackendUnavailableError
from gemmzoo.tuning import explain, state
from gemmzoo.tuning.fingerprint import device_fingerprint
from gemmzoo.tuning.tune import verdict_versions


class CountingBackend(DelayedBackend):
    """A DelayedBackend that counts its products, to tell which one gemmzoo.matmul used."""

    def __init__(self, name: str, delay_s: float = 0.0, accuracy: str = "componentwise") -> None:
        super().__init__(name, delay_s)
        self.accuracy = accuracy
        self.calls = 0

    def matmul(self, a, b):
        self.calls += 1
        return super().matmul(a, b)


@pytest.fixture
def backends(tmp_path, monkeypatch):
    """A fast normwise backend and a slower componentwise one, alone in the registry."""
    monkeypatch.setenv("GEMMZOO_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("GEMMZOO_BACKENDS", raising=False)
    monkeypatch.delenv("GEMMZOO_TUNE", raising=False)
    fast = CountingBackend("fast-normwise", accuracy="normwise")
    slow = CountingBackend("slow-componentwise", 0.003)
    with scoped(registry=registry_with(fast, slow)):
        yield fast, slow


def test_best_backend_leaves_normwise_out_unless_accepted(backends):
    fast, slow = backends

    assert gemmzoo.best_backend((48, 40, 32)) is slow
    assert gemmzoo.best_backend((48, 40, 32), accuracy="normwise") is fast
    assert gemmzoo.best_backend((48, 40, 32)) is slow  # the cached answers do not mix
    choice = explain((48, 40, 32))
    assert choice.excluded["fast-normwise"] == "normwise accuracy, not accepted (accuracy='componentwise')"


def test_matmul_uses_a_normwise_backend_only_when_accepted(backends):
    fast, slow = backends
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((48, 32)).astype(np.float32), rng.standard_normal((32, 40)).astype(np.float32)
    # measure first, and check both (a first answer runs the suite of the one it answers only),
    # so the counts below are matmul's
    gemmzoo.best_backend((48, 40, 32), accuracy="normwise")
    gemmzoo.best_backend((48, 40, 32))
    fast.calls = slow.calls = 0

    c = gemmzoo.matmul(a, b)
    assert (slow.calls, fast.calls) == (1, 0)
    c_normwise = gemmzoo.matmul(a, b, accuracy="normwise")
    assert (slow.calls, fast.calls) == (1, 1)
    gemmzoo.matmul(a, b, backend="fast-normwise")  # named: used whatever its class
    assert fast.calls == 2
    expected = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(c, expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(c_normwise, expected, rtol=1e-5, atol=1e-5)


def test_only_normwise_backends_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("GEMMZOO_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("GEMMZOO_BACKENDS", raising=False)
    restart(registry=registry_with(CountingBackend("only-normwise", accuracy="normwise")))
    try:
        with pytest.raises(BackendUnavailableError, match="only-normwise: normwise accuracy, not accepted"):
            gemmzoo.best_backend((8, 8, 8))
        with pytest.raises(ValueError, match="unknown accuracy class 'exact'"):
            gemmzoo.best_backend((8, 8, 8), accuracy="exact")
    finally:
        restart()


def test_gemmzoo_best_shows_the_class_and_takes_accuracy(tmp_path):
    source = Path(strassen_plugin.__file__).read_text() + '\nStrassenBackend.accuracy = "normwise"\n'
    write_distribution(tmp_path, "gemmzoo-strassen", "1.0", {"strassen": "gemmzoo_strassen"},
                       {"gemmzoo_strassen": source})
    env = {"GEMMZOO_BACKENDS": "strassen-one-level,numpy", "GEMMZOO_CACHE_DIR": str(tmp_path / "cache")}

    default = run_gemmzoo(tmp_path, "best", "64", "48", "80", "--device", "cpu", **env)
    assert default.returncode == 0, default.stdout + default.stderr
    assert default.stdout.startswith("numpy for 64x48x80 float32 on cpu")
    assert "accuracy: componentwise (accepted: componentwise)" in default.stdout
    assert ("not a candidate: strassen-one-level: normwise accuracy, not accepted (accuracy='componentwise')"
            in default.stdout)

    lenient = run_gemmzoo(tmp_path, "best", "64", "48", "80", "--device", "cpu", "--accuracy", "normwise",
                          **env)
    assert lenient.returncode == 0, lenient.stdout + lenient.stderr
    assert "(accepted: normwise or stronger)" in lenient.stdout
    assert "strassen-one-level: normwise accuracy, not accepted" not in lenient.stdout
    chosen = lenient.stdout.split()[0]
    assert chosen in ("numpy", "strassen-one-level")
    assert f"accuracy: {'normwise' if chosen == 'strassen-one-level' else 'componentwise'}" in lenient.stdout
    other = "numpy" if chosen == "strassen-one-level" else "strassen-one-level"
    # both were timed; the other is the runner-up once its suite has run (its first answer ran the
    # suite of the answer alone)
    checked = run_gemmzoo(tmp_path, "check", other, "--dtype", "float32", **env)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    again = run_gemmzoo(tmp_path, "best", "64", "48", "80", "--device", "cpu", "--accuracy", "normwise",
                        **env)
    assert f"runner-up: {other}," in again.stdout, again.stdout


def test_a_stored_verdict_is_not_reused_for_another_accuracy_class(backends):
    fast, _ = backends
    gemmzoo.best_backend((16, 8, 24), accuracy="normwise")
    normwise_key = verdict_versions(fast)
    stored = state.store().conformance(device_fingerprint("cpu"), normwise_key, fast.name, "float32")
    assert stored is not None and stored.passed

    fast.accuracy = "componentwise"  # the same backend, now claiming the stronger class

    assert verdict_versions(fast) != normwise_key
    assert state.store().conformance(device_fingerprint("cpu"), verdict_versions(fast), fast.name,
                                     "float32") is None
