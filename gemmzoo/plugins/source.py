"""Where in a plugin's own files something happened, so that messages point at the plugin.

A plugin's *files* are its module's file, or every file under its package's folder. A failure is
placed at the last traceback frame inside those files (the plugin's line that raised, or that
called the library that did), and a registration at the plugin's line that called ``register``.
"""

from __future__ import annotations

import importlib.util
import inspect
import os
import traceback
from typing import Any

#: (file, line) in a plugin's source.
Location = tuple[str, int]


def _root_of(file: str, package: bool) -> str:
    path = os.path.abspath(file)
    return os.path.dirname(path) + os.sep if package else path


def module_roots(module_name: str) -> list[str]:
    """The files (a module) or folders (a package) of the top-level package of ``module_name``,
    found without importing it; empty when it cannot be found."""
    top = module_name.partition(".")[0]
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return []
    if spec is None:
        return []
    if spec.submodule_search_locations:
        return [os.path.abspath(folder) + os.sep for folder in spec.submodule_search_locations]
    return [os.path.abspath(spec.origin)] if spec.origin and os.path.exists(spec.origin) else []


def plugin_roots(plugin: Any) -> list[str]:
    """The files of a registered plugin object: its module's, or its class's module's."""
    module = plugin if inspect.ismodule(plugin) else inspect.getmodule(type(plugin))
    name = getattr(module, "__name__", None)
    roots = module_roots(name) if name and name != "__main__" else []
    file = getattr(module, "__file__", None)
    if not roots and file:
        roots = [_root_of(file, hasattr(module, "__path__"))]
    return roots


def _inside(file: str, roots: list[str]) -> bool:
    path = os.path.abspath(file)
    return any(path.startswith(root) if root.endswith(os.sep) else path == root for root in roots)


def raised_at(error: BaseException, roots: list[str]) -> Location | None:
    """The last frame of ``error``'s traceback inside the plugin's files, or ``None``."""
    found = None
    for frame in traceback.extract_tb(error.__traceback__):
        if _inside(frame.filename, roots):
            found = (frame.filename, frame.lineno or 0)
    return found


def defined_at(plugin: Any) -> Location | None:
    """Where a plugin's ``gemmzoo_register_backends`` is defined, else its module's first line."""
    hook = getattr(plugin, "gemmzoo_register_backends", None)
    code = getattr(inspect.unwrap(hook), "__code__", None) if callable(hook) else None
    if code is not None:
        return code.co_filename, code.co_firstlineno
    roots = plugin_roots(plugin)
    return (roots[0], 1) if roots and not roots[0].endswith(os.sep) else None


def format_location(location: Location | None) -> str:
    """``file:line``, or an empty string for no location."""
    return f"{location[0]}:{location[1]}" if location else ""


def format_traceback(error: BaseException) -> str:
    """The whole traceback of ``error``, as Python prints it."""
    return "".join(traceback.format_exception(type(error), error, error.__traceback__)).rstrip()
