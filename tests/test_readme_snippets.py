"""The README's Python blocks run as written, each in a fresh process with an empty tuning database."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"


def python_blocks() -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", README.read_text(encoding="utf-8"), re.S | re.M)


def test_the_readme_has_python_blocks():
    assert len(python_blocks()) >= 2


@pytest.mark.parametrize("index", range(len(python_blocks())))
def test_readme_python_block_runs(index, tmp_path):
    block = python_blocks()[index]
    if '"jax"' in block and importlib.util.find_spec("jax") is None:
        pytest.skip("the block names the jax backend, and jax is not installed")
    env = {**os.environ, "GEMMZOO_CACHE_DIR": str(tmp_path / "cache"), "GEMMZOO_BACKENDS": "numpy,jax"}
    done = subprocess.run([sys.executable, "-c", block], capture_output=True, text=True, env=env,
                          cwd=tmp_path, timeout=600)
    assert done.returncode == 0, done.stderr
    if "best_backend" in block:  # it measures a new shape: said on stderr as it starts
        said = [line for line in done.stderr.splitlines() if line.startswith("gemmzoo: measuring")]
        assert len(said) == 1, done.stderr
