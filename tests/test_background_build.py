"""The compiled dispatch built in the background on first use (gemmzoo.native.background), with
stand-in builds (tests/fake_builds.py) in a real background process: started on a new problem of
tensors that start a build, once; not started while another runs (another session waits for it);
a failure recorded, said by ``gemmzoo cache`` and ``gemmzoo list -v``, and not tried again by
itself; the process switched to the build at a later new problem, every product checked against
NumPy's on random data; nothing started for CPU tensors, under ``on``/``off``, or without a
compiler."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from sessions import reconfigure  # noqa: E402

import gemmzoo  # noqa: E402
from gemmzoo import native  # noqa: E402
from gemmzoo.dispatch import matmul as dispatch  # noqa: E402
from gemmzoo.native import background  # noqa: E402

pytestmark = pytest.mark.usefixtures("empty_cache")
TESTS = Path(__file__).resolve().parent
BUILDS_FOR = dispatch._builds_for  # the real one: CUDA tensors start a build, CPU tensors do not


@pytest.fixture
def auto(monkeypatch, tmp_path):
    """``compiled_dispatch="auto"`` in a fresh session of the test's empty cache, the Python
    dispatch in use, every torch tensor starting a build (CPU tensors do not, by themselves), the
    stand-in builds importable by the build process, and a gate file that holds them."""
    monkeypatch.setenv(native.ENV_SWITCH, "auto")
    path = os.pathsep.join(filter(None, (str(TESTS), os.environ.get("PYTHONPATH"))))
    monkeypatch.setenv("PYTHONPATH", path)
    gate = tmp_path / "gate"
    monkeypatch.setenv("FAKE_BUILD_GATE", str(gate))
    monkeypatch.setattr(dispatch, "_builds_for", lambda x: True)
    monkeypatch.setattr(native, "toolchain_missing", lambda: None)
    dispatch.use_compiled(None)
    session = reconfigure()
    yield session, gate
    dispatch.use_compiled(None)
    watch = session.compiled_build
    if watch is not None and watch.process is not None:  # never left running past its test
        gate.touch()
        watch.process.wait(timeout=60)


def checked_product(m: int, n: int, k: int, seed: int, device: str = "cpu") -> None:
    """``gemmzoo.matmul`` of random float32 operands, every element checked against NumPy's."""
    rng = np.random.default_rng(seed)
    x, y = rng.standard_normal((m, k)).astype(np.float32), rng.standard_normal((k, n)).astype(np.float32)
    got = gemmzoo.matmul(torch.from_numpy(x).to(device), torch.from_numpy(y).to(device))
    expected = x.astype(np.float64) @ y.astype(np.float64)
    np.testing.assert_allclose(got.cpu().numpy(), expected, rtol=1e-4, atol=1e-4 * np.sqrt(k))


