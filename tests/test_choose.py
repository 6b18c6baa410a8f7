"""Choosing is a pure function of the problem, the measurements, the prior and the policy."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from gemmzoo.tuning.choose import Measurements, Problem, RankPolicy, choose
from gemmzoo.tuning.db import Record
from gemmzoo.tuning.select import Timed

ROOT = Path(__file__).resolve().parents[1]
PROBLEM = Problem((64, 64, 64), "float32", "cpu")


def row(backend: str, device_s: float, host_s: float | None = None) -> Record:
    spread = None if host_s is None else host_s * 0.01
    return Record(device="cpu-x", versions="{}", backend=backend, m=64, n=64, k=64, dtype="float32",
                  layout="NN", status="ok", median_s=device_s, spread_s=device_s * 0.01, error_ratio=0.0,
                  samples=9, detail="", created=0.0, host_s=host_s, host_spread_s=spread)


def test_the_fastest_wins_and_ties_go_to_the_policy_order():
    timings = (Timed("zeta", 1.0e-3, 1e-6), Timed("alpha", 2.0e-3, 1e-6))
    decision = choose(PROBLEM, ["alpha", "zeta"], Measurements(timings))
    assert decision.winner == "zeta" and [t.backend for t in decision.ranking] == ["zeta", "alpha"]
    tied = (Timed("zeta", 1.000e-3, 2e-5), Timed("alpha", 1.002e-3, 2e-5))
    assert choose(PROBLEM, ["alpha", "zeta"], Measurements(tied)).winner == "alpha"  # by name
    preferred = RankPolicy(default_order=("zeta",))
    assert choose(PROBLEM, ["alpha", "zeta"], Measurements(tied), policy=preferred).winner == "zeta"
    assert choose(PROBLEM, ["alpha", "zeta"], Measurements(tied, native={"zeta"})).winner == "zeta"


def test_the_host_time_rule_reads_the_rows_of_the_shape_itself():
    tied = (Timed("alpha", 1.000e-3, 2e-5), Timed("zeta", 1.002e-3, 2e-5))
    rows = {"alpha": row("alpha", 1.000e-3, host_s=0.9e-3), "zeta": row("zeta", 1.002e-3, host_s=0.5e-3)}
    assert choose(PROBLEM, ["alpha", "zeta"], Measurements(tied, rows)).winner == "zeta"  # the lighter host
    assert choose(PROBLEM, ["alpha", "zeta"], Measurements(tied, rows), policy=RankPolicy(by="device")
                  ).winner == "alpha"
    far = RankPolicy(warm_speedup_max=1.5)  # the host time times 1.5 stays under the device time
    assert choose(PROBLEM, ["alpha", "zeta"], Measurements(tied, rows), policy=far).winner == "alpha"


def test_without_timings_the_prior_orders_the_default_candidates():
    candidates = ["numpy", "torch-cpu", "mine"]
    assert choose(PROBLEM, candidates, Measurements()).order == ("numpy", "torch-cpu", "mine")

    asked = []

    def prior(problem):
        asked.append((problem.shape, problem.dtype, problem.device))
        return "mine"

    decision = choose(PROBLEM, candidates, Measurements(), prior=prior)
    assert decision.winner is None and decision.order == ("mine", "numpy", "torch-cpu")
    assert asked == [((64, 64, 64), "float32", "cpu")]
    native_first = choose(PROBLEM, candidates, Measurements(native={"torch-cpu"}), prior=prior)
    assert native_first.order == ("torch-cpu", "mine", "numpy")
    broke_last = choose(PROBLEM, candidates, Measurements(broke={"mine"}), prior=prior)
    assert broke_last.order == ("numpy", "torch-cpu", "mine")

    def broken(*args):
        raise RuntimeError("no advice")

    assert choose(PROBLEM, candidates, Measurements(), prior=broken).order == ("numpy", "torch-cpu", "mine")
    not_a_name = choose(PROBLEM, candidates, Measurements(), prior=lambda problem: ["mine"])
    assert not_a_name.order == ("numpy", "torch-cpu", "mine")


def test_a_sessions_prior_decides_an_unmeasured_default(empty_cache, monkeypatch):
    import numpy as np

    import gemmzoo

    monkeypatch.setenv("GEMMZOO_BACKENDS", "numpy,torch-cpu")
    pytest.importorskip("torch")
    asked = []

    def prior(problem):
        asked.append((problem.shape, problem.dtype, problem.device))
        return "torch-cpu"

    with gemmzoo.Session(prior=prior, tune=False) as session:
        assert gemmzoo.best_backend((12, 10, 8)).name == "torch-cpu"
        a, b = np.ones((3, 4), np.float32), np.ones((4, 5), np.float32)
        # gemmzoo.matmul puts the caller's own library first, before the prior's pick
        from gemmzoo.dispatch.matmul import backend_for

        assert backend_for(a, b).name == "numpy"
    assert asked[0] == ((12, 10, 8), "float32", "cpu") and session.prior is prior
    with gemmzoo.Session(tune=False) as shipped:  # the shipped prior routes nothing here: the default order
        assert gemmzoo.best_backend((12, 10, 8)).name == "numpy"
    from gemmzoo.tuning import prior as prior_module

    assert shipped.prior is prior_module.shipped  # one hook: the shipped prior is the session's default
    with gemmzoo.Session(prior=lambda problem: None, tune=False):  # no advice: the default order alone
        assert gemmzoo.best_backend((12, 10, 8)).name == "numpy"
    # The same hook answers first where the device is known and nothing is measured near
    from gemmzoo.tuning.select import explain

    problems = []
    with gemmzoo.Session(prior=lambda problem: problems.append(problem) or "torch-cpu", tune=False):
        choice = explain((12, 10, 8), "float32", "cpu", measure=False, layout="TN", library="numpy")
    assert choice.backend.name == "torch-cpu" and choice.source == "prior"
    assert problems[0] == Problem((12, 10, 8), "float32", "cpu", "TN", "numpy", "componentwise")


def test_choosing_imports_no_framework_no_database_and_no_dispatch():
    names = _imports(ROOT / "gemmzoo" / "tuning" / "choose.py")
    assert {n for n in names if n.startswith("gemmzoo")} <= {"gemmzoo.measure", "gemmzoo.measure.ties"}
    assert not names & {"sqlite3", "torch", "cupy", "jax", "triton", "numpy", "os", "subprocess"}


def _imports(path: Path) -> set[str]:
    """Every module ``path`` imports, function-level imports included."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


