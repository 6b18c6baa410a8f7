"""The compiled dispatch's build directory lock: a build that died never stalls the next one."""

from __future__ import annotations

import subprocess
import sys
import threading

import pytest

from gemmzoo import native

pytest.importorskip("fcntl")


def _entered(directory, timeout: float = 20.0) -> bool:
    """Whether this process gets :func:`native.build_lock` on ``directory`` within ``timeout``."""
    done = threading.Event()

    def take() -> None:
        with native.build_lock(directory):
            done.set()

    worker = threading.Thread(target=take, daemon=True)
    worker.start()
    return done.wait(timeout)


def test_the_lock_left_by_a_killed_build_is_removed(tmp_path):
    baton = tmp_path / native.TORCH_BATON
    baton.write_text("")  # what torch's builder leaves when its process is killed mid-build
    with native.build_lock(tmp_path):
        assert not baton.exists()
    assert _entered(tmp_path)


def test_a_holder_that_dies_lets_go_and_a_live_one_is_waited_for(tmp_path):
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time\n"
         "from pathlib import Path\n"
         "from gemmzoo import native\n"
         "with native.build_lock(Path(sys.argv[1])):\n"
         "    (Path(sys.argv[1]) / native.TORCH_BATON).write_text('')\n"
         "    print('held', flush=True)\n"
         "    time.sleep(120)\n", str(tmp_path)],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        assert not _entered(tmp_path, timeout=0.5)  # a build running now is waited for
    finally:
        holder.kill()
        holder.wait()
    # killed mid-build, it left torch's lock file; the system let go of its own lock, and the
    # next holder (the waiting one above, or this one) removed torch's
    assert _entered(tmp_path)
    assert not (tmp_path / native.TORCH_BATON).exists()
