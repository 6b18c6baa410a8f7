"""The timing engine, on the CPU: the CUDA paths run on a pretend GPU (tests/fake_gpu.py) with a
launch queue, whose device only works when the host has launched something, so launch gaps show
up in device time unless the engine keeps them out."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from fake_gpu import FakeCudaBackend, FakeEvents, OwnStreamBackend
from known_cpu import run_options

from gemmzoo.measure import (
    DeviceClock,
    Engine,
    Problem,
    Timing,
    interleaved_caller_timings,
    make_problem,
    measure,
    time_calls,
    time_problem,
)
from gemmzoo.measure.device import device_info, peak_key, peak_tflops
from gemmzoo.problems.grids import GridPoint
from gemmzoo.pytest.xdist import assign_worker_gpu

TESTS = Path(__file__).parent
POINT = GridPoint(12, 10, 8)


def test_device_time_leaves_out_a_launch_path_slower_than_the_gemm():
    """A call whose host path takes four times its GEMM: device time is the GEMM's alone, host
    time is the launch path's, and the caller waits for the host."""
    events = FakeEvents(flush_s=0.0002)
    backend = FakeCudaBackend(events, gemm_s=0.0005, launch_s=0.002)
    result = measure(backend, POINT, budget_s=0.03, gpu=events)
    assert result.timing.median_s == pytest.approx(0.0005, rel=1e-6)
    assert result.timing.spread_s == pytest.approx(0, abs=1e-9)
    assert 0.002 <= result.host_s < 0.02
    assert result.launch_bound and result.caller_s == result.host_s
    assert "stream hold" in result.timing.method and "without" not in result.timing.method


def test_a_backend_on_its_own_stream_is_timed_by_loops_it_synchronises():
    """Events on the caller's stream do not see work on another stream: such a backend's device
    time comes from loops of calls ended by its synchronize, never from the empty events."""
    events = FakeEvents(flush_s=0.0002)
    unseen = measure(OwnStreamBackend(events, 0.001, declared=False), POINT, budget_s=0.02, gpu=events)
    assert unseen.timing.median_s < 1e-4  # what events alone report: nothing
    # Calls long next to the few milliseconds a loaded host's scheduler adds to a loop, so that
    # load cannot push a loop past twice its work.
    result = measure(OwnStreamBackend(events, 0.005), POINT, budget_s=0.25, gpu=events)
    assert 0.005 <= result.timing.median_s < 0.01
    assert "synchronize" in result.timing.method and result.timing.samples >= 6
    assert result.caller_s >= 0.005


def test_a_long_gemm_is_device_bound():
    events = FakeEvents(flush_s=0.0002)
    backend = FakeCudaBackend(events, gemm_s=0.003)
    result = measure(backend, POINT, budget_s=0.03, gpu=events)
    assert result.timing.median_s == pytest.approx(0.003, rel=1e-6)
    assert result.host_s < 0.003 and not result.launch_bound
    assert result.caller_s == result.timing.median_s
    assert result.tflops == pytest.approx(POINT.flops / 0.003 / 1e12)


def test_calls_behind_a_hold_stay_well_inside_the_launch_queue():
    events = FakeEvents(flush_s=1e-6)
    backend = FakeCudaBackend(events, gemm_s=2e-6)  # tiny GEMMs: many calls per batch
    result = measure(backend, POINT, budget_s=0.05, gpu=events, noise_target=0)  # the whole budget
    assert result.timing.samples > 200
    assert 0 < events.max_queued < 1024  # never so many that the host would block behind the hold
    assert result.timing.median_s == pytest.approx(2e-6, rel=1e-3)


def test_a_queue_too_short_for_a_batch_falls_back_to_timing_without_a_hold():
    events = FakeEvents(flush_s=1e-5, depth=40, hold_timeout_s=0.05)
    backend = FakeCudaBackend(events, gemm_s=0.001)
    result = measure(backend, POINT, budget_s=0.03, gpu=events)
    assert "without a stream hold" in result.timing.method
    assert result.timing.median_s == pytest.approx(0.001, rel=1e-6)  # no host gap: the GEMM is longer


