"""Random conformance problems (gemmzoo.conformance.random_problems, ``gemmzoo check --random``):
reproducible, bounded, and able to fail a backend that is wrong only on problems larger than any
of the suite's CPU shapes."""

from __future__ import annotations

import random
import subprocess
import sys

import numpy as np
import pytest
from fake_distributions import run_gemmzoo, subprocess_env

from gemmzoo.conformance import check_backend, random_cases, random_problems, run_case
from gemmzoo.conformance.random_problems import KINDS, LAYOUTS, MAX_OPERAND, PROFILES, draw_shape
from gemmzoo.contract.dtypes import DTYPES
from gemmzoo_numpy import NumpyBackend


class WrongOnLargeProblems(NumpyBackend):
    """Right on every shape of the CPU suite; zeros C's last row once M·N·K passes 2e6."""

    name = "wrong-on-large-problems"

    def matmul(self, a, b):
        self.check_operands(a, b)
        c = np.matmul(a, b)
        if a.shape[0] * b.shape[1] * a.shape[1] > 2_000_000:
            c[-1] = 0
        return c


def _profile(index: int) -> str:
    return PROFILES[index % len(PROFILES)]


def test_cases_repeat_for_a_seed_and_stay_within_bounds():
    first = random_cases(["float32", "float16"], 25, seed=3, max_work=1e9)
    assert first == random_cases(["float32", "float16"], 25, seed=3, max_work=1e9)
    assert first != random_cases(["float32", "float16"], 25, seed=4, max_work=1e9)
    for case in first:
        assert case.m * case.n * case.k <= 1e9
        assert case.m * case.k <= MAX_OPERAND and case.k * case.n <= MAX_OPERAND
        assert min(case.m, case.n, case.k) >= 1
        assert case.layout in LAYOUTS and case.kind in KINDS and case.dtype in ("float32", "float16")
        if case.kind == "nonfinite":
            assert case.m >= 8 and case.n >= 9 and case.k >= 6
    decode = [c for i, c in enumerate(first) if _profile(i) == "decode"]
    assert decode and all(c.m <= 64 and c.n >= 512 and c.k >= 512 for c in decode)
    long_k = [c for i, c in enumerate(first) if _profile(i) == "long_k"]
    assert long_k and all(c.k >= 8000 and c.m <= 600 and c.n <= 600 for c in long_k)
    assert len({c.layout for c in random_cases(["float32"], 200, seed=1)}) == 9


@pytest.mark.parametrize("profile", PROFILES)
def test_a_bound_no_profile_can_meet_still_gives_a_shape_within_it(profile):
    m, n, k = draw_shape(random.Random(5), profile, max_work=50)
    assert m * n * k <= 50 and min(m, n, k) >= 1


def test_random_problems_catch_what_the_fixed_shapes_miss():
    wrong = WrongOnLargeProblems()
    cases = random_cases(["float32"], 10, seed=0, max_work=2e8)
    # one run of the suite with the random problems after it (each case is run once: the large
    # ones are seconds of float64 reference on a small machine)
    report = check_backend(wrong, dtypes=["float32"], random=10, seed=0, max_work=2e8)
    drawn = {case.id for case in cases}
    fixed = [r for r in report.results if r.check not in drawn]
    assert fixed and all(r.passed for r in fixed)  # the fixed CPU shapes are all small
    by_check = {r.check: r for r in report.results}
    assert [c.id for c in cases] == [r.check for r in report.results[-len(cases):]]
    large = [c.id for c in cases if c.m * c.n * c.k > 2_000_000]
    assert large and not any(by_check[check].passed for check in large)
    assert not report.passed
    assert {r.check for r in report.failures} == set(large)


def test_check_backend_adds_the_random_problems_after_the_suite(monkeypatch):
    drawn = []

    def recording(dtypes, count, seed, max_work):
        drawn.append((tuple(dtypes), count, seed, max_work))
        return random_cases(dtypes, count, seed, max_work)

    monkeypatch.setattr("gemmzoo.conformance.runner.random_cases", recording)
    plain = check_backend(NumpyBackend(), dtypes=["float32"])
    report = check_backend(NumpyBackend(), dtypes=["float32"], random=4, seed=9, max_work=1e6)
    assert drawn == [(("float32",), 4, 9, 1e6)]
    assert report.passed and len(report.results) == len(plain.results) + 4
    assert [r.check for r in report.results[-4:]] == [c.id for c in random_cases(["float32"], 4, 9, 1e6)]
    assert random_problems.DEFAULT_MAX_WORK == 1e8


def test_gemmzoo_check_random_runs_them(tmp_path):
    plain = run_gemmzoo(tmp_path, "check", "numpy", "--dtype", "float32")
    result = run_gemmzoo(tmp_path, "check", "numpy", "--dtype", "float32", "--random", "3", "--seed", "2")
    assert result.returncode == 0, result.stdout + result.stderr
    count = int(plain.stdout.split("numpy: ")[1].split(" checks")[0])
    assert f"numpy: {count + 3} checks, 0 failed" in result.stdout


def test_pytest_gemmzoo_random_adds_the_problems_to_the_conformance_tests(tmp_path):
    (tmp_path / "test_mine.py").write_text("from gemmzoo.testing import test_conformance  # noqa: F401\n")

    def collected(*options: str) -> list[str]:
        command = [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                   "--gemmzoo-backend", "numpy", *options]
        run = subprocess.run(command, capture_output=True, text=True, cwd=tmp_path,
                             env=subprocess_env(tmp_path), timeout=300, check=False)
        assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
        return [line for line in run.stdout.splitlines() if "::test_conformance[" in line]

    fixed = collected()
    more = collected("--gemmzoo-random", "4", "--gemmzoo-seed", "3", "--gemmzoo-max-work", "1e6")
    dtypes = [d for d in DTYPES if d in NumpyBackend().dtypes]
    assert more[:len(fixed)] == fixed
    assert more[len(fixed):] == [f"test_mine.py::test_conformance[numpy-{case.id}]"
                                 for case in random_cases(dtypes, 4, 3, 1e6)]


@pytest.mark.parametrize("name", ["triton-grouped", "triton-splitk", "triton-decode"])
def test_random_problems_conform_on_the_triton_backends_here(name):
    """Under Triton's interpreter (no GPU) the routes for small problems, with random shapes."""
    pytest.importorskip("triton")
    import gemmzoo

    backend = gemmzoo.get_backend(name)
    if backend.unavailable_reason() is not None:
        pytest.skip(backend.unavailable_reason())
    for case in random_cases(sorted(backend.dtypes), 10, seed=21, max_work=2e5):
        result = run_case(backend, case)
        assert result.passed, f"{name} {case.id}: {result.detail}"
