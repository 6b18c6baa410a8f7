"""The measuring instrument's trust features: the stopping rule, the tie rule, the thread policy
inside the timed region, the throttle flag (a pretend NVML), the nvbench adaptor (a stand-in
module) and the --devices pool's start-up overlap. CPU and the pretend GPU of tests/fake_gpu.py."""

from __future__ import annotations

import functools
import importlib.util
import json
import math
import os
import random
import statistics
import sys
import time
import types

import numpy as np
import pytest
from fake_gpu import FakeCudaBackend, FakeEvents, spend_host

from gemmzoo.contract.backend import Backend
from gemmzoo.errors import GemmError
from gemmzoo.measure import (
    ClockWatch,
    Measurement,
    StoppingRule,
    Timing,
    gpu_state,
    make_problem,
    measure,
    nvbench_timing,
    run_timing,
)
from gemmzoo.measure import threads as thread_policy
from gemmzoo.measure.clocks import nvml_watch
from gemmzoo.measure.stats import median_interval, relative_noise
from gemmzoo.measure.ties import TIE_MAX_RATIO, Estimate, rank, tied
from gemmzoo.measure.timers import cpu_samples
from gemmzoo.problems.grids import GridPoint
from gemmzoo.results.report import NOISY, TIE, verdicts
from gemmzoo.scale.bench import OK, BenchResult
from gemmzoo.scale.shards import DevicePool, core_shares
from gemmzoo.tuning.select import Timed
from gemmzoo.tuning.select import rank as select_rank

POINT = GridPoint(12, 10, 8)


class FakeClock:
    """A clock that moves only when told."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


# The stopping rule -----------------------------------------------------------------------------


def test_the_median_interval_covers_the_median_about_as_often_as_it_claims():
    rng = np.random.default_rng(7)
    sizes = (6, 15, 40, 200)
    for n in sizes:
        hits = 0
        for _ in range(400):
            samples = rng.exponential(1.0, n)  # skewed: the median is ln 2, the mean 1
            low, high = median_interval(list(samples))
            hits += low <= math.log(2) <= high
        assert 0.92 <= hits / 400 <= 1.0, (n, hits)
    assert median_interval([1.0, 2.0, 3.0, 4.0, 5.0]) is None  # five samples cannot give 95%
    assert median_interval([3.0, 1.0, 2.0, 6.0, 5.0, 4.0]) == (1.0, 6.0)  # six: the extremes
    assert relative_noise([1.0] * 5) == math.inf


def _sampled(rule: StoppingRule, clock: FakeClock, draw) -> list[float]:
    """Samples from ``draw()`` until ``rule`` stops, the clock moving 1 ms a sample."""
    samples: list[float] = []
    rule.start()
    while not rule.done(samples):
        samples.append(draw())
        clock.now += 1e-3
    return samples


def test_quiet_samples_converge_before_the_budget():
    clock = FakeClock()
    rule = StoppingRule(budget_s=1.0, target=0.02, clock=clock)
    rng = np.random.default_rng(1)
    samples = _sampled(rule, clock, lambda: 1e-3 * (1 + 0.002 * rng.standard_normal()))  # quiet
    assert rule.converged and rule.min_samples <= len(samples) < 20 and clock.now < 0.1
    timing = rule.timing(samples, "fake")
    assert timing.converged is True and not timing.noisy and timing.noise <= 0.02
    assert timing.median_s == pytest.approx(statistics.median(samples))


def test_quiet_samples_keep_sampling_until_the_minimum_time():
    """nvbench's minimum time: converged samples do not stop the rule before ``min_time_s``
    (capped by the budget), so a GPU timing spans the stretch do_bench's does."""
    rng = np.random.default_rng(2)
    for budget, min_time, expected in ((1.0, 0.1, 0.1), (0.05, 0.1, 0.05)):
        clock = FakeClock()
        rule = StoppingRule(budget_s=budget, target=0.02, min_time_s=min_time, clock=clock)
        samples = _sampled(rule, clock, lambda: 1e-3 * (1 + 0.002 * rng.standard_normal()))
        assert clock.now == pytest.approx(expected, abs=1.5e-3), (budget, min_time, clock.now)
        assert rule.timing(samples, "fake").converged is True