def test_a_call_that_synchronises_is_timed_without_a_hold_instead_of_hanging():
    events = FakeEvents(flush_s=1e-5, hold_timeout_s=0.05)
    backend = FakeCudaBackend(events, gemm_s=0.0005, syncs=True)
    result = measure(backend, POINT, budget_s=0.02, gpu=events)
    assert "without a stream hold" in result.timing.method
    assert result.timing.median_s >= 0.0005 * (1 - 1e-6) and result.timing.samples >= 3


def test_without_a_hold_kernel_the_method_says_so():
    events = FakeEvents(flush_s=1e-5, holds=False)
    backend = FakeCudaBackend(events, gemm_s=0.0005, launch_s=0.002)
    device, host = time_calls(make_problem(backend, POINT), budget_s=0.02, gpu=events)
    assert "without a stream hold" in device.method
    assert device.median_s > 0.0005  # the launch gaps the hold would have kept out
    assert host.median_s >= 0.002


def test_engine_batch_samples_each_call():
    events = FakeEvents()
    samples = Engine(events).batch(lambda: events.run(0.0025), 4)
    assert samples == pytest.approx([0.0025] * 4, rel=1e-6)
    assert events.syncs == 1 and events.flushes == 4


def test_device_clock_moves_by_the_median_device_time_of_a_batch():
    events = FakeEvents(flush_s=0.010)
    clock = DeviceClock(events)
    durations = iter([0.002, 0.009, 0.001, 0.002, 0.003] * 50)  # one slow call per batch
    target = clock.wrap(lambda: events.run(next(durations)), calls=5)
    start = clock()
    events.run(0.5)  # device work outside the batches is not counted
    target()
    assert clock() - start == pytest.approx(0.002, rel=1e-6)  # the median of 2, 9, 1, 2, 3 ms (mean 3.4)
    target()
    assert clock() - start == pytest.approx(0.004, rel=1e-6)
    clock.finish()
    assert clock.batches == 2 and events.flushes == 15  # the batch queued ahead ran too, and was dropped


def test_a_stream_keeps_the_next_batch_queued_and_the_gpu_busy():
    """A launch path slower than the GEMM: within a batch the calls still run back to back, and
    the next batch is queued behind its hold before the host waits for the one running."""
    events = FakeEvents(flush_s=1e-4)
    backend = FakeCudaBackend(events, gemm_s=0.0004, launch_s=0.001)
    problem = make_problem(backend, POINT)
    batches = Engine(events).stream(lambda: backend.matmul(problem.a, problem.b), 8)
    first, second = next(batches), next(batches)
    batches.close()
    assert first == pytest.approx([0.0004] * 8, rel=1e-6) and second == pytest.approx([0.0004] * 8, rel=1e-6)
    assert events.max_queued >= 8 * 4  # a whole batch waited behind a hold


def test_device_clock_without_flush():
    events = FakeEvents()
    clock = DeviceClock(events)
    clock.wrap(lambda: events.run(0.002), flush=False)()
    assert clock() == pytest.approx(0.002, rel=1e-6)
    clock.finish()
    assert events.flushes == 0


def test_interleaved_caller_timings_take_the_backends_in_turn():
    """Two launch-bound backends, one with twice the launch path of the other: every round times a
    loop of each, alternating which goes first, and the medians keep them apart."""
    events = FakeEvents(flush_s=1e-5)
    slow = FakeCudaBackend(events, gemm_s=0.0002, launch_s=0.002, name="slow")
    fast = FakeCudaBackend(events, gemm_s=0.0002, launch_s=0.001, name="fast")
    order = []
    for backend in (slow, fast):
        matmul = backend.matmul

        def traced(a, b, matmul=matmul, name=backend.name):
            if not order or order[-1] != name:
                order.append(name)
            return matmul(a, b)

        backend.matmul = traced
    problems = [make_problem(slow, POINT), make_problem(fast, POINT)]
    slow_t, fast_t = interleaved_caller_timings(problems, [0.002, 0.001], rounds=4)
    assert slow_t.samples == fast_t.samples == 4 and "4 interleaved rounds" in slow_t.method
    assert 0.002 <= slow_t.median_s < 0.02 and 0.001 <= fast_t.median_s < slow_t.median_s
    # warm-up slow, fast; then rounds slow fast | fast slow | slow fast | fast slow
    assert order == ["slow", "fast", "slow", "fast", "slow", "fast", "slow"]


