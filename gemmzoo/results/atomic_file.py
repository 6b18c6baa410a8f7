"""Output files written whole or not at all, and output paths checked before a run.

A result written in place is lost twice over when the write fails (a full disk, a killed
process): the new results and the previous file. :func:`write_atomically` writes a temporary file
beside the target and renames it over the target only once it is complete and flushed.
:func:`unwritable` says, before a long run, why a path cannot take its output.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path


def write_atomically(path: str | Path, text: str | bytes) -> None:
    """Write ``text`` to ``path``: the whole of it, or nothing changes at ``path``."""
    target = Path(path)
    handle, temporary = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent or ".")
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(text.encode("utf-8") if isinstance(text, str) else text)
            out.flush()
            os.fsync(out.fileno())
        with contextlib.suppress(OSError):  # keep an existing file's permissions
            os.chmod(temporary, target.stat().st_mode & 0o777 if target.exists() else 0o644)
        os.replace(temporary, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def unwritable(path: str | Path) -> str | None:
    """Why ``path`` cannot take an output file (a missing or unwritable folder, a folder at the
    path itself), or ``None``; checked without creating anything."""
    target = Path(path)
    if str(path).strip() == "":
        return "an empty path"
    if target.is_dir():
        return f"{path} is a folder"
    folder = target.parent if str(target.parent) else Path(".")
    if not folder.is_dir():
        return f"the folder {folder} does not exist"
    if not os.access(folder, os.W_OK | os.X_OK):
        return f"the folder {folder} is not writable"
    if target.exists() and not os.access(target, os.W_OK):
        return f"{path} is not writable"
    return None