def test_noisy_samples_stop_at_the_budget_and_are_marked_not_converged():
    clock = FakeClock()
    rule = StoppingRule(budget_s=0.05, target=0.02, clock=clock)
    rng = np.random.default_rng(2)
    samples = _sampled(rule, clock, lambda: float(rng.lognormal(np.log(1e-3), 1.0)))  # spread over e
    assert not rule.converged and clock.now == pytest.approx(0.05, abs=1.5e-3)
    timing = rule.timing(samples, "fake")
    assert timing.converged is False and timing.noisy and timing.noise > 0.02
    assert len(samples) == timing.samples == round(0.05 / 1e-3)


def test_few_samples_always_taken_and_max_samples_stops():
    clock = FakeClock()
    rule = StoppingRule(budget_s=0.0, target=0.5, min_samples=6, max_samples=8, clock=clock)
    rule.start()
    samples: list[float] = []
    while not rule.done(samples):
        samples.append(float(len(samples) + 1))  # 1, 2, 3, ...: wide
    assert len(samples) == 6 and not rule.converged  # the budget was spent at once: the minimum
    never = StoppingRule(budget_s=1e9, target=1e-9, max_samples=8, clock=clock)
    never.start()
    samples = []
    while not never.done(samples):
        samples.append(1.0 + 0.1 * (len(samples) % 2))
    assert len(samples) == 8 and not never.converged


def test_merged_rounds_are_judged_on_all_their_samples():
    quiet = Timing.of([1.0, 1.001, 0.999, 1.0, 1.0005, 0.9995], "x", 0.02)
    wild = Timing.of([0.5, 2.0, 1.0, 3.0, 0.2, 1.5], "x", 0.02)
    assert quiet.converged and wild.noisy
    both = quiet.merged(wild)
    assert both.samples == 12 and both.target == 0.02 and both.converged == (both.noise <= 0.02)


def test_cpu_sampling_of_a_steady_call_converges():
    rule = StoppingRule(budget_s=5.0, target=0.1)
    samples = cpu_samples(lambda: spend_host(2e-4), lambda: None, rule)
    assert rule.converged, (len(samples), relative_noise(samples))
    assert rule.min_samples <= len(samples) <= rule.max_samples
    assert statistics.median(samples) == pytest.approx(2e-4, rel=0.5)


class JitteryGpu(FakeCudaBackend):
    """A pretend CUDA backend whose GEMM takes a random time (log-normal around 1 ms)."""

    def __init__(self, events: FakeEvents, sigma: float, seed: int = 0) -> None:
        super().__init__(events, gemm_s=1e-3, name="jittery")
        self.rng = np.random.default_rng(seed)
        self.sigma = sigma

    def matmul(self, a, b):
        self.gemm_s = float(self.rng.lognormal(np.log(1e-3), self.sigma))
        return super().matmul(a, b)


def test_the_fake_gpu_quiet_converges_noisy_is_marked():
    events = FakeEvents(flush_s=1e-5)
    quiet = measure(FakeCudaBackend(events, gemm_s=1e-3), POINT, budget_s=0.5, gpu=events)
    assert quiet.timing.converged is True and not quiet.noisy and quiet.timing.noise == 0.0
    events = FakeEvents(flush_s=1e-5)
    noisy = measure(JitteryGpu(events, sigma=1.5), POINT, budget_s=0.02, gpu=events)
    assert noisy.timing.converged is False and noisy.noisy and noisy.timing.noise > 0.02
    # such a row is marked noisy in bench's verdict column, never ranked silently
    row = {m.backend: BenchResult(m.backend, "cuda", POINT, OK, m) for m in (quiet, noisy)}
    row["fake-cuda"] = BenchResult("fake-cuda", "cuda", POINT, OK, quiet)
    # best never goes to a row slower than another: where the noisy row measured faster, undecided
    leader = "undecided" if noisy.caller_s < quiet.caller_s else "best"
    assert verdicts(row)["jittery"] == NOISY and verdicts(row)["fake-cuda"] == leader


# The tie rule ------------------------------------------------------------------------------------


def test_a_tie_needs_both_intervals_to_overlap():
    fast = Estimate("a", 1.00e-3, 0.01e-3)
    assert tied(fast, Estimate("b", 1.015e-3, 0.01e-3))  # 1.5% apart, ±1% each: overlap
    assert not tied(fast, Estimate("b", 1.025e-3, 0.01e-3))  # 2.5% apart: the ±1% do not reach
    assert not tied(Estimate("b", 1.025e-3, 0.01e-3), fast)  # symmetric
    assert not tied(Estimate("a", 1.0e-3, 0.0), Estimate("b", 1.03e-3, 0.0))
    assert tied(Estimate("a", 1.0e-3, 0.0), Estimate("b", 1.009e-3, 0.0))  # inside the 1% floor


