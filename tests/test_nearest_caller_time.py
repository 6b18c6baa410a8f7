"""Nearest-shape answers carry device times to the new shape and host times as measured: a
backend that won a large shape on device time is not carried to a small one where its host time
is what the caller waits for. Stored rows with chosen numbers make the answers certain."""

from __future__ import annotations

import dataclasses

import pytest
from sessions import restart
from test_best_backend import (  # noqa: F401  (fresh: autouse fixture)
    FAST,
    SLOW,
    forbid_measuring,
    fresh,
    passed_here,
    row,
)

from gemmzoo.session import current
from gemmzoo.tuning import explain, state
from gemmzoo.tuning.select import plan_choice, work_ratio

TUNED = (1, 10240, 8192)  # a decode projection, measured
ASKED = (1, 4096, 4096)  # a smaller one, not measured


def _store_decode_rows() -> None:
    # FAST: a decode kernel, 50 us on the device but 40 us of host work per call; SLOW: 60 us on
    # the device and 17 us of host work. FAST wins the tuned shape in caller time.
    state.store().add([
        dataclasses.replace(row(FAST, TUNED, 50e-6, 1e-6), host_s=40e-6, host_spread_s=1e-6),
        dataclasses.replace(row(SLOW, TUNED, 60e-6, 1e-6), host_s=17e-6, host_spread_s=1e-6),
    ])
    passed_here(FAST, SLOW)  # stored rows rank only backends that passed the suite here


def test_the_tuned_shape_itself_goes_to_the_device_winner(monkeypatch):
    forbid_measuring(monkeypatch)
    _store_decode_rows()
    assert explain(TUNED, measure=False).backend.name == FAST


def test_a_smaller_shape_is_not_carried_to_a_backend_its_host_time_loses(monkeypatch):
    forbid_measuring(monkeypatch)
    _store_decode_rows()
    scale = work_ratio(ASKED, TUNED, "float32", "cpu")
    assert 0.15 < scale < 0.25  # memory-bound decode shapes: the ratio of the bytes moved
    choice = explain(ASKED, measure=False)
    assert (choice.backend.name, choice.source, choice.basis) == (SLOW, "nearest shape", TUNED)
    carried = {t.backend: t for t in choice.ranking}
    assert carried[FAST].bound == "host" and carried[FAST].median_s == pytest.approx(40e-6)
    assert carried[SLOW].bound == "host" and carried[SLOW].median_s == pytest.approx(17e-6)
    assert "scaled" in choice.note
    # gemmzoo.matmul's question (never measures) gets the same answer
    assert plan_choice(ASKED, "float32", "cpu").name == SLOW


def test_ranking_by_device_time_still_carries_the_device_winner(monkeypatch):
    forbid_measuring(monkeypatch)
    _store_decode_rows()
    choice = explain(ASKED, measure=False, by="device")
    assert choice.backend.name == FAST
    carried = {t.backend: t.median_s for t in choice.ranking}
    scale = work_ratio(ASKED, TUNED, "float32", "cpu")
    assert carried[FAST] == pytest.approx(50e-6 * scale) and carried[SLOW] == pytest.approx(60e-6 * scale)


def test_device_bound_backends_keep_their_order_at_a_larger_shape(monkeypatch):
    forbid_measuring(monkeypatch)
    basis, asked = (2048, 2048, 2048), (3000, 2500, 2800)
    state.store().add([
        dataclasses.replace(row(FAST, basis, 1e-3, 1e-6), host_s=60e-6, host_spread_s=1e-6),
        dataclasses.replace(row(SLOW, basis, 2e-3, 1e-6), host_s=10e-6, host_spread_s=1e-6),
    ])
    passed_here(FAST, SLOW)  # stored rows rank only backends that passed the suite here
    choice = explain(asked, measure=False)
    assert choice.backend.name == FAST and choice.basis == basis
    assert all(t.bound == "device" for t in choice.ranking)
    assert work_ratio(asked, basis, "float32", "cpu") == pytest.approx(3000 * 2500 * 2800 / 2048**3)


