"""A digest of the code a backend runs: what its verdicts and measurements belong to.

An editable install's edit changes no version number, so versions alone cannot say that a backend
changed. The digest covers the files a backend's behaviour comes from:

- the file that registered it (the plugin module whose hook called ``register``);
- the module of every class in its type's method resolution order, except Python's own;
- for a module inside a package that is not gemmzoo itself, every ``.py`` file of its top-level
  package (a plugin's helper modules), so that an edit of a kernel module is seen too.

Files are named by their path inside their top-level package, not by where they are installed:
the same plugin installed elsewhere gives the same digest. A file that cannot be read enters the
digest as unreadable (a backend whose code cannot be read is never the same as one whose can).
"""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

#: At most this many files of one package enter the digest (a plugin vendoring a large tree still
#: gets a bounded digest; the rest are named by count).
MAX_PACKAGE_FILES = 400
#: Bytes read of one file at most.
MAX_FILE_BYTES = 4 << 20
_CORE = "gemmzoo"
_SKIPPED_MODULES = frozenset({"builtins", "abc", "typing"})


def _module_files(module_name: str) -> list[tuple[str, Path]]:
    """``(label, path)`` of the files a module stands for (see the module docstring)."""
    module = sys.modules.get(module_name)
    path = getattr(module, "__file__", None) if module is not None else None
    if not path:
        return []
    top_name = module_name.split(".", 1)[0]
    top = sys.modules.get(top_name)
    package_dirs = list(getattr(top, "__path__", []) or []) if top is not None else []
    if top_name == _CORE or not package_dirs:
        return [(f"{module_name}:{Path(path).name}", Path(path))]
    found: list[tuple[str, Path]] = []
    for directory in package_dirs:
        root = Path(directory)
        try:
            files = sorted(root.rglob("*.py"))
        except OSError:
            continue
        for file in files:
            found.append((f"{top_name}/{file.relative_to(root).as_posix()}", file))
    return found


def code_files(backend: Any, registered_in: str | None = None) -> list[tuple[str, Path]]:
    """The labelled files whose contents make ``backend``'s digest, sorted by label."""
    modules: list[str] = []
    for cls in type(backend).__mro__:
        name = getattr(cls, "__module__", None)
        if isinstance(name, str) and name not in _SKIPPED_MODULES:
            modules.append(name)
    files: dict[str, Path] = {}
    for name in dict.fromkeys(modules):
        for label, path in _module_files(name)[:MAX_PACKAGE_FILES]:
            files.setdefault(label, path)
    if registered_in and Path(registered_in).is_file():
        resolved = Path(registered_in).resolve()
        if all(p.resolve() != resolved for p in files.values()):
            files[f"registered-in:{resolved.name}"] = resolved
    return sorted(files.items())


def digest_files(files: Iterable[tuple[str, Path]]) -> str:
    """SHA-256 (hex, 16 characters) over each label and its file's bytes."""
    hasher = hashlib.sha256()
    for label, path in files:
        hasher.update(label.encode("utf-8", "backslashreplace") + b"\0")
        try:
            with open(path, "rb") as handle:
                data = handle.read(MAX_FILE_BYTES + 1)
        except OSError as error:
            data = f"<unreadable: {type(error).__name__}>".encode()
        hasher.update(len(data).to_bytes(8, "little") + data)
    return hasher.hexdigest()[:16]


def code_digest(backend: Any, registered_in: str | None = None) -> str:
    """The digest of ``backend``'s code (see the module docstring)."""
    return digest_files(code_files(backend, registered_in))
