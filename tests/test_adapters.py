"""The adapters to other libraries' internals (gemmzoo/adapters/ and the plugins' own): each fails
here, loudly, when the library it reaches into changes."""

from __future__ import annotations

import json
import random
from types import SimpleNamespace

import pytest

from gemmzoo.adapters import pytest_benchmark as bench_session


def test_pytest_benchmark_is_a_tested_version_with_the_session_attributes(request):
    assert bench_session.unsupported_reason(request.config) is None


def test_pytest_benchmark_refuses_an_untested_major_version(monkeypatch):
    monkeypatch.setattr(bench_session, "version", lambda: "99.0.0")
    assert "99.0.0" in bench_session.unsupported_reason()
    assert not bench_session.supported()


def test_a_session_missing_an_attribute_is_named(monkeypatch):
    config = SimpleNamespace(_benchmarksession=SimpleNamespace(disabled=True))
    reason = bench_session.unsupported_reason(config)
    assert reason is not None and "benchmarks" in reason and "compare_fail" in reason


def test_benchmarks_survive_the_trip_from_a_worker_to_the_controller():
    rng = random.Random(7)
    data = [rng.uniform(1e-6, 1e-3) for _ in range(9)]
    sent = [{
        "name": "test_gemm[8x8x8-float32-NN-numpy]", "fullname": "t.py::test_gemm[8x8x8-float32-NN-numpy]",
        "group": "8x8x8-float32-NN", "param": "8x8x8-float32-NN-numpy", "params": {"gemm_point": "p"},
        "extra_info": {"tflops": rng.random()}, "options": {"timer": "DeviceClock"},
        "stats": {"iterations": 1, "data": data},
    }]
    controller = SimpleNamespace(_benchmarksession=SimpleNamespace(benchmarks=[]))
    assert bench_session.add_finished(controller, json.dumps(sent)) == 1
    # The controller's records read back as pytest-benchmark writes them into its JSON.
    received = controller._benchmarksession.benchmarks
    worker = SimpleNamespace(_benchmarksession=SimpleNamespace(benchmarks=received))
    (back,) = json.loads(bench_session.finished_json(worker))
    for key in ("name", "fullname", "group", "param", "params", "extra_info", "options"):
        assert back[key] == sent[0][key], key
    assert back["stats"]["data"] == data
    assert back["stats"]["median"] == pytest.approx(sorted(data)[4])
    assert back["stats"]["rounds"] == len(data)
