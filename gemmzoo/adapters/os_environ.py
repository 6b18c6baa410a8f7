"""CPython's private mapping behind ``os.environ``, for reading a few variables on a hot path.

``os.environ.get`` of a variable that is not set raises and catches a ``KeyError`` inside, which
costs many times what a dict lookup does; on POSIX, CPython keeps the environment in a plain
dict of bytes (``os.environ._data``) that answers the same question directly. It is private, so
:func:`reader` uses it only on CPython versions it was checked with (:data:`TESTED_VERSIONS`),
on POSIX, and where it is a dict; otherwise it returns ``os.environ.get``.
``tests/test_adapters.py`` fails when a CPython release changes it.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

#: CPython (major, minor) versions whose ``os.environ._data`` was checked.
TESTED_VERSIONS = ((3, 10), (3, 11), (3, 12), (3, 13), (3, 14))


def unsupported_reason() -> str | None:
    """Why the private mapping is not used here (``None``: it is)."""
    if sys.implementation.name != "cpython" or sys.version_info[:2] not in TESTED_VERSIONS:
        version = f"{sys.version_info[0]}.{sys.version_info[1]}"
        return f"{sys.implementation.name} {version} is not a checked CPython"
    if os.name != "posix":
        return "os.environ keeps no bytes mapping off POSIX"
    if not isinstance(getattr(os.environ, "_data", None), dict):
        return "os.environ has no _data dict"
    return None


def reader(names: Sequence[str]) -> tuple[Callable[[Any], Any], tuple[Any, ...]]:
    """``(read, keys)``: ``read(key)`` for each of ``keys`` is the value of the variable of the same
    position in ``names`` (``None`` when unset; bytes from the private mapping, str otherwise)."""
    if unsupported_reason() is None:
        return os.environ._data.get, tuple(os.fsencode(name) for name in names)  # type: ignore[attr-defined]
    return os.environ.get, tuple(names)