@pytest.mark.parametrize(("module", "forbidden"), [
    ("gemmzoo/tuning/select.py", "gemmzoo.dispatch.matmul"),  # choosing never calls back into the call path
    ("gemmzoo/tuning/choose.py", "gemmzoo.dispatch.matmul"),
    ("gemmzoo/dispatch/autograd.py", "gemmzoo.dispatch.matmul"),  # no circle autograd <-> dispatch
    ("gemmzoo/native/__init__.py", "gemmzoo.dispatch.matmul"),  # no circle native <-> dispatch
    ("gemmzoo/dispatch/matmul.py", "gemmzoo.cli"),  # the call path never loads the command line
    ("gemmzoo/dispatch/matmul.py", "gemmzoo.scale.bench"),
    ("gemmzoo/dispatch/matmul.py", "gemmzoo.scale.shards"),
])
def test_forbidden_arrows_do_not_exist(module, forbidden):
    names = _imports(ROOT / module)
    assert not {n for n in names if n == forbidden or n.startswith(forbidden + ".")}


def test_the_core_names_no_bundled_plugin_in_choosing():
    for module in ("gemmzoo/tuning/choose.py", "gemmzoo/session.py", "gemmzoo/config.py"):
        assert not {n for n in _imports(ROOT / module) if n.startswith("gemmzoo_")}, module


@pytest.mark.parametrize("folder", ["measure", "conformance"])
def test_timing_and_checking_know_nothing_of_choosing(folder):
    for path in sorted((ROOT / "gemmzoo" / folder).rglob("*.py")):
        names = _imports(path)
        choosing = ("gemmzoo.tuning.select", "gemmzoo.tuning.choose")
        assert not {n for n in names if n.startswith(choosing)}, path


def test_choosing_and_the_call_path_import_no_os():  # settings come from the session's config
    for module in ("gemmzoo/tuning/choose.py", "gemmzoo/tuning/select.py", "gemmzoo/dispatch/matmul.py",
                   "gemmzoo/arrays/libraries.py"):
        assert "os" not in _imports(ROOT / module), module
