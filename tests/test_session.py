"""gemmzoo.Session: configuration read once, caches of its own, scoped with `with`."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import gemmzoo
from gemmzoo import session as session_module
from gemmzoo.config import ConfigError


def _operands(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.standard_normal((9, 7)).astype(np.float32), rng.standard_normal((7, 5)).astype(np.float32)


def test_session_is_exported_lazily():
    import subprocess
    import sys

    code = ("import sys, gemmzoo; assert 'gemmzoo.session' not in sys.modules; "
            "assert gemmzoo.Session.__name__ == 'Session'; assert 'torch' not in sys.modules")
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


def test_keywords_override_the_environment_and_are_validated(empty_cache, monkeypatch):
    monkeypatch.setenv("GEMMZOO_TUNE", "0")
    made = gemmzoo.Session(backends=("numpy",), timeout=5)
    assert made.config.tune is False and made.config.backends == ("numpy",) and made.config.timeout == 5.0
    assert made.config.cache_dir == empty_cache
    with pytest.raises(ConfigError, match="timeout must be"):
        gemmzoo.Session(timeout=1e10)
    with pytest.raises(ConfigError, match="unknown configuration field"):
        gemmzoo.Session(tuen=False)


def test_with_scopes_a_session_and_nested_blocks_stack(empty_cache, tmp_path):
    outer = session_module.current()
    first, second = gemmzoo.Session(cache_dir=tmp_path / "a"), gemmzoo.Session(cache_dir=tmp_path / "b")
    with first:
        assert session_module.current() is first
        with second as entered:
            assert entered is second and session_module.current() is second
        assert session_module.current() is first
    assert session_module.current() is outer


def test_each_session_keeps_its_own_store_answers_and_plans(empty_cache, tmp_path):
    a, b = _operands()
    outer = session_module.current()
    other = gemmzoo.Session(cache_dir=tmp_path / "other", backends=("numpy",))
    c = other.matmul(a, b)
    np.testing.assert_allclose(c, a.astype(np.float64) @ b, rtol=1e-5, atol=1e-5)
    assert other.plan_cache.plans and not outer.plan_cache.plans
    assert other.store().path.parent == tmp_path / "other"
    assert outer.store().path.parent == empty_cache
    assert other.best_backend((9, 5, 7), measure=False).name == "numpy"
    assert other.answers and not outer.answers
    assert [x.name for x in other.backends()] == [x.name for x in gemmzoo.backends()]
    assert other.get_backend("numpy") is gemmzoo.get_backend("numpy")
    other.close()
    assert not other.plan_cache.plans and not other.answers


def test_forgetting_answers_replaces_the_plan_cache(gemmzoo_session):
    a, b = _operands(1)
    gemmzoo.matmul(a, b, "numpy")
    before = gemmzoo_session.plan_cache
    assert before.plans
    gemmzoo_session.forget_answers()
    assert gemmzoo_session.plan_cache is not before and not gemmzoo_session.plan_cache.plans


def test_another_thread_sees_the_default_session_not_a_scoped_one(empty_cache, tmp_path):
    seen = []
    with gemmzoo.Session(cache_dir=tmp_path / "scoped") as scoped:
        worker = threading.Thread(target=lambda: seen.append(session_module.current()))
        worker.start()
        worker.join()
        assert session_module.current() is scoped
    assert seen == [session_module.default()]


def test_the_tuning_state_names_the_current_session(gemmzoo_session, tmp_path):
    from gemmzoo.tuning import state

    assert state.answers is gemmzoo_session.answers and state.verdicts is gemmzoo_session.verdicts
    assert state.store() is gemmzoo_session.store()
    with gemmzoo.Session(cache_dir=tmp_path / "x") as other:
        assert state.plan_cache is other.plan_cache
    with pytest.raises(AttributeError):
        state.availability  # noqa: B018 - the unused piece is gone
