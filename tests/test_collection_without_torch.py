"""gemmzoo's test suite collects on a machine without torch: torch is optional, so a file that
needs it imports it where it is used or skips, never at collection."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from fake_distributions import subprocess_env

TESTS = Path(__file__).resolve().parent

# Makes torch look uninstalled: the path finder no longer sees it (find_spec gives None).
HIDE_TORCH = '''
import sys
from importlib.machinery import PathFinder


class _WithoutTorch(PathFinder):
    @classmethod
    def find_spec(cls, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            return None
        return PathFinder.find_spec(name, path, target)


sys.meta_path[:] = [_WithoutTorch if finder is PathFinder else finder for finder in sys.meta_path]
'''


def test_the_suite_collects_without_torch(tmp_path):
    (tmp_path / "sitecustomize.py").write_text(HIDE_TORCH)
    env = subprocess_env(tmp_path)
    hidden = subprocess.run([sys.executable, "-c", "import torch"], env=env, capture_output=True, text=True,
                            timeout=120, check=False)
    assert hidden.returncode != 0 and "No module named 'torch'" in hidden.stderr, hidden.stderr

    # --assert=plain: a collection runs no test, so the assertions need not be rewritten (the
    # rewriting is about half of a collection's time); what is imported at collection is the same.
    run = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                          "--assert=plain", str(TESTS)], env=env, capture_output=True, text=True,
                         cwd=tmp_path, timeout=300, check=False)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    summary = run.stdout.strip().splitlines()[-1]
    assert "tests collected" in summary and "error" not in summary, summary
