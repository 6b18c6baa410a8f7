"""Nothing a plugin does outlives its bound: a plugin that blocks at import, in its hook or when
a member is read is named and left out within the time limit, and a plugin's thread that is not
a daemon does not keep a command from exiting."""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest
from fake_distributions import run_gemmzoo, write_distribution

BACKEND = '''
import numpy as np
import gemmzoo
from gemmzoo import Backend


class Honest(Backend):
    name = "{name}"
    device = "cpu"
    dtypes = frozenset({{"float32"}})

    def from_numpy(self, x, dtype):
        self.check_dtype(dtype, x.shape)
        return np.array(x, dtype=np.float32, copy=True)

    def to_numpy(self, y):
        return np.array(y, copy=True)

    def matmul(self, a, b):
        self.check_operands(a, b)
        return np.matmul(a, b)
'''

CASES = {
    "blocks-at-import": BACKEND.format(name="blocks-at-import") + "import time\ntime.sleep(600)\n",
    "blocks-in-hook": BACKEND.format(name="blocks-in-hook") + '''
import time

@gemmzoo.hookimpl
def gemmzoo_register_backends(register):
    time.sleep(600)
''',
    "blocks-in-dtypes": BACKEND.format(name="blocks-in-dtypes") + '''
import time

class Blocking(Honest):
    @property
    def dtypes(self):
        time.sleep(600)
        return frozenset({"float32"})

@gemmzoo.hookimpl
def gemmzoo_register_backends(register):
    register(Blocking())
''',
    "lingering-thread": BACKEND.format(name="lingering-thread") + '''
import threading, time

threading.Thread(target=lambda: time.sleep(600), daemon=False).start()

@gemmzoo.hookimpl
def gemmzoo_register_backends(register):
    register(Honest())
''',
}


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("bounded-site")
    modules = {f"gemmzoo_bounds_{case.replace('-', '_')}": source for case, source in CASES.items()}
    write_distribution(root, "gemmzoo-bounds", "1.0",
                       {case: f"gemmzoo_bounds_{case.replace('-', '_')}" for case in CASES}, modules)
    return root


def timed_run(site: Path, *args: str, **env: str):
    """``run_gemmzoo``'s answer and the seconds it took."""
    start = time.monotonic()
    done = run_gemmzoo(site, *args, **env)
    return done, time.monotonic() - start


@pytest.fixture(scope="module")
def runs(site: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Future]]:
    """The two commands below, started at once: each waits out the limits of the three blocking
    plugins (seconds of sleep), side by side they wait once. Name -> future of ``timed_run``."""
    with ThreadPoolExecutor(2) as pool:
        yield {
            "list": pool.submit(timed_run, site, "list", "--format", "plain", GEMMZOO_TIMEOUT="2",
                                GEMMZOO_CACHE_DIR=str(tmp_path_factory.mktemp("list-cache"))),
            "best": pool.submit(timed_run, site, "best", "64", "64", "64", "--no-measure",
                                GEMMZOO_TIMEOUT="2", GEMMZOO_BACKENDS="numpy",
                                GEMMZOO_CACHE_DIR=str(tmp_path_factory.mktemp("best-cache"))),
        }


def test_list_names_each_blocking_plugin_within_the_time_limit(runs) -> None:
    done, took = runs["list"].result()
    assert done.returncode == 0, done.stdout + done.stderr
    failed = [line for line in done.stdout.splitlines() if line.startswith("FAILED")]
    for case in ("blocks-at-import", "blocks-in-hook", "blocks-in-dtypes"):
        assert any(f"'{case}'" in line and "did not finish" in line for line in failed), done.stdout
    assert any(line.startswith("lingering-thread\t") for line in done.stdout.splitlines())
    assert took < 120  # three 2 s limits and the imports; never the 600 s a plugin asks for


def test_a_plugins_lingering_thread_does_not_keep_a_command_from_exiting(runs) -> None:
    done, _took = runs["best"].result()
    assert done.returncode in (0, 1, 2), done.stdout + done.stderr  # it exited, whatever it answered