def test_gemmzoo_matmul_ranks_by_caller_time_unless_asked_for_device_time(monkeypatch):
    import numpy as np

    import gemmzoo

    forbid_measuring(monkeypatch)
    tuned, asked = (1, 640, 512), (1, 256, 256)
    state.store().add([
        dataclasses.replace(row(FAST, tuned, 50e-6, 1e-6), host_s=40e-6, host_spread_s=1e-6),
        dataclasses.replace(row(SLOW, tuned, 60e-6, 1e-6), host_s=17e-6, host_spread_s=1e-6),
    ])
    passed_here(FAST, SLOW)  # stored rows rank only backends that passed the suite here
    rng = np.random.default_rng(0)
    a = rng.standard_normal(asked[::2]).astype(np.float32)  # (M, K)
    b = rng.standard_normal(asked[:0:-1]).astype(np.float32)  # (K, N)
    for by, expected in (("caller", SLOW), ("device", FAST)):
        c = gemmzoo.matmul(a, b, by=by)
        np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)
        assert state.plan_cache.last[1].__self__.name == expected, by
    with pytest.raises(ValueError, match="by must be one of"):
        gemmzoo.matmul(a, b, by="wall")


def test_gemmzoo_matmul_never_picks_a_backend_its_arrays_reach_only_through_the_host(monkeypatch):
    """The fastest stored backend computes on arrays of no library gemmzoo exchanges with the
    caller's: gemmzoo.matmul passes it over (each call would copy both operands and the result
    through the host), best_backend still names it, and naming it still works."""
    import numpy as np
    from tuning_fakes import ForeignBackend, registry_with

    import gemmzoo
    from gemmzoo.dispatch.matmul import backend_for  # a submodule gemmzoo's namespace loads lazily

    foreign = ForeignBackend()
    restart(registry=registry_with(foreign, *current().registry.select(None)))
    shape = (24, 40, 32)
    state.store().add([row(foreign.name, shape, 1e-6, 1e-8), row(FAST, shape, 5e-5, 1e-7),
                       row(SLOW, shape, 9e-5, 1e-7)])
    passed_here(foreign.name, FAST, SLOW)
    forbid_measuring(monkeypatch)
    assert explain(shape, measure=False).backend.name == foreign.name
    choice = explain(shape, measure=False, reachable=lambda b: b.name != foreign.name)
    assert choice.backend.name == FAST and "host" in choice.excluded[foreign.name]
    rng = np.random.default_rng(5)
    a, b = rng.standard_normal((24, 32)).astype(np.float32), rng.standard_normal((32, 40)).astype(np.float32)
    assert backend_for(a, b).name == FAST
    np.testing.assert_allclose(gemmzoo.matmul(a, b), a @ b, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(gemmzoo.matmul(a, b, foreign.name), a @ b, rtol=1e-5, atol=1e-5)


def test_among_tied_backends_one_on_the_callers_own_arrays_wins(monkeypatch):
    """Two stored rows within the tie rule: the preferred order answers best_backend, but the
    backend computing on the caller's own arrays answers for gemmzoo.matmul (the other's time
    leaves out the exchange its calls would add); a clear winner elsewhere stays the winner."""
    forbid_measuring(monkeypatch)
    shape = (48, 56, 40)
    state.store().add([row(FAST, shape, 50.0e-6, 1e-8), row(SLOW, shape, 50.2e-6, 1e-8)])
    passed_here(FAST, SLOW)
    plain = explain(shape, measure=False)
    assert set(plain.tied) == {FAST, SLOW}
    preferred = plain.backend.name
    other = SLOW if preferred == FAST else FAST
    own = explain(shape, measure=False, native=lambda b: b.name == other)
    assert own.backend.name == other
    apart = (64, 56, 40)
    state.store().add([row(preferred, apart, 30e-6, 1e-8), row(other, apart, 50e-6, 1e-8)])
    assert explain(apart, measure=False, native=lambda b: b.name == other).backend.name == preferred


def _tied_with_hosts(shape: tuple[int, int, int], lighter: float, heavier: float) -> tuple[str, str]:
    """Store device times within the tie rule (50 us) at ``shape``, then the same with host times:
    ``heavier`` for the backend the preferred order picks, ``lighter`` for the other. The two
    names, preferred first."""
    state.store().add([row(FAST, shape, 50.0e-6, 1e-8), row(SLOW, shape, 50.2e-6, 1e-8)])
    passed_here(FAST, SLOW)
    preferred = explain(shape, measure=False).backend.name
    other = SLOW if preferred == FAST else FAST
    hosts = {preferred: heavier, other: lighter}
    state.store().add([dataclasses.replace(row(name, shape, median, 1e-8), host_s=hosts[name],
                                           host_spread_s=1e-7)
                       for name, median in ((FAST, 50.0e-6), (SLOW, 50.2e-6))])
    state.forget_answers()
    return preferred, other


def test_among_backends_tied_in_caller_time_the_lighter_host_wins(monkeypatch):
    """Device times within the tie rule, both above the host times but by less than a warm loop
    can gain: the backend with clearly less host work per call wins whatever the preferred order
    says; by device time the order stands."""
    forbid_measuring(monkeypatch)
    shape = (40, 48, 56)
    preferred, other = _tied_with_hosts(shape, lighter=20e-6, heavier=40e-6)
    assert explain(shape, measure=False).backend.name == other
    assert explain(shape, measure=False, by="device").backend.name == preferred


def test_host_times_far_below_tied_device_times_leave_the_order_alone(monkeypatch):
    """Host times under a third of the tied device time bound no loop of calls, warm or not:
    the lighter host shortens no wait, and the preferred order breaks the tie."""
    from gemmzoo.tuning.select import WARM_SPEEDUP_MAX

    forbid_measuring(monkeypatch)
    shape = (40, 48, 60)
    lighter = 50e-6 / WARM_SPEEDUP_MAX * 0.8
    preferred, _lighter = _tied_with_hosts(shape, lighter=lighter, heavier=lighter * 3)
    assert explain(shape, measure=False).backend.name == preferred
    assert explain(shape, measure=False, by="device").backend.name == preferred


@pytest.mark.parametrize("by", ["caller", "device"])
def test_a_tied_backend_whose_search_timed_another_is_ranked_before_it(monkeypatch, by):
    """A backend that declares it searches over another (Inductor timing ATen's mm) wins a tie with
    it whatever the preferred order says; a clearly slower one still loses."""
    forbid_measuring(monkeypatch)
    shape = (44, 52, 36)
    state.store().add([row(FAST, shape, 50.0e-6, 1e-8), row(SLOW, shape, 50.2e-6, 1e-8)])
    passed_here(FAST, SLOW)
    preferred = explain(shape, measure=False, by=by).backend.name
    other = SLOW if preferred == FAST else FAST
    monkeypatch.setattr(current().registry.get(other), "searches_over", (preferred,), raising=False)
    state.forget_answers()  # answers are kept in memory: rank again
    assert explain(shape, measure=False, by=by).backend.name == other
    # a shape answered from this one's rows: the search timed another problem, so the order stands
    assert explain((44, 52, 40), measure=False, by=by).backend.name == preferred
    apart = (60, 52, 36)
    state.store().add([row(preferred, apart, 30e-6, 1e-8), row(other, apart, 50e-6, 1e-8)])
    assert explain(apart, measure=False, by=by).backend.name == preferred


def test_torch_compile_searches_over_aten_unless_inductor_is_told_to_leave_it_out(monkeypatch):
    from gemmzoo_torch.compiled import TorchCompileBackend, TorchCompileCudaBackend

    monkeypatch.delenv("TORCHINDUCTOR_MAX_AUTOTUNE_GEMM_BACKENDS", raising=False)
    assert TorchCompileBackend().searches_over == ("torch-cpu",)
    assert TorchCompileCudaBackend().searches_over == ("torch",)
    monkeypatch.setenv("TORCHINDUCTOR_MAX_AUTOTUNE_GEMM_BACKENDS", "triton, aten")
    assert TorchCompileCudaBackend().searches_over == ("torch",)
    monkeypatch.setenv("TORCHINDUCTOR_MAX_AUTOTUNE_GEMM_BACKENDS", "TRITON")
    assert TorchCompileCudaBackend().searches_over == ()


@pytest.mark.parametrize("by", ["caller", "device"])
def test_gemmzoo_best_says_how_a_tie_is_broken(monkeypatch, capsys, by):
    from gemmzoo.cli import main

    forbid_measuring(monkeypatch)
    shape = (36, 44, 52)
    state.store().add([row(FAST, shape, 50.0e-6, 1e-8), row(SLOW, shape, 50.2e-6, 1e-8)])
    passed_here(FAST, SLOW)
    assert main(["best", "36", "44", "52", "--dtype", "float32", "--device", "cpu", "--no-measure",
                 "--by", by]) == 0
    said = " ".join(capsys.readouterr().out.split())
    assert "tie: yes" in said and "searches_over" in said
    assert ("host times also tie" in said) is (by == "caller")