def wait_for(condition, seconds: float = 60.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_a_build_is_started_once_and_switched_to_at_a_later_new_problem(auto, compiled_dispatch_module,
                                                                        monkeypatch):
    session, gate = auto
    session.compiled_build = background.Watch(check_every_s=0.05, builder="fake_builds:copy_prebuilt")
    monkeypatch.setenv("FAKE_BUILD_PREBUILT", compiled_dispatch_module.__file__)
    checked_product(5, 7, 3, seed=0)  # the first product: the build starts, the product goes on
    watch = session.compiled_build
    process = watch.process
    assert process is not None and not dispatch._ROUTES
    _name, directory = native.build_directory()
    wait_for(lambda: native.building(directory))  # the build process holds the lock
    assert "being built now" in native.status().reason
    seed = 1
    for _ in range(3):  # new problems while it builds: through Python, no second build
        time.sleep(0.06)
        checked_product(4 + seed, 6, 5, seed)
        seed += 1
    assert watch.process is process and not dispatch._ROUTES
    with gemmzoo.Session() as other:  # another session of the cache (as another process): no second build
        checked_product(7, 5, 4, seed=seed)
    assert other.compiled_build.process is None and not other.compiled_build.finished  # it waits for that one
    assert os.getpgid(process.pid) != os.getpgid(0)  # its own process group: the caller's Ctrl-C misses it
    gate.touch()
    process.wait(timeout=60)
    assert process.returncode == 0, (directory / native.BACKGROUND_LOG).read_text()
    assert "fake build" in (directory / native.BACKGROUND_LOG).read_text()
    checked_product(5, 7, 3, seed=0)  # a problem met before: the hot path, nothing looked at
    assert not dispatch._ROUTES
    while not dispatch._ROUTES:  # the next new problems: switched to the build
        time.sleep(0.06)
        checked_product(9, 2 + seed, 4, seed)
        seed += 1
    assert watch.finished and dispatch._ROUTES[torch.Tensor].__self__.__file__ == str(
        native.status().path)
    for again in range(seed + 3):  # met before and new, through the compiled dispatch
        checked_product(4 + again % 5, 6 + again % 3, 5, again)
    assert native.status().built


def test_a_failed_build_is_recorded_said_and_not_started_again(auto, capsys):
    session, gate = auto
    session.compiled_build = background.Watch(check_every_s=0.05, builder="fake_builds:fail")
    gate.touch()
    checked_product(6, 5, 4, seed=0)
    process = session.compiled_build.process
    process.wait(timeout=60)
    assert process.returncode == 1
    seed = 1
    while not session.compiled_build.finished:  # the next new problem finds it ended
        time.sleep(0.06)
        checked_product(6, 5 + seed, 4, seed)
        seed += 1
    assert "no input files (a fake build)" in session.compiled_build.why and not dispatch._ROUTES
    reason = native.status().reason
    assert "background build failed" in reason and "a fake build" in reason and "--build-dispatch" in reason

    from gemmzoo.cli import main

    assert main(["cache", "--format", "json"]) == 0
    assert "a fake build" in json.loads(capsys.readouterr().out)[0]["compiled_dispatch"]["reason"]
    assert main(["list", "-v", "--format", "plain"]) == 0
    assert "compiled dispatch: not used (its background build failed" in capsys.readouterr().out

    later = reconfigure()  # a later process: nothing started again
    checked_product(8, 5, 4, seed=seed)
    assert later.compiled_build.process is None and later.compiled_build.finished
    assert "a fake build" in later.compiled_build.why


def test_looked_at_no_more_than_once_a_second(auto, monkeypatch):
    session, _gate = auto
    looked: list[int] = []
    monkeypatch.setattr(native, "load", lambda: looked.append(1))
    monkeypatch.setattr(background, "start", lambda session: (False, None))  # built elsewhere: waited for
    for now in (100.0, 100.2, 100.9, 101.05, 101.5, 102.1):
        assert background.step(session, now=now) is None
    assert len(looked) == 3  # at 100.0, 101.05, 102.1


@pytest.mark.parametrize("mode", ["on", "off"])
def test_nothing_starts_unless_auto(auto, monkeypatch, mode):
    monkeypatch.setenv(native.ENV_SWITCH, mode)
    session = reconfigure()
    monkeypatch.setattr(background, "start", lambda session: pytest.fail("a build was started"))
    checked_product(5, 4, 3, seed=0)
    assert session.compiled_build is None


def test_cpu_tensors_start_nothing(auto, monkeypatch):
    session, _gate = auto
    monkeypatch.setattr(dispatch, "_builds_for", BUILDS_FOR)
    monkeypatch.setattr(background, "start", lambda session: pytest.fail("a build was started"))
    checked_product(5, 4, 3, seed=0)  # CPU tensors
    assert session.compiled_build is None


def test_without_a_compiler_it_says_so_and_starts_nothing(auto, monkeypatch):
    session, _gate = auto
    monkeypatch.setattr(native, "toolchain_missing", lambda: "no C++ compiler (c++) on the PATH")
    checked_product(5, 4, 3, seed=0)
    assert session.compiled_build.finished and session.compiled_build.process is None
    assert session.compiled_build.why == "no C++ compiler (c++) on the PATH"
    said = native.status().reason
    assert said == "not built, and not built in the background here: no C++ compiler (c++) on the PATH"


def test_a_build_that_ended_without_a_module_or_a_record_is_recorded(auto):
    _name, directory = native.build_directory()
    directory.mkdir(parents=True)
    why = background._ended(-9)  # killed: it could not record anything itself
    assert "exit status -9" in why and native.background_failure(directory) == why
    assert background.start(auto[0]) == (False, why)  # and nothing starts again


@pytest.mark.gpu
def test_cuda_tensors_start_the_build_and_switch_to_it(auto, compiled_dispatch_module, monkeypatch):
    session, gate = auto
    monkeypatch.setattr(dispatch, "_builds_for", BUILDS_FOR)  # the real rule: CUDA tensors start it
    session.compiled_build = background.Watch(check_every_s=0.05, builder="fake_builds:copy_prebuilt")
    monkeypatch.setenv("FAKE_BUILD_PREBUILT", compiled_dispatch_module.__file__)
    gate.touch()
    checked_product(6, 5, 4, seed=0, device="cuda")
    session.compiled_build.process.wait(timeout=60)
    seed = 1
    while not dispatch._ROUTES:
        time.sleep(0.06)
        checked_product(6 + seed, 5, 4, seed, device="cuda")
        seed += 1
        assert not session.compiled_build.finished or dispatch._ROUTES, session.compiled_build.why
    for again in range(seed + 3):  # through the compiled dispatch
        checked_product(6 + again % 4, 5, 4, again, device="cuda")
