"""pytest-benchmark's result file of gemmzoo's benchmarks stays small, and ``gemmzoo compare`` reads it."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from known_cpu import run_options

from gemmzoo.pytest.bench import MAX_CPU_ROUNDS, RoundBudget, _cpu_rounds


def test_benchmark_json_of_fast_cpu_products_is_small_and_compare_reads_it(tmp_path):
    out = tmp_path / "out.json"
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST_")},  # a run of its own
           "GEMMZOO_CACHE_DIR": str(tmp_path / "cache"),
           "GEMMZOO_DISABLE_PLUGINS": "torch,triton,cupy,jax"}  # numpy only: a quick subprocess
    known_cpu = run_options(env)  # py-cpuinfo's probe once per test process, not once per run
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--pyargs", "gemmzoo.benchmarks", "--benchmark-only", "-q",
         "-p", "no:cacheprovider", "--gemmzoo-backend", "numpy", "--gemmzoo-shape", "16x16x16",
         "--gemmzoo-shape", "48x32x24", "--gemmzoo-dtype", "float32", "--benchmark-max-time", "0.2",
         f"--benchmark-json={out}", *known_cpu], capture_output=True, text=True, env=env, cwd=tmp_path,
        timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    data = json.loads(out.read_text())
    assert len(data["benchmarks"]) == 2
    for bench in data["benchmarks"]:
        assert 0 < len(bench["stats"]["data"]) <= MAX_CPU_ROUNDS
        assert bench["stats"]["median"] > 0
    assert out.stat().st_size < 200_000
    compared = subprocess.run([sys.executable, "-m", "gemmzoo", "compare", str(out), str(out), "--all",
                               "--format", "json"], capture_output=True, text=True, env=env, timeout=300)
    assert compared.returncode == 0, compared.stderr
    assert len(json.loads(compared.stdout)["rows"]) == 2


class _Options:
    """A pytest config's command-line options, as ``getoption`` gives them."""

    def __init__(self, **given):
        self._given = given

    def getoption(self, name, default=None):
        return self._given.get(name, default)


def test_the_round_budget_is_the_command_lines_else_pytest_benchmarks_defaults():
    assert RoundBudget.from_config(_Options()) == RoundBudget(1.0, 5) == RoundBudget()
    given = RoundBudget.from_config(_Options(benchmark_max_time="0.25", benchmark_min_rounds=9))
    assert given == RoundBudget(0.25, 9)


def test_the_cpu_rounds_follow_the_budget():
    calls = []
    iterations, rounds = _cpu_rounds(lambda: calls.append(1), RoundBudget(max_time=1e-9, min_rounds=7))
    assert rounds == 7 and iterations >= 1 and calls  # the minimum rounds whatever the time
    _, more = _cpu_rounds(lambda: calls.append(1), RoundBudget(max_time=0.5, min_rounds=1))
    assert more > 7
