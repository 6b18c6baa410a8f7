"""The configs full autotunes picked, kept on disk so that quick backends in later processes
launch them (see :mod:`~gemmzoo_triton.core.autotune`).

One JSON file, ``triton-picks.json`` in gemmzoo's cache directory (``GEMMZOO_CACHE_DIR``, else the
user cache directory): for each kernel, problem key, Triton version and GPU, the picked config's
block sizes and launch options. A stored pick is used only where it is one of the kernel's
current configs, so a changed config list never launches a config it no longer has. The file is
read once per process and rewritten whole (through a temporary file) on each new full pick; a
file that cannot be read or written only means tuning again.
"""

from __future__ import annotations

import functools
import json
import os
import tempfile
import warnings
from pathlib import Path
from typing import Any

FILE_NAME = "triton-picks.json"

#: The file's contents as last read or written, with the path they came from.
_loaded: tuple[Path, dict[str, Any]] | None = None


def path() -> Path:
    """Where the picks are kept."""
    from gemmzoo.tuning.db import default_cache_dir

    return default_cache_dir() / FILE_NAME


@functools.cache
def _where() -> str:
    """The Triton version and the GPU a pick was made on (the current CUDA device's name and
    capability), or the interpreter."""
    import triton

    from gemmzoo_triton.core.env import interpreter_mode

    if interpreter_mode():
        return f"triton {triton.__version__} interpreter"
    import torch

    index = torch.cuda.current_device()
    major, minor = torch.cuda.get_device_capability(index)
    return f"triton {triton.__version__} {torch.cuda.get_device_name(index)} sm_{major}{minor}"


def _entry(picked_key: tuple[Any, ...]) -> str:
    return json.dumps([_where(), *picked_key])


def describe(config: Any) -> dict[str, Any]:
    """What identifies a ``triton.Config``: its block sizes and launch options."""
    return {"kwargs": dict(config.kwargs), "num_warps": config.num_warps, "num_stages": config.num_stages,
            "maxnreg": getattr(config, "maxnreg", None)}


def _read() -> dict[str, Any]:
    global _loaded
    where = path()
    if _loaded is None or _loaded[0] != where:
        try:
            loaded = json.loads(where.read_text())
        except (OSError, ValueError):
            loaded = {}
        _loaded = (where, loaded if isinstance(loaded, dict) else {})
    return _loaded[1]


def load(picked_key: tuple[Any, ...], configs: list[Any]) -> Any | None:
    """The config of ``configs`` stored for ``picked_key`` (the kernel's name, then the problem's
    key) on this Triton and GPU, or None."""
    stored = _read().get(_entry(picked_key))
    if stored is None:
        return None
    return next((config for config in configs if describe(config) == stored), None)


def save(picked_key: tuple[Any, ...], config: Any) -> None:
    """Keep ``config`` as the full pick for ``picked_key`` (see :func:`load`)."""
    global _loaded
    target = path()
    try:
        current = json.loads(target.read_text()) if target.exists() else {}
    except (OSError, ValueError):
        current = {}
    if not isinstance(current, dict):
        current = {}
    current[_entry(picked_key)] = describe(config)
    _loaded = (target, current)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", dir=target.parent, delete=False, suffix=".tmp") as handle:
            json.dump(current, handle, indent=0, sort_keys=True)
        os.replace(handle.name, target)
    except OSError as error:
        warnings.warn(f"gemmzoo_triton: could not keep the autotuned config in {target}: {error}",
                      RuntimeWarning, stacklevel=3)


def forget() -> None:
    """Read the file again on the next :func:`load` (for tests, and after another process wrote it)."""
    global _loaded
    _loaded = None
