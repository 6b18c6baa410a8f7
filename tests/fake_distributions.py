"""Installed-looking distributions for tests, without pip.

A folder holding ``NAME-VERSION.dist-info/`` (METADATA and entry_points.txt) and the plugin's
modules is, once on ``PYTHONPATH``, what ``importlib.metadata`` sees after ``pip install``: gemmzoo
finds the entry points and names the distribution and its version.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path


def write_distribution(
    site: Path, name: str, version: str, entry_points: dict[str, str], modules: dict[str, str]
) -> Path:
    """Write distribution ``name`` with ``gemmzoo`` entry points and modules (name -> source)."""
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    lines = "".join(f"{entry} = {target}\n" for entry, target in entry_points.items())
    (info / "entry_points.txt").write_text(f"[gemmzoo]\n{lines}")
    for module, source in modules.items():
        (site / f"{module}.py").write_text(textwrap.dedent(source))
    return info


def subprocess_env(site: Path, **variables: str) -> dict[str, str]:
    """This process's environment with ``site`` first on PYTHONPATH, no GEMMZOO_* settings
    except ``variables`` and the tuning cache of this test process (the test's own where it set
    one, else the run's temporary one: never the user's), no pytest-xdist worker variables (a
    pytest started from a worker's test would take itself for a worker), and a wide terminal so
    rich does not wrap lines."""
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("GEMMZOO_", "PYTEST_XDIST_"))}
    if "GEMMZOO_CACHE_DIR" in os.environ:
        env["GEMMZOO_CACHE_DIR"] = os.environ["GEMMZOO_CACHE_DIR"]
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(site), env.get("PYTHONPATH")) if p)
    env["COLUMNS"] = "400"
    env.update(variables)
    return env


def run_gemmzoo(site: Path, *args: str, **variables: str) -> subprocess.CompletedProcess[str]:
    """``python -m gemmzoo ARGS`` in a subprocess with ``site`` on the path (see ``subprocess_env``)."""
    return subprocess.run([sys.executable, "-m", "gemmzoo", *args], capture_output=True, text=True,
                          env=subprocess_env(site, **variables), timeout=300, check=False)