def test_a_backend_ten_times_slower_is_never_a_tie():
    # the plugin case: a noisy backend, IQR 7 ms around a 1.6 ms median, against 0.16 ms
    bundled = Timed("bundled", 0.16e-3, 0.002e-3)
    plugin = Timed("plugin", 1.6e-3, 7e-3)
    winner, ordered, tied_names = select_rank([plugin, bundled])
    assert winner == "bundled" and tied_names == ("bundled",) and ordered[0].backend == "bundled"
    huge = Estimate("slow", 1.6e-3, 10.0)  # even an interval of seconds
    assert not tied(Estimate("fast", 0.16e-3, 0.0), huge)
    assert not tied(Estimate("fast", 1e-3, 1.0), Estimate("slow", 1e-3 * TIE_MAX_RATIO * 1.01, 1.0))


def test_noisy_estimates_are_not_ranked_with_converged_ones():
    ranking = rank([Estimate("noisy", 0.5e-3, 0.2e-3, converged=False), Estimate("quiet", 1e-3, 1e-6)])
    assert ranking.winner == "quiet" and ranking.noisy == ("noisy",) and ranking.tied == ("quiet",)
    alone = rank([Estimate("x", 1e-3, 1e-4, False), Estimate("y", 2e-3, 1e-4, False)])
    assert alone.winner == "x" and set(alone.noisy) == {"x", "y"}


def _result(name: str, samples: list[float]) -> BenchResult:
    timing = Timing.of(samples, "fake", 0.5)
    return BenchResult(name, "cpu", POINT, OK, Measurement(name, POINT, timing, 0.5))


def test_bench_verdicts_use_the_same_rule():
    rng = np.random.default_rng(3)
    base = list(1e-3 * (1 + 0.001 * rng.standard_normal(200)))
    near = [t * 1.005 for t in base]
    far = [t * 10 + 5e-3 * rng.random() for t in base]  # ten times slower and spread widely
    marks = verdicts({"a": _result("a", base), "b": _result("b", near), "c": _result("c", far)})
    assert marks == {"a": TIE, "b": TIE}


# The thread policy -------------------------------------------------------------------------------


class PoolSpy(Backend):
    """A CPU backend that reads the BLAS/OpenMP pools while its GEMM is timed."""

    name = "pool-spy"
    device = "cpu"
    dtypes = frozenset({"float32"})

    def __init__(self) -> None:
        self.seen: list[dict[str, int]] = []

    def from_numpy(self, x, dtype):
        return np.asarray(x, dtype=np.float32)

    def to_numpy(self, y):
        return np.array(y, copy=True)

    def matmul(self, a, b):
        self.seen.append(dict(thread_policy.pools_now()))
        return a @ b


def test_the_thread_limit_holds_inside_the_timed_region_and_is_recorded():
    threadpoolctl = pytest.importorskip("threadpoolctl")
    torch = sys.modules.get("torch")
    before = {info["internal_api"]: info["num_threads"] for info in threadpoolctl.threadpool_info()}
    torch_before = torch.get_num_threads() if torch else None
    spy = PoolSpy()
    result = measure(spy, POINT, budget_s=0.02, threads=1)
    # XLA's pool (where JAX is loaded) is out of threadpoolctl's reach: it is reported as it is
    # (see test_a_benchmark_process_is_confined_to_the_policy_cores_before_jax_starts)
    def limitable(pools):
        return {kind: count for kind, count in dict(pools).items() if kind != "xla"}

    timed = spy.seen[2:]  # the first call loads libraries; the judge's call is outside the limit
    assert timed and all(set(limitable(seen).values()) == {1} for seen in timed)
    assert result.threads is not None and result.threads.threads == 1
    assert limitable(result.threads.pools) and set(limitable(result.threads.pools).values()) == {1}
    assert result.threads.policy == "--threads 1"
    after = {info["internal_api"]: info["num_threads"] for info in threadpoolctl.threadpool_info()}
    assert after == before and (torch.get_num_threads() if torch else None) == torch_before


