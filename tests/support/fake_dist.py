"""Install throw-away plugin distributions for real: a module plus a .dist-info folder with an
``entry_points.txt``, in a directory that goes on a subprocess's PYTHONPATH."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path


def install_plugin(site: Path, dist: str, entry_points: dict[str, str], modules: dict[str, str],
                   version: str = "1.0") -> None:
    """Write ``modules`` (name -> source) and a distribution ``dist`` whose ``gemmzoo`` entry
    points are ``entry_points`` (name -> target) under ``site``."""
    site.mkdir(parents=True, exist_ok=True)
    for name, source in modules.items():
        (site / f"{name}.py").write_text(textwrap.dedent(source))
    info = site / f"{dist.replace('-', '_')}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
    lines = "".join(f"{name} = {target}\n" for name, target in entry_points.items())
    (info / "entry_points.txt").write_text(f"[gemmzoo]\n{lines}")


def run_gemmzoo(site: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """``python -m gemmzoo ARGS`` with ``site`` on the path and extra environment variables."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith("GEMMZOO_")}
    environment["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site), environment.get("PYTHONPATH")]))
    environment["COLUMNS"] = "250"
    environment.update(env)
    return subprocess.run([sys.executable, "-m", "gemmzoo", *args], capture_output=True, text=True,
                          env=environment, timeout=300, check=False)