def test_measure_records_times_the_contenders_loops_in_interleaved_rounds(monkeypatch):
    import importlib

    tune_module = importlib.import_module("gemmzoo.tuning.tune")
    events = FakeEvents(flush_s=1e-5)
    monkeypatch.setattr("gemmzoo.measure.gpu_stream.default_gpu", lambda: events)
    # A loaded host stretches the launch paths' wall time many times over: the loop limit and the
    # long GEMM sit far above anything load makes of them, so that load cannot change who contends.
    loops = tune_module.LoopPolicy(limit_s=0.05)
    slow = FakeCudaBackend(events, gemm_s=0.0002, launch_s=0.0006, name="slow")
    fast = FakeCudaBackend(events, gemm_s=0.0002, launch_s=0.0003, name="fast")
    long = FakeCudaBackend(events, gemm_s=0.1, name="long")  # far slower on the device: no loops
    settled = []
    real = tune_module.measure_record

    def first_pass(backend, point, budget_s, verify, *rest):
        record = real(backend, point, budget_s, verify, *rest)
        settled.append((backend.name, record.host_s))
        return record

    monkeypatch.setattr(tune_module, "measure_record", first_pass)
    calls = []
    from gemmzoo import measure as measure_module

    real_rounds = measure_module.interleaved_caller_timings

    def spy(problems, device_s, *args, **kwargs):
        calls.append([p.backend.name for p in problems])
        return real_rounds(problems, device_s, *args, **kwargs)

    monkeypatch.setattr(measure_module, "interleaved_caller_timings", spy)
    records = tune_module.measure_records([slow, fast, long], POINT, budget_s=0.02, verify=True, loops=loops)
    assert calls == [["fast", "slow"]]  # the contenders, fastest caller time first
    by_name = {r.backend: r for r in records}
    assert by_name["slow"].loop_s > by_name["fast"].loop_s >= fast.launch_s
    assert by_name["long"].loop_s is None and by_name["long"].loop_spread_s is None
    assert {r.backend: r.host_s for r in records} == dict(settled)  # host times kept as measured
    assert all(r.status == "ok" for r in records) and len({r.created for r in records}) == 1


def test_time_problem_cpu_path_is_wall_time():
    class Slow:
        name, device, dtypes = "slow", "cpu", frozenset({"float32"})

        def matmul(self, a, b):
            import time

            time.sleep(0.002)

        def synchronize(self):
            pass

    problem = Problem(Slow(), GridPoint(1, 1, 1), None, None, None, None)
    timing = time_problem(problem, budget_s=0.02, warmup=0)
    assert 0.002 <= timing.median_s < 0.05
    assert timing.q1_s <= timing.median_s <= timing.q3_s


def test_unknown_timer_is_refused():
    events = FakeEvents()
    with pytest.raises(ValueError, match="do_bench"):
        time_calls(make_problem(FakeCudaBackend(events), POINT), timer="stopwatch", gpu=events)


def test_rounds_merge_their_samples():
    first, second = Timing.of([1.0, 2.0, 3.0], "m"), Timing.of([4.0, 5.0], "m")
    merged = first.merged(second)
    assert merged.samples == 5 and merged.median_s == 3.0 and merged.q1_s == 2.0 and merged.q3_s == 4.0


def test_each_xdist_worker_gets_its_own_gpu():
    env = {"PYTEST_XDIST_WORKER": "gw1"}
    assert assign_worker_gpu(env, device_files=["/dev/nvidia0", "/dev/nvidia1"]) == "1"
    assert env["CUDA_VISIBLE_DEVICES"] == "1"
    env = {"PYTEST_XDIST_WORKER": "gw1", "CUDA_VISIBLE_DEVICES": "4,6"}
    assert assign_worker_gpu(env) == "6"
    env = {"PYTEST_XDIST_WORKER": "gw2", "CUDA_VISIBLE_DEVICES": "4,6"}
    with pytest.warns(UserWarning, match="sharing GPU 4"):
        assert assign_worker_gpu(env) == "4"
    env = {"CUDA_VISIBLE_DEVICES": "3"}
    assert assign_worker_gpu(env) is None and env["CUDA_VISIBLE_DEVICES"] == "3"  # not a worker
    env = {"PYTEST_XDIST_WORKER": "gw0"}
    assert assign_worker_gpu(env, device_files=[]) is None and "CUDA_VISIBLE_DEVICES" not in env


