"""``import gemmzoo`` and building the registry must not import torch, cupy or triton."""

from __future__ import annotations

import json
import subprocess
import sys

HEAVY = ("torch", "cupy", "triton")


def test_import_and_registry_stay_light():
    code = (
        "import json, sys, gemmzoo\n"
        f"after_import = [m for m in {HEAVY!r} if m in sys.modules]\n"
        "names = [b.name for b in gemmzoo.backends()]\n"
        f"after_registry = [m for m in {HEAVY!r} if m in sys.modules]\n"
        "print(json.dumps([after_import, after_registry, names]))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    after_import, after_registry, names = json.loads(result.stdout)
    assert after_import == [] and after_registry == []
    assert {"numpy", "torch-cpu", "torch"} <= set(names)  # the registry really loaded the plugins
