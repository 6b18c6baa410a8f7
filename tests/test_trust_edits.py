"""Verdicts belong to the code that earned them: an installed plugin edited after it passed is
checked again before it is used, and its wrong products are never returned."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from fake_distributions import run_gemmzoo, subprocess_env, write_distribution

PLUGIN = '''
import numpy as np
import gemmzoo
from gemmzoo import Backend

OFFSET = {offset}


class Edited(Backend):
    name = "edited"
    device = "cpu"
    dtypes = frozenset({{"float64"}})

    def from_numpy(self, x, dtype):
        self.check_dtype(dtype, x.shape)
        return np.array(x, dtype=np.float64, copy=True)

    def to_numpy(self, y):
        return np.array(y, copy=True)

    def matmul(self, a, b):
        self.check_operands(a, b)
        return np.matmul(a, b) + OFFSET


@gemmzoo.hookimpl
def gemmzoo_register_backends(register):
    register(Edited())
'''

USE = '''
import numpy as np, gemmzoo
rng = np.random.default_rng(3)
a, b = rng.standard_normal((300, 100)), rng.standard_normal((100, 200))
try:
    c = gemmzoo.matmul(a, b)
except Exception as error:
    print("REFUSED", type(error).__name__)
else:
    print("ERROR", float(np.abs(c - a @ b).max()))
'''


def _write(site: Path, offset: float) -> Path:
    module = site / "edited_plugin.py"
    module.write_text(PLUGIN.format(offset=offset))
    return module


def test_an_edited_plugin_is_checked_again_and_its_wrong_products_are_never_returned(tmp_path: Path) -> None:
    site, cache = tmp_path / "site", tmp_path / "cache"
    site.mkdir()
    write_distribution(site, "gemmzoo-edited", "1.0", {"edited": "edited_plugin"}, {})
    _write(site, 0.0)
    env = {"GEMMZOO_CACHE_DIR": str(cache), "GEMMZOO_BACKENDS": "edited", "PYTHONDONTWRITEBYTECODE": "1",
           "GEMMZOO_DISABLE_PLUGINS": "torch,triton,cupy,jax"}  # numpy's plugin only: quick subprocesses

    checked = run_gemmzoo(site, "check", "edited", **env)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "earned" in checked.stdout and "code " in checked.stdout
    used = subprocess.run([sys.executable, "-c", USE], capture_output=True, text=True, timeout=300,
                          env=subprocess_env(site, **env), check=False)
    assert used.stdout.startswith("ERROR"), used.stdout + used.stderr
    assert float(used.stdout.split()[1]) < 1e-9

    _write(site, 1.0)  # the same distribution and version, other code: as an editable install's edit
    listed = run_gemmzoo(site, "list", "-v", **env)
    assert "no verdict for this code" in listed.stdout, listed.stdout
    used = subprocess.run([sys.executable, "-c", USE], capture_output=True, text=True, timeout=300,
                          env=subprocess_env(site, **env), check=False)
    assert used.stdout.startswith("REFUSED"), used.stdout + used.stderr  # checked again: fails, never used
    listed = run_gemmzoo(site, "list", "-v", **env)
    assert "float64: FAILED" in listed.stdout, listed.stdout