def test_peak_table():
    assert peak_tflops("NVIDIA H100 80GB HBM3", "float16") == 989
    assert peak_tflops("NVIDIA H100 80GB HBM3", "tf32") == 495
    assert peak_tflops("NVIDIA H200", "float32") == 67
    assert peak_tflops("NVIDIA H100 PCIe", "float16") is None  # another part, other peaks
    assert peak_key("NVIDIA A100-SXM4-80GB") is None
    assert peak_tflops("AMD EPYC", "float32") is None


def test_cpu_device_info_has_versions():
    info = device_info("cpu")
    assert info["device_name"] and info["driver"] is None
    assert info["libraries"]["numpy"] and info["libraries"]["python"]


FAKE_BENCH = '''
import pytest
from fake_gpu import FakeCudaBackend, FakeEvents, OwnStreamBackend
from gemmzoo.problems.grids import GridPoint
from gemmzoo.measure import DeviceClock
from gemmzoo.pytest.bench import run_benchmark

EVENTS = FakeEvents(flush_s=0.020)
CLOCK = DeviceClock(EVENTS)


@pytest.fixture(autouse=True, scope="module")
def _verdicts_of_the_pretend_gpu():
    # A "cuda" backend's suite adds GPU-sized cases (up to 4544 cubed), minutes of NumPy on a
    # host: the pretend backends are given their verdicts instead, so the wrong one is caught by
    # the check of the benchmarked problem itself. The suite-first path has tests of its own.
    from gemmzoo.conformance.runner import CheckResult, ConformanceReport
    from gemmzoo.tuning.verdicts import store_report

    for backend in (FakeCudaBackend(EVENTS), FakeCudaBackend(EVENTS, name="wrong-cuda", wrong=True)):
        given = CheckResult(backend.name, "float32-given-by-the-test", True)
        assert store_report(backend, ConformanceReport(backend.name, [given]), ["float32"])

@pytest.mark.benchmark(timer=CLOCK, group="fake")
def test_fake_gpu(benchmark):
    run_benchmark(benchmark, FakeCudaBackend(EVENTS, gemm_s=0.003), GridPoint(24, 16, 8), clock=CLOCK)
    benchmark.extra_info["batches"] = CLOCK.batches

def test_fake_gpu_without_the_clock_as_timer(benchmark):
    run_benchmark(benchmark, FakeCudaBackend(EVENTS, gemm_s=0.003), GridPoint(24, 16, 8), clock=CLOCK)

@pytest.mark.benchmark(timer=CLOCK, group="fake")
def test_wrong_fake_gpu(benchmark):
    run_benchmark(benchmark, FakeCudaBackend(EVENTS, name="wrong-cuda", wrong=True), GridPoint(24, 16, 8),
                  clock=CLOCK)

@pytest.mark.benchmark(timer=CLOCK, group="instant")
def test_instant_fake_gpu(benchmark):  # a GEMM whose device time reads 0 still ends its warm-up
    run_benchmark(benchmark, FakeCudaBackend(EVENTS, gemm_s=0.0), GridPoint(24, 16, 8), clock=CLOCK)
'''


