"""Loading plugins from the ``gemmzoo`` entry-point group and collecting their backends.

Each entry point is loaded in isolation: one that fails to import, whose hook raises, or whose
backends are malformed becomes a :class:`PluginWarning` (a :class:`PluginError` when
``GEMMZOO_STRICT_PLUGINS`` is set) and the others keep working.
"""

from __future__ import annotations

import os
import re
import threading
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from importlib import metadata
from typing import Any

import pluggy

from gemmzoo import hookspecs
from gemmzoo.dtypes import DTYPES
from gemmzoo.errors import PluginError, PluginWarning, UnknownBackendError

ENTRY_POINT_GROUP = "gemmzoo"
_NAME_PATTERN = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")
_BACKEND_MEMBERS = (
    "name", "device", "dtypes", "unavailable_reason", "from_numpy", "to_numpy", "matmul",
    "synchronize",
)
_FALSE_WORDS = {"", "0", "false", "no", "off"}


@dataclass(frozen=True)
class PluginInfo:
    """Where a plugin came from: its entry-point name, target, and distribution."""

    name: str
    target: str
    distribution: str | None = None
    version: str | None = None

    def describe(self) -> str:
        """``'numpy' (gemmzoo 0.1.0)``: the plugin as messages name it."""
        dist = f" ({self.distribution} {self.version})" if self.distribution else ""
        return f"'{self.name}'{dist}"


@dataclass(frozen=True)
class PluginFailure:
    """A plugin, or one of its backends, that could not be loaded; ``error`` is one line."""

    plugin: PluginInfo
    error: str


def env_list(variable: str) -> list[str]:
    """The comma-separated names in an environment variable, stripped, empties dropped."""
    return [part.strip() for part in os.environ.get(variable, "").split(",") if part.strip()]


def strict_plugins() -> bool:
    """Whether ``GEMMZOO_STRICT_PLUGINS`` asks for plugin failures to be errors."""
    return os.environ.get("GEMMZOO_STRICT_PLUGINS", "").strip().lower() not in _FALSE_WORDS


def _one_line(error: BaseException) -> str:
    text = " ".join(str(error).split())
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


