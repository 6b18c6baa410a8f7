"""Stand-ins for :func:`gemmzoo.native.build` in the background build's process (see
tests/test_background_build.py): they take the build lock as the real build does, and either copy
a module built once for the test run into place, or fail. ``FAKE_BUILD_GATE``: a file they wait
for before finishing (so that a test sees the build running); ``FAKE_BUILD_PREBUILT``: the module
to copy. These are the test's own variables, read here, in the build process."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

from gemmzoo import native


def _wait_for_gate() -> None:
    gate = os.environ.get("FAKE_BUILD_GATE")
    deadline = time.monotonic() + 60
    while gate and not Path(gate).exists() and time.monotonic() < deadline:
        time.sleep(0.02)


def copy_prebuilt(verbose: bool = False) -> None:
    """Build by copying ``FAKE_BUILD_PREBUILT`` where the build goes, and record it as built."""
    name, directory = native.build_directory()
    with native.build_lock(directory):
        print(f"fake build of {name} (verbose={verbose})", flush=True)
        _wait_for_gate()
        library = directory / Path(os.environ["FAKE_BUILD_PREBUILT"]).name
        shutil.copyfile(os.environ["FAKE_BUILD_PREBUILT"], library)
        native.record_build(library)


def fail(verbose: bool = False) -> None:
    """A build that fails, as one without a working compiler does."""
    _name, directory = native.build_directory()
    with native.build_lock(directory):
        _wait_for_gate()
        raise native.CompiledDispatchError("building the compiled dispatch failed: c++: fatal error: no "
                                           "input files (a fake build)")
