"""The timing logic, on the CPU: the device clock and CUDA-event paths run on a pretend GPU whose
clock only moves by known amounts, so the expected numbers are exact."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from fake_gpu import FakeCudaBackend, FakeEvents

from gemmzoo.device import device_info, peak_key, peak_tflops
from gemmzoo.grids import GridPoint
from gemmzoo.measure import HEAD_START_S, CudaEventTimer, DeviceClock, Problem, prepare, time_problem
from gemmzoo.pytest_bench import assign_worker_gpu, cuda_rounds

TESTS = Path(__file__).parent


def test_device_clock_counts_only_the_wrapped_call():
    events = FakeEvents(flush_s=0.010)
    clock = DeviceClock(events)
    target = clock.wrap(lambda: events.run(0.003))
    start = clock()
    events.run(0.5)  # device work outside the wrapper is not counted
    target()
    target()
    assert clock() - start == pytest.approx(0.006, rel=1e-12)
    assert events.flushes == 2  # the flush ran, before each call, outside the event pair


def test_device_clock_syncs_once_per_read_and_only_when_something_is_pending():
    events = FakeEvents()
    clock = DeviceClock(events)
    target = clock.wrap(lambda: events.run(0.001))
    clock()
    clock()
    assert events.syncs == 0
    for _ in range(5):
        target()
    assert events.syncs == 0  # no sync per call
    clock()
    assert events.syncs == 1 and clock.syncs == 1
    clock()
    assert events.syncs == 1


def test_device_clock_without_flush():
    events = FakeEvents()
    clock = DeviceClock(events)
    clock.wrap(lambda: events.run(0.002), flush=False)()
    assert clock() == pytest.approx(0.002) and events.flushes == 0


def test_device_clock_as_pytest_benchmark_runs_it():
    """pytest-benchmark's runner reads the timer before and after a round of `iterations` calls and
    divides the difference by `iterations`; with the device clock that is device time per GEMM."""
    from pytest_benchmark.fixture import BenchmarkFixture

    events = FakeEvents()
    clock = DeviceClock(events)
    fixture = BenchmarkFixture.__new__(BenchmarkFixture)
    fixture._timer, fixture._disable_gc = clock, False
    runner = fixture._make_runner(clock.wrap(lambda: events.run(0.004)), (), {})
    assert runner(range(10)) == pytest.approx(0.040)
    duration, _result = runner(None)
    assert duration == pytest.approx(0.004)
    assert events.syncs == 2  # one per round


def test_cuda_event_timer_on_the_fake_device():
    events = FakeEvents()
    samples = CudaEventTimer(events).batch(lambda: events.run(0.0025), 4)
    assert samples == pytest.approx([0.0025] * 4)
    assert events.syncs == 1 and events.flushes == 4


def test_time_problem_cuda_path_reports_device_time():
    events = FakeEvents(flush_s=0.05)
    backend = FakeCudaBackend(events, gemm_s=0.0007)
    problem = prepare(backend, GridPoint(8, 8, 8))
    timing = time_problem(problem, budget_s=0.01, events=events)
    assert timing.method.startswith("cuda-events")
    assert timing.median_s == pytest.approx(0.0007) and timing.spread_s == pytest.approx(0, abs=1e-12)
    assert timing.samples >= 3


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


def test_cuda_rounds_fit_the_wall_budget():
    assert cuda_rounds(0.001, 1.0, 5) == (50, 20)  # 20 ms rounds of 20 calls
    assert cuda_rounds(0.05, 1.0, 5) == (20, 1)  # a call longer than a round: one per round
    assert cuda_rounds(1.0, 1.0, 5) == (5, 1)  # at least min_rounds
    assert cuda_rounds(1e-9, 10_000.0, 5) == (100_000, 20_000_000)  # rounds capped


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
from fake_gpu import FakeCudaBackend, FakeEvents
from gemmzoo.grids import GridPoint
from gemmzoo.measure import DeviceClock
from gemmzoo.pytest_bench import run_benchmark

EVENTS = FakeEvents(flush_s=0.020)
CLOCK = DeviceClock(EVENTS)

@pytest.mark.benchmark(timer=CLOCK, group="fake")
def test_fake_gpu(benchmark):
    run_benchmark(benchmark, FakeCudaBackend(EVENTS, gemm_s=0.003), GridPoint(24, 16, 8), clock=CLOCK)
    benchmark.extra_info["syncs"] = CLOCK.syncs

@pytest.mark.benchmark(timer=CLOCK, group="fake")
def test_wrong_fake_gpu(benchmark):
    run_benchmark(benchmark, FakeCudaBackend(EVENTS, name="wrong-cuda", wrong=True), GridPoint(24, 16, 8),
                  clock=CLOCK)
'''


def test_device_clock_inside_pytest_benchmark(tmp_path):
    """A real pytest-benchmark run on the pretend GPU: every sample is exactly the GEMM's device
    time (not the flush, not the host time), several GEMMs and one sync per round; a wrong backend
    fails."""
    (tmp_path / "test_fake_bench.py").write_text(textwrap.dedent(FAKE_BENCH))
    out = tmp_path / "out.json"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]))
    run = subprocess.run(
        [sys.executable, "-m", "pytest", str(tmp_path), "-p", "no:cacheprovider", "-q", "--benchmark-only",
         "--benchmark-max-time=0.05", f"--benchmark-json={out}", "--rootdir", str(tmp_path)],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120,
    )
    assert "1 failed, 1 passed" in run.stdout, run.stdout + run.stderr
    assert "WrongResultError" in run.stdout and "wrong-cuda" in run.stdout
    data = json.loads(out.read_text())
    [bench] = data["benchmarks"]  # the wrong backend is not reported as a speed
    stats = bench["stats"]
    assert stats["data"] == pytest.approx([0.003] * len(stats["data"]), rel=1e-9)
    assert stats["median"] == pytest.approx(0.003, rel=1e-9) and stats["rounds"] >= 5
    assert stats["iterations"] > 1  # the fake's calls take microseconds of wall: many to a 20 ms round
    assert "DeviceClock" in bench["options"]["timer"]
    info = bench["extra_info"]
    assert info["tflops"] == pytest.approx(2 * 24 * 16 * 8 / 0.003 / 1e12)
    assert info["m"] == 24 and info["n"] == 16 and info["k"] == 8 and info["layout"] == "NN"
    assert 0 <= info["error_ratio"] <= 1
    # one sync per round measured, plus a fixed few for warm-up and calibration reads
    assert stats["rounds"] <= info["syncs"] <= stats["rounds"] + 20


def test_benchmark_params_carry_group_and_device_clock():
    from gemmzoo.pytest_bench import DEVICE_CLOCK, benchmark_params, point_from_id

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


def test_the_pacer_asks_for_a_spin_only_when_the_launch_outlasts_the_flush_and_gemm():
    from gemmzoo.measure import LaunchPacer

    pacer = LaunchPacer(flush_s=85e-6)
    assert pacer.spin_s() == 0.0  # nothing launched yet
    pacer.note_launch(20e-6)  # a fast launch path: the flush covers it
    assert pacer.spin_s() == 0.0
    slow = LaunchPacer(flush_s=85e-6)
    slow.note_launch(300e-6)  # a launch that waited for a full queue ...
    slow.note_launch(70e-6)  # ... counts as its shortest
    slow.note_gemm(29e-6)
    assert slow.spin_s() == pytest.approx(2 * 70e-6 - 85e-6 - 29e-6)
    slow.note_gemm(120e-6)  # a sample the GPU idled in (no spin yet) does not shrink the spin
    assert slow.spin_s() == pytest.approx(2 * 70e-6 - 85e-6 - 29e-6)
    long = LaunchPacer(flush_s=85e-6)
    long.note_launch(70e-6)
    long.note_gemm(200e-6)  # a long GEMM keeps the GPU busy itself
    assert long.spin_s() == 0.0
    # after a synchronisation: a head start for GEMMs shorter than the flush (or not yet timed)
    assert long.spin_s(drained=True) == 0.0
    assert pacer.spin_s(drained=True) == HEAD_START_S
    pacer.note_gemm(29e-6)
    assert pacer.spin_s(drained=True) == HEAD_START_S and pacer.spin_s() == 0.0


def test_slow_launch_paths_get_a_gpu_spin_before_the_flush_outside_the_events():
    events = FakeEvents(flush_s=0.001)

    def slow_launch():
        time.sleep(0.005)  # host time of the launch path, far over flush + GEMM
        events.run(0.002)

    clock = DeviceClock(events)
    target = clock.wrap(slow_launch)
    start = clock()
    for _ in range(3):
        target()
    total = clock() - start
    # nothing known before the first launch: only the head start after the (first) clock read
    assert events.spins[0] == HEAD_START_S
    assert all(spin >= 2 * 0.005 - 0.001 - 0.002 for spin in events.spins[1:])
    assert total == pytest.approx(3 * 0.002)  # spins, like flushes, are outside the events

    timer = CudaEventTimer(FakeEvents(flush_s=0.001))
    fast = timer.batch(lambda: timer.events.run(0.002), 4)
    assert fast == pytest.approx([0.002] * 4)
    assert timer.events.spins == [HEAD_START_S, 0.0, 0.0, 0.0]  # a head start, then no spins
    short = FakeEvents(flush_s=0.004)
    short_clock = DeviceClock(short)
    short_target = short_clock.wrap(lambda: short.run(0.002))  # shorter than the flush
    for _ in range(2):
        short_clock()
        short_target()
        short_target()
    assert short.spins == [HEAD_START_S, 0.0] * 2  # a head start after each read of the clock


def test_gc_is_paused_while_cuda_samples_are_taken_and_restored_after():
    import gc

    from gemmzoo.measure import gc_paused

    seen = []

    class GcWatchingBackend(FakeCudaBackend):
        def matmul(self, a, b):
            seen.append(gc.isenabled())
            return super().matmul(a, b)

    events = FakeEvents()
    backend = GcWatchingBackend(events)
    problem = prepare(backend, GridPoint(8, 8, 8))
    assert gc.isenabled()
    time_problem(problem, budget_s=0.0, warmup=0, events=events)
    assert seen and not any(seen) and gc.isenabled()
    gc.disable()
    try:
        with gc_paused():
            pass
        assert not gc.isenabled()  # left as the caller had it
    finally:
        gc.enable()