def test_the_default_policy_is_one_thread_on_small_machines():
    assert thread_policy.default_threads(2) == 1 and thread_policy.default_threads(3) == 1
    assert thread_policy.default_threads(4) == 4 and thread_policy.default_threads(64) == 64
    count, policy = thread_policy.resolve_threads(None)
    assert count == thread_policy.default_threads() and policy.startswith("default")
    with pytest.raises(ValueError, match="at least 1"):
        thread_policy.resolve_threads(0)


def test_bench_json_carries_noise_threads_and_clock():
    spy = PoolSpy()
    result = measure(spy, POINT, budget_s=0.02, threads=1)
    record = BenchResult("pool-spy", "cpu", POINT, OK, result).as_dict()
    assert record["threads"] == 1 and record["thread_policy"] == "--threads 1"
    assert isinstance(record["thread_pools"], dict) and record["converged"] in (True, False)
    assert record["noise_target"] == 0.02 and record["throttled"] is None
    json.dumps(record)


def test_bench_command_takes_threads_and_max_noise(tmp_path, capsys):
    from gemmzoo.cli import main

    out = tmp_path / "run.json"
    code = main(["bench", "--backend", "numpy", "--shape", "24x20x16", "--budget", "0.05", "--threads", "1",
                 "--max-noise", "0", "--json", str(out)])
    assert code == 0
    (record,) = json.loads(out.read_text())["results"]
    assert record["threads"] == 1 and record["thread_policy"] == "--threads 1"
    assert record["samples"] > 6  # the whole budget was sampled, and not judged against a target
    assert record["noise_target"] is None and record["converged"] is None and record["verdict"] == "best"
    assert main(["bench", "--backend", "numpy", "--shape", "24x20x16", "--threads", "0"]) == 2
    assert main(["bench", "--backend", "numpy", "--shape", "24x20x16", "--max-noise", "-1"]) == 2
    assert "--threads must be at least 1" in capsys.readouterr().err


# The throttle flag -------------------------------------------------------------------------------


def test_a_throttled_measurement_is_flagged():
    for clock_mhz, throttled in ((900, True), (1800, False)):
        events = FakeEvents(flush_s=1e-5)
        problem = make_problem(FakeCudaBackend(events, gemm_s=1e-3), POINT)
        watch = ClockWatch(lambda value=clock_mhz: value, default_mhz=1980)
        timed = run_timing(problem, budget_s=0.02, gpu=events, clock_watch=watch)
        assert timed.clocks is not None and timed.clocks.throttled is throttled
        assert timed.clocks.mean_sm_mhz == clock_mhz and timed.clocks.readings >= 1
        measured = Measurement("fake-cuda", POINT, timed.device, 0.1, host=timed.host, clocks=timed.clocks)
        assert measured.throttled is throttled


def test_the_clock_is_read_through_pynvml(monkeypatch):
    readings = iter([1400, 1300, 1500] + [1450] * 1000)
    fake = types.ModuleType("pynvml")
    for name, call in {
        "nvmlInit": lambda: None,
        "nvmlDeviceGetHandleByIndex": lambda index: index,
        "nvmlDeviceGetHandleByUUID": lambda uuid: 0,
        "nvmlDeviceGetClockInfo": lambda handle, kind: next(readings),
        "nvmlDeviceGetDefaultApplicationsClock": lambda handle, kind: 1980,
    }.items():
        setattr(fake, name, call)
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    gpu_state._nvml.cache_clear()
    try:
        watch = nvml_watch()
        for _ in range(3):
            watch.read()
    finally:
        gpu_state._nvml.cache_clear()
    report = watch.report()
    assert report is not None and report.default_sm_mhz == 1980 and report.min_sm_mhz == 1300
    assert report.mean_sm_mhz == pytest.approx(1400) and report.throttled is True  # < 0.75 · 1980


def test_without_nvml_nothing_is_flagged(monkeypatch):
    monkeypatch.setattr(gpu_state, "_nvml", lambda: None)
    watch = nvml_watch()
    watch.read()
    assert watch.report() is None


# The nvbench adaptor -----------------------------------------------------------------------------