def test_device_clock_inside_pytest_benchmark(tmp_path):
    """A real pytest-benchmark run on the pretend GPU: every sample is exactly the GEMM's device
    time (not the flush, not the host time), several GEMMs and one sync per round; a wrong backend
    fails."""
    (tmp_path / "test_fake_bench.py").write_text(textwrap.dedent(FAKE_BENCH))
    out = tmp_path / "out.json"
    env = {key: value for key, value in os.environ.items() if not key.startswith("PYTEST_XDIST_")}
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])
    env["GEMMZOO_CACHE_DIR"] = str(tmp_path / "cache")
    known_cpu = run_options(env)  # py-cpuinfo's probe once per test process, not once per run
    run = subprocess.run(
        [sys.executable, "-m", "pytest", str(tmp_path), "-p", "no:cacheprovider", "-q", "--benchmark-only",
         "--benchmark-max-time=0.05", f"--benchmark-json={out}", "--rootdir", str(tmp_path), *known_cpu],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120,
    )
    assert "2 failed, 2 passed" in run.stdout, run.stdout + run.stderr
    assert "WrongResultError" in run.stdout and "wrong-cuda" in run.stdout
    # given a pass, the wrong backend is caught by the check of the benchmarked problem itself
    assert "WrongResultError: wrong-cuda: 24x16x8-float32-NN: 1 of 384 elements outside" in run.stdout
    assert "TimerNotSetError" in run.stdout
    data = json.loads(out.read_text())
    names = {b["name"] for b in data["benchmarks"]}
    assert "test_wrong_fake_gpu" not in names  # the wrong backend is not reported as a speed
    [bench] = [b for b in data["benchmarks"] if b["name"] == "test_fake_gpu"]
    stats = bench["stats"]
    assert stats["data"] == pytest.approx([0.003] * len(stats["data"]), rel=1e-6)
    assert stats["median"] == pytest.approx(0.003, rel=1e-6) and stats["rounds"] >= 5
    assert stats["iterations"] == 1 and info_calls(bench) > 1  # a round: one batch of many GEMMs
    assert "DeviceClock" in bench["options"]["timer"]
    info = bench["extra_info"]
    assert info["tflops"] == pytest.approx(2 * 24 * 16 * 8 / 0.003 / 1e12, rel=1e-6)
    assert 0 < info["host_s"] < 0.003 and info["caller_s"] == pytest.approx(0.003, rel=1e-6)
    assert info["launch_bound"] is False and info["gbps"] > 0
    assert info["m"] == 24 and info["n"] == 16 and info["k"] == 8 and info["layout"] == "NN"
    assert 0 <= info["error_ratio"] <= 1
    # one batch per round, plus a fixed few for warm-up and sizing
    assert stats["rounds"] <= info["batches"] <= stats["rounds"] + 20


def info_calls(bench):
    return bench["extra_info"]["calls_per_round"]


def test_benchmark_params_carry_group_and_device_clock():
    from gemmzoo.pytest.bench import DEVICE_CLOCK, benchmark_params, point_from_id

    class Cpu(FakeCudaBackend):
        device = "cpu"

    class Missing(FakeCudaBackend):
        def unavailable_reason(self):
            return "no such GPU here"

    points = [GridPoint(4, 5, 6), GridPoint(4, 5, 6, "float16", "TN")]
    params = benchmark_params([FakeCudaBackend(FakeEvents()), Cpu(FakeEvents(), name="fake-cpu"),
                               Missing(FakeEvents(), name="missing")], points)
    by_id = {p.id: p for p in params}
    assert set(by_id) == {"4x5x6-float32-NN-fake-cuda", "4x5x6-float32-NN-fake-cpu", "missing-unavailable"}
    cuda_mark = by_id["4x5x6-float32-NN-fake-cuda"].marks[0]
    assert cuda_mark.kwargs == {"group": "4x5x6-float32-NN", "timer": DEVICE_CLOCK}
    assert by_id["4x5x6-float32-NN-fake-cpu"].marks[0].kwargs == {"group": "4x5x6-float32-NN"}
    assert "no such GPU here" in by_id["missing-unavailable"].marks[0].kwargs["reason"]
    assert by_id["4x5x6-float32-NN-fake-cuda"].values == ("fake-cuda", "4x5x6-float32-NN")
    assert point_from_id("4x5x6-float16-TN") == points[1]


def test_a_stream_hold_opens_on_release_or_after_its_watchdog():
    import time

    import numpy as np

    from gemmzoo.measure.gpu_stream import StreamHold

    flag, seen = np.ones(1, np.int32), []
    hold = StreamHold(flag, lambda: seen.append(int(flag[0])), timeout_s=5.0)
    assert seen == [0] and flag[0] == 0  # armed before the kernel is launched
    hold.release()
    assert flag[0] == 1 and not hold.expired
    stuck = np.zeros(1, np.int32)
    forgotten = StreamHold(stuck, lambda: None, timeout_s=0.02)
    deadline = time.perf_counter() + 5
    while stuck[0] == 0 and time.perf_counter() < deadline:
        time.sleep(0.005)
    assert stuck[0] == 1 and forgotten.expired  # the watchdog opened it
    forgotten.release()
    assert forgotten.expired