class Registry:
    """The backends registered by plugins, in registration order.

    Plugins are taken in the order of their entry-point names, so the order of backends is
    stable across runs.
    """

    def __init__(self, *, strict: bool | None = None) -> None:
        self.strict = strict_plugins() if strict is None else strict
        self.plugin_manager = pluggy.PluginManager(ENTRY_POINT_GROUP)
        self.plugin_manager.add_hookspecs(hookspecs)
        self._backends: dict[str, Any] = {}
        self._providers: dict[str, PluginInfo] = {}
        self.plugins: list[PluginInfo] = []
        self.failures: list[PluginFailure] = []
        self.disabled: list[str] = []

    # Loading ---------------------------------------------------------------------------------

    def load_entry_points(self, disabled: Iterable[str] | None = None) -> None:
        """Load every entry point of the ``gemmzoo`` group except the ``disabled`` names."""
        skip = set(env_list("GEMMZOO_DISABLE_PLUGINS") if disabled is None else disabled)
        found = metadata.entry_points(group=ENTRY_POINT_GROUP)
        for entry_point in sorted(found, key=lambda ep: (ep.name, ep.value)):
            dist = getattr(entry_point, "dist", None)
            info = PluginInfo(
                name=entry_point.name,
                target=entry_point.value,
                distribution=dist.metadata["Name"] if dist is not None else None,
                version=dist.version if dist is not None else None,
            )
            if info.name in skip:
                self.disabled.append(info.name)
                continue
            try:
                plugin = entry_point.load()
            except Exception as error:  # a broken plugin must not take the others down
                self._fail(info, f"failed to import {info.target}: {_one_line(error)}")
                continue
            self.register_plugin(plugin, info)

    def register_plugin(self, plugin: Any, info: PluginInfo | None = None) -> None:
        """Register a plugin object (usually a module) and collect the backends it registers."""
        if info is None:
            name = getattr(plugin, "__name__", None) or type(plugin).__name__
            info = PluginInfo(name=name, target=name)
        try:
            self.plugin_manager.register(plugin, name=info.name)
        except Exception as error:
            self._fail(info, f"could not be registered: {_one_line(error)}")
            return
        self.plugins.append(info)
        pending: list[Any] = []
        hook = self.plugin_manager.hook.gemmzoo_register_backends
        for impl in hook.get_hookimpls():
            if impl.plugin is not plugin:
                continue
            try:
                impl.function(**{arg: pending.append for arg in impl.argnames})
            except Exception as error:
                self._fail(info, f"gemmzoo_register_backends raised {_one_line(error)}")
                return
        for backend in pending:
            self._add_backend(backend, info)

    def _add_backend(self, backend: Any, info: PluginInfo) -> None:
        problem = _backend_problem(backend)
        if problem:
            self._fail(info, f"registered an invalid backend {backend!r}: {problem}")
            return
        if backend.name in self._backends:
            first = self._providers[backend.name]
            self._fail(
                info,
                f"backend name '{backend.name}' is registered by plugin {first.describe()} "
                f"and again by plugin {info.describe()}; keeping the one from {first.describe()}",
            )
            return
        self._backends[backend.name] = backend
        self._providers[backend.name] = info

    def _fail(self, info: PluginInfo, error: str) -> None:
        failure = PluginFailure(info, error)
        message = f"gemmzoo plugin {info.describe()}: {error}"
        if self.strict:
            raise PluginError(message)
        self.failures.append(failure)
        warnings.warn(message, PluginWarning, stacklevel=3)

    # Queries ---------------------------------------------------------------------------------

    def backends(self) -> list[Any]:
        """Every registered backend, available or not, in registration order."""
        return list(self._backends.values())

    def names(self) -> list[str]:
        """The registered backend names, in registration order."""
        return list(self._backends)

    def get(self, name: str) -> Any:
        """The backend called ``name``; :class:`UnknownBackendError` listing the names otherwise."""
        try:
            return self._backends[name]
        except KeyError:
            known = ", ".join(self._backends) or "none"
            raise UnknownBackendError(f"unknown backend {name!r}; registered: {known}") from None

    def provider(self, name: str) -> PluginInfo:
        """The plugin that registered backend ``name``."""
        self.get(name)
        return self._providers[name]

    def select(self, names: Sequence[str] | None = None) -> list[Any]:
        """The backends named (or in ``GEMMZOO_BACKENDS``); all of them when neither names any."""
        chosen = list(names) if names else env_list("GEMMZOO_BACKENDS")
        if not chosen:
            return self.backends()
        return [self.get(name) for name in dict.fromkeys(chosen)]


def _backend_problem(backend: Any) -> str | None:
    missing = [member for member in _BACKEND_MEMBERS if not hasattr(backend, member)]
    if missing:
        return f"missing {', '.join(missing)}"
    if not isinstance(backend.name, str) or not _NAME_PATTERN.match(backend.name):
        return f"name {backend.name!r} is not lowercase kebab-case"
    if backend.device not in ("cpu", "cuda"):
        return f"device {backend.device!r} is neither 'cpu' nor 'cuda'"
    unknown = set(backend.dtypes) - set(DTYPES)
    if unknown:
        return f"unknown dtypes {sorted(unknown)}; known: {', '.join(DTYPES)}"
    return None


_lock = threading.Lock()
_registry: Registry | None = None


def get_registry() -> Registry:
    """The process-wide registry, built from the entry points on first use."""
    global _registry
    with _lock:
        if _registry is None:
            registry = Registry()
            registry.load_entry_points()
            _registry = registry
        return _registry


def reset_registry() -> None:
    """Forget the process-wide registry, so the next use reloads the entry points."""
    global _registry
    with _lock:
        _registry = None