def _stand_in_cuda_bench(samples: list[float]) -> tuple[types.ModuleType, dict]:
    """The part of cuda.bench's public API the adaptor uses: register, run_all_benchmarks (which
    runs the body with a State whose exec calls the launcher) and results.BenchmarkResult."""
    seen: dict = {"settings": {}, "launches": 0}
    registered: dict = {}

    class Benchmark:
        def __init__(self, body):
            self.body, self.name = body, body.__name__

        def set_name(self, name):
            registered.pop(self.name, None)
            self.name = name
            registered[name] = self
            return self

        def __getattr__(self, attribute):
            def setter(*values):
                seen["settings"][attribute] = values
                return self
            return setter

    class Launch:
        def get_stream(self):
            return "stream-token"

    class State:
        def exec(self, launcher, batched=True, sync=False):
            seen["batched"] = batched
            for _ in range(5):
                launcher(Launch())
                seen["launches"] += 1

    def run_all_benchmarks(argv):
        seen["argv"] = list(argv)
        name = argv[argv.index("--benchmark") + 1]
        registered[name].body(State())
        with open(argv[argv.index("--jsonbin") + 1], "w") as out:
            json.dump({"name": name, "samples": samples}, out)

    class BenchmarkResult:
        @classmethod
        def from_json(cls, path):
            with open(path) as handle:
                data = json.load(handle)
            state = types.SimpleNamespace(samples=data["samples"], summaries={})
            return {data["name"]: [state]}

    module = types.ModuleType("stand_in_bench")
    module.register = lambda body: Benchmark(body)
    module.run_all_benchmarks = run_all_benchmarks
    module.results = types.SimpleNamespace(BenchmarkResult=BenchmarkResult)
    return module, seen


def test_nvbench_adaptor_runs_the_call_alone_and_reads_its_samples():
    samples = list(1e-3 * (1 + 0.001 * np.random.default_rng(4).standard_normal(50)))
    module, seen = _stand_in_cuda_bench(samples)
    calls, streams = [], []

    def on_stream(stream):
        streams.append(stream)
        return __import__("contextlib").nullcontext()

    timing = nvbench_timing(lambda: calls.append(1), 0.4, 0.02, device=1, bench=module, on_stream=on_stream)
    assert timing.median_s == pytest.approx(statistics.median(samples)) and timing.samples == 50
    assert timing.converged is True and "nvbench" in timing.method
    assert len(calls) == seen["launches"] == 5 and streams == ["stream-token"] * 5
    argv = seen["argv"]
    assert argv[argv.index("--devices") + 1] == "1"
    assert argv[argv.index("--benchmark") + 1].startswith("gemmzoo-")
    assert seen["settings"]["set_stopping_criterion"] == ("stdrel",)
    assert seen["settings"]["set_criterion_param_float64"] == ("min-time", 0.1)
    assert seen["batched"] is False


def test_nvbench_timer_without_cuda_bench_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "cuda.bench", None)  # import cuda.bench raises ImportError
    events = FakeEvents(flush_s=1e-5)
    with pytest.raises(GemmError, match=r"gemmzoo\[nvbench\]"):
        measure(FakeCudaBackend(events, gemm_s=1e-3), POINT, budget_s=0.02, gpu=events, timer="nvbench")


# --devices: start-up overlapped with the sweep ---------------------------------------------------


def finish_time(folder: str, point: GridPoint) -> tuple[float, list[int], str | None]:
    """A worker's job here: leaves a file for its point, and says when it ran, on which cores,
    and the pool size it was given."""
    ran = time.time()  # before the file: the parent may see the file and ask at once
    with open(os.path.join(folder, f"{point.m}.done"), "w"):
        pass
    return ran, sorted(os.sched_getaffinity(0)), os.environ.get("OMP_NUM_THREADS")


def test_core_shares_are_disjoint_and_cover_the_host():
    assert core_shares([0, 1, 2, 3, 4], 2) == [[0, 1, 2], [3, 4]]
    assert core_shares([3, 1], 2) == [[1], [3]]
    assert core_shares([0], 2) == [[0], [0]]  # fewer cores than workers: all to each


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity"), reason="no CPU affinity on this OS")
def test_submitted_points_run_while_the_parent_is_still_busy(tmp_path):
    points = [GridPoint(8 * i, 8, 8, "float32") for i in range(1, 5)]
    pool = DevicePool(["0", "1"])
    pool.submit(functools.partial(finish_time, str(tmp_path)), points)
    deadline = time.time() + 120
    while len(list(tmp_path.glob("*.done"))) < len(points):  # the parent busy with other things
        assert time.time() < deadline, "the workers did not take the submitted points"
        time.sleep(0.1)
    asked = time.time()
    outcomes, reports = pool.run()  # every point was measured before anyone asked for results
    assert all(kind == "ok" for kind, _ in outcomes) and sum(r.points for r in reports) == len(points)
    assert all(value[0] <= asked for _, value in outcomes)
    assert all(r.ready_s is not None and 0 < r.ready_s <= r.done_s for r in reports if r.points)
    assert all(r.done_s <= asked - pool.started for r in reports if r.points)
    shares = {tuple(value[1]) for _, value in outcomes}
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) >= 2:
        assert all(set(a).isdisjoint(b) for a in shares for b in shares if a != b)
        assert {value[2] for _, value in outcomes} <= {str(len(share)) for share in core_shares(cores, 2)}
    with pytest.raises(RuntimeError, match="already submitted"):
        pool.submit(functools.partial(finish_time, str(tmp_path)), points)


