"""benchmarks/fuzz_conformance.py: its problems are reproducible and bounded, and its judge fails a
backend that is wrong only on problems larger than any of the suite's CPU shapes."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from gemmzoo.conformance import check_backend, run_case
from gemmzoo_numpy import NumpyBackend

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "fuzz_conformance.py"


@pytest.fixture(scope="module")
def fuzz():
    spec = importlib.util.spec_from_file_location("fuzz_conformance", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class WrongOnLargeProblems(NumpyBackend):
    """Right on every shape of the CPU suite; zeros C's last row once M·N·K passes 2e6."""

    name = "wrong-on-large-problems"

    def matmul(self, a, b):
        self.check_operands(a, b)
        c = np.matmul(a, b)
        if a.shape[0] * b.shape[1] * a.shape[1] > 2_000_000:
            c[-1] = 0
        return c


def test_cases_repeat_for_a_seed_and_stay_within_bounds(fuzz):
    first = fuzz.draw_cases(["float32", "float16"], 25, seed=3, max_work=1e9)
    assert first == fuzz.draw_cases(["float32", "float16"], 25, seed=3, max_work=1e9)
    assert first != fuzz.draw_cases(["float32", "float16"], 25, seed=4, max_work=1e9)
    for case in first:
        assert case.m * case.n * case.k <= 1e9
        assert case.m * case.k <= fuzz.MAX_OPERAND and case.k * case.n <= fuzz.MAX_OPERAND
        assert min(case.m, case.n, case.k) >= 1
        assert case.layout in fuzz.LAYOUTS and case.kind in fuzz.KINDS
        assert case.dtype in ("float32", "float16")
    decode = [c for i, c in enumerate(first) if fuzz.PROFILES[i % len(fuzz.PROFILES)] == "decode"]
    assert decode and all(c.m <= 64 for c in decode)
    long_k = [c for i, c in enumerate(first) if fuzz.PROFILES[i % len(fuzz.PROFILES)] == "long_k"]
    assert long_k and all(c.k >= 8000 and c.m <= 600 and c.n <= 600 for c in long_k)


def test_fuzzing_catches_what_the_fixed_shapes_miss(fuzz):
    wrong = WrongOnLargeProblems()
    assert check_backend(wrong, dtypes=["float32"]).passed  # the fixed CPU shapes are all small
    cases = fuzz.draw_cases(["float32"], 10, seed=0, max_work=2e8)
    results = [run_case(wrong, case) for case in cases]
    large = [r for r, c in zip(results, cases, strict=True) if c.m * c.n * c.k > 2_000_000]
    assert large and not any(r.passed for r in large)


def test_main_judges_a_right_backend_and_exits_zero(fuzz, tmp_path, capsys):
    out = tmp_path / "fuzz.json"
    assert fuzz.main(["--backends", "numpy", "--cases", "5", "--max-work", "2e6", str(out)]) == 0
    assert "5 of 5 cases conform (seed 0)" in capsys.readouterr().out
    assert out.read_text().count('"passed": true') == 5