def test_nvbench_timings_cross_the_process_boundary_whole():
    """cuda-bench runs once a process, so each nvbench timing comes from a child as JSON: the
    samples, and a mean-only timing, read back as they were."""
    from gemmzoo.measure.nvbench_child import timing_from_record, timing_record

    rng = random.Random(3)
    samples = [1e-3 * (1 + rng.random() / 50) for _ in range(40)]
    timing = Timing.of(samples, "nvbench cold measurement (cuda-bench)", 0.02)
    back = timing_from_record(json.loads(json.dumps(timing_record(timing))))
    assert back == timing and back.data == timing.data and back.converged is timing.converged
    mean_only = Timing(2e-3, 2e-3, 2e-3, 0, "nvbench, mean", noise=0.01, converged=True, target=0.02)
    assert timing_from_record(json.loads(json.dumps(timing_record(mean_only)))) == mean_only
    with pytest.raises(GemmError, match="no GPU here"):
        timing_from_record({"error": "no GPU here"})


def test_an_nvbench_child_without_cuda_bench_names_the_extra():
    from gemmzoo.measure.nvbench_child import timing_in_child

    pytest.importorskip("numpy")
    if importlib.util.find_spec("cuda") is not None and importlib.util.find_spec("cuda.bench") is not None:
        pytest.skip("cuda-bench is installed here")
    with pytest.raises(GemmError, match=r"gemmzoo\[nvbench\]"):
        timing_in_child("numpy", GridPoint(8, 8, 8, "float32"), 0.01, 0.02, 0)


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2,
                    reason="needs a process affinity of two cores or more")
def test_a_benchmark_process_is_confined_to_the_policy_cores_before_jax_starts():
    """XLA sizes its pool from the cores the process may use, once: confining the process to the
    policy's count before JAX is imported is the only limit that reaches it; after, nothing."""
    import subprocess

    script = ("import os, sys\n"
              "from gemmzoo.measure.threads import confine_to_policy, usable_cores\n"
              "before = usable_cores()\n"
              "print(confine_to_policy(1), len(os.sched_getaffinity(0)), usable_cores() == before,\n"
              "      confine_to_policy(1))\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["1", "1", "True", "1"]
    late = ("import sys, types\nsys.modules['jax'] = types.ModuleType('jax')\n"
            "from gemmzoo.measure.threads import confine_to_policy, pools_now\n"
            "print(confine_to_policy(1), dict(pools_now()).get('xla', 0) >= 1)\n")
    done = subprocess.run([sys.executable, "-c", late], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["None", "True"]


def test_cpu_samples_come_from_several_allocations_in_turn():
    """A CPU time depends on where the operands sit; a run samples several allocations of the
    same values in turn, so that variation lands in its own noise, not between runs."""
    from gemmzoo.measure.timers import CPU_ALLOCATIONS, run_timing
    from gemmzoo_numpy.backend import NumpyBackend

    seen: dict[int, int] = {}

    class Counting(NumpyBackend):
        name = "counting-numpy"

        def matmul(self, a, b):
            seen[b.ctypes.data] = seen.get(b.ctypes.data, 0) + 1
            return super().matmul(a, b)

    backend = Counting()
    problem = make_problem(backend, GridPoint(24, 16, 8, "float32", "NT"))
    timed = run_timing(problem, budget_s=0.05, noise_target=0.0)
    assert len(seen) == CPU_ALLOCATIONS and min(seen.values()) >= 2
    assert f"{CPU_ALLOCATIONS} allocations in turn" in timed.device.method
