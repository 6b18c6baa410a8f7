"""Loading plugins from the ``gemmzoo`` entry-point group and collecting their backends.

Each entry point is loaded in isolation: one that fails to import, whose hook raises, or whose
backends are malformed becomes a :class:`PluginWarning` (a :class:`PluginError` when
``GEMMZOO_STRICT_PLUGINS`` is set) and the others keep working. Messages name the plugin (entry
point and distribution) and the plugin's own file and line; warnings are issued at that line.

Backend names of gemmzoo's own distribution are reserved: its entry points load first, and a
backend of any other distribution that claims one of their names is refused. Between two other
distributions the first by entry-point name keeps the name.

A backend's members are checked once, at registration (:func:`gemmzoo.contract.validation.backend_problem`).
Whether it is usable is asked through :func:`unavailable_reason`, which every command and API
uses: it checks the members again, calls the backend's ``unavailable_reason()`` under the
watchdog's time limit (:mod:`gemmzoo.plugins.watchdog`), turns an exception, a hang or a reason that is
not a string into a reason of its own, and remembers the answer for the rest of the process.
"""

from __future__ import annotations

import re
import threading
import traceback
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from importlib import metadata
from typing import Any

import pluggy

from gemmzoo import hookspecs
from gemmzoo.config import Config
from gemmzoo.contract.validation import backend_problem, describe_backend
from gemmzoo.errors import PluginError, PluginWarning, UnknownBackendError
from gemmzoo.plugins.code_digest import code_digest
from gemmzoo.plugins.inert import inert
from gemmzoo.plugins.source import (
    Location,
    defined_at,
    format_location,
    format_traceback,
    module_roots,
    plugin_roots,
    raised_at,
)
from gemmzoo.plugins.watchdog import BackendTimeoutError, quarantined
from gemmzoo.plugins.watchdog import call as watched

ENTRY_POINT_GROUP = "gemmzoo"
#: The distribution whose backend names are reserved.
OWN_DISTRIBUTION = "gemmzoo"


def _normalized(name: str) -> str:
    """A distribution name as packaging compares them (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass(frozen=True)
class PluginInfo:
    """Where a plugin came from: its entry-point name, target, and distribution."""

    name: str
    target: str
    distribution: str | None = None
    version: str | None = None

    @property
    def own(self) -> bool:
        """Whether the plugin belongs to gemmzoo's own distribution (its names are reserved)."""
        return self.distribution is not None and _normalized(self.distribution) == OWN_DISTRIBUTION

    def describe(self) -> str:
        """``'numpy' (gemmzoo 0.1.0)``: the plugin as messages name it."""
        dist = f" ({self.distribution} {self.version})" if self.distribution else ""
        return f"'{self.name}'{dist}"


@dataclass(frozen=True)
class PluginFailure:
    """A plugin, or one of its backends, that could not be loaded; ``error`` is one line,
    ``location`` the plugin's file and line it points at, ``traceback`` the exception's
    traceback when one was raised."""

    plugin: PluginInfo
    error: str
    location: Location | None = None
    traceback: str | None = None




def _one_line(error: BaseException) -> str:
    try:
        text = inert(" ".join(str(error).split()))
    except Exception:  # an exception whose own __str__ raises
        text = "<unprintable>"
    name = inert(type(error).__name__)
    return f"{name}: {text}" if text else name


def _at(location: Location | None, verb: str = "raised") -> str:
    return f" ({verb} at {format_location(location)})" if location else ""


def _entry_point_info(entry_point: metadata.EntryPoint) -> PluginInfo:
    dist = getattr(entry_point, "dist", None)
    return PluginInfo(
        name=entry_point.name,
        target=entry_point.value,
        distribution=dist.metadata["Name"] if dist is not None else None,
        version=dist.version if dist is not None else None,
    )


class Registry:
    """The backends registered by plugins, in registration order.

    gemmzoo's own entry points load first, then the others, each group in the order of the
    entry-point names, so the order of backends is stable across runs.
    """

    def __init__(self, *, strict: bool = False) -> None:
        self.strict = strict
        self.plugin_manager = pluggy.PluginManager(ENTRY_POINT_GROUP)
        self.plugin_manager.add_hookspecs(hookspecs)
        self._backends: dict[str, Any] = {}
        self._providers: dict[str, PluginInfo] = {}
        self._registered_at: dict[str, Location] = {}
        self._digests: dict[str, str] = {}
        self._frozen: dict[int, tuple[Any, tuple[Any, ...]]] = {}
        self.plugins: list[PluginInfo] = []
        self.failures: list[PluginFailure] = []
        self.disabled: list[str] = []

    # Loading ---------------------------------------------------------------------------------

    def load_entry_points(self, disabled: Iterable[str] = ()) -> None:
        """Load every entry point of the ``gemmzoo`` group except the ``disabled`` names."""
        skip = set(disabled)
        found = [(_entry_point_info(ep), ep) for ep in metadata.entry_points(group=ENTRY_POINT_GROUP)]
        # gemmzoo's own plugins first, whatever their names: their backend names are then taken
        # before any other distribution's plugin can claim them.
        found.sort(key=lambda item: (not item[0].own, item[0].name, item[0].target))
        for info, entry_point in found:
            if info.name in skip:
                self.disabled.append(info.name)
                continue
            # A broken plugin must not take the others down; one that calls sys.exit() is broken too.
            try:
                plugin = _bounded(info, f"import of {info.target}", entry_point.load)
            except BackendTimeoutError as error:
                self._fail(info, f"import of {info.target} did not finish: {error} (a plugin's import is "
                                 "bounded by the time limit, GEMMZOO_TIMEOUT)")
                continue
            except (Exception, SystemExit) as error:
                location = raised_at(error, module_roots(entry_point.module))
                self._fail(info, f"failed to import {info.target}: {_one_line(error)}{_at(location)}",
                           location, format_traceback(error), error)
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
            location = defined_at(plugin)
            self._fail(info, f"could not be registered: {_one_line(error)}{_at(location, 'defined')}",
                       location, format_traceback(error), error)
            return
        self.plugins.append(info)
        pending: list[tuple[Any, Location]] = []

        def register(backend: Any) -> None:
            # the plugin's line that registered it, for messages (traceback: public, any Python)
            caller = traceback.extract_stack(limit=2)[0]
            pending.append((backend, (caller.filename, caller.lineno or 0)))

        hook = self.plugin_manager.hook.gemmzoo_register_backends
        mine = [impl for impl in hook.get_hookimpls() if impl.plugin is plugin]
        if not mine:
            self._fail(info, _no_hook(plugin), defined_at(plugin))
            return
        for impl in mine:
            try:
                arguments = {arg: register for arg in impl.argnames}
                _bounded(info, "gemmzoo_register_backends", impl.function, **arguments)
            except BackendTimeoutError as error:
                self._fail(info, f"gemmzoo_register_backends did not finish: {error} (a plugin's hook is "
                                 "bounded by the time limit, GEMMZOO_TIMEOUT)")
                return
            except (Exception, SystemExit) as error:
                location = raised_at(error, plugin_roots(plugin))
                self._fail(info, f"gemmzoo_register_backends raised {_one_line(error)}{_at(location)}",
                           location, format_traceback(error), error)
                return
        if not pending:
            self._fail(info, "gemmzoo_register_backends registered no backend (it must call "
                             "register(backend) once per backend)", defined_at(plugin))
            return
        for backend, location in pending:
            self._add_backend(backend, info, location)

    def _add_backend(self, backend: Any, info: PluginInfo, location: Location) -> None:
        problem: str | None = None
        name: Any = None
        described: str | None = None
        try:  # a member that blocks when read is refused here, not met later by every command
            problem = _bounded(info, "reading its backend's members", backend_problem, backend)
            name = _bounded(info, "reading its backend's name", lambda: backend.name)
        except BackendTimeoutError as error:
            problem = f"reading its members did not finish: {error}"
            described = f"class {type(backend).__qualname__}"  # its members are not read again
        except Exception as error:  # checked a moment ago, yet raising now: as malformed
            problem = problem or f"reading its name raised {_one_line(error)}"
        if problem:
            described = described or describe_backend(backend)
            self._fail(info, f"registered an invalid backend ({described}): {problem}"
                             f"{_at(location, 'registered')}", location)
            return
        first = self._providers.get(name)
        if first is not None and info.own and not first.own:
            # Only in-process registration can get here (entry points load gemmzoo's own first):
            # the reserved name goes to gemmzoo, and the other plugin's backend is refused.
            del self._backends[name], self._providers[name]
            where = self._registered_at.pop(name)
            self._fail(first, self._reserved(name, first, info) + _at(where, "registered"), where)
            first = None
        if first is not None:
            if first.own and not info.own:
                message = self._reserved(name, info, first)
            else:
                message = (f"backend name '{name}' refused for plugin {info.describe()}: plugin "
                           f"{first.describe()} registered it first (plugins load in entry-point "
                           "name order)")
            self._fail(info, message + _at(location, "registered"), location)
            return
        self._backends[name] = backend
        self._providers[name] = info
        self._registered_at[name] = location
        self._frozen[id(backend)] = (backend, _identity(backend))
        if info.own:
            _trusted[id(backend)] = backend

    @staticmethod
    def _reserved(name: str, refused: PluginInfo, owner: PluginInfo) -> str:
        return (f"backend name '{name}' refused for plugin {refused.describe()}: the name is "
                f"reserved by gemmzoo's own plugin {owner.describe()}")

    def _fail(self, info: PluginInfo, error: str, location: Location | None = None,
              trace: str | None = None, cause: BaseException | None = None) -> None:
        failure = PluginFailure(info, error, location, trace)
        message = f"gemmzoo plugin {info.describe()}: {error}"
        if self.strict:
            raise PluginError(message, traceback=trace) from cause
        self.failures.append(failure)
        warn_at_plugin(message, location, info)

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

    def drift(self, backend: Any) -> str | None:
        """What changed in ``backend``'s identity (name, device, dtypes) since it was registered,
        or ``None``: its verdicts, timings and reserved-name check were made under those values,
        so a backend whose identity moves is treated as broken, never as another backend."""
        entry = self._frozen.get(id(backend))
        if entry is None or entry[0] is not backend:
            return None
        try:
            now = _identity(backend)
        except Exception as error:
            return f"reading its name, device or dtypes raised {_one_line(error)} after registration"
        if now != entry[1]:
            return (f"its name, device or dtypes changed after registration (registered as {entry[1]!r}, "
                    f"now {now!r}); members are frozen at registration")
        return None

    def code_digest(self, name: str) -> str:
        """The digest of the code backend ``name`` runs (:mod:`gemmzoo.plugins.code_digest`), taken on first
        use in this process: the code imported is the code that runs until the process ends."""
        found = self._digests.get(name)
        if found is None:
            backend = self.get(name)
            where = self._registered_at.get(name)
            found = self._digests[name] = code_digest(backend, where[0] if where else None)
        return found

    def plugin_info(self, plugin_name: str) -> PluginInfo:
        """The :class:`PluginInfo` of the plugin registered as ``plugin_name`` (its entry-point
        name), or a bare one when no such plugin was registered here."""
        found = [info for info in self.plugins if info.name == plugin_name]
        return found[-1] if found else PluginInfo(plugin_name, plugin_name)

    def provider(self, name: str) -> PluginInfo:
        """The plugin that registered backend ``name``."""
        self.get(name)
        return self._providers[name]

    def select(self, names: Sequence[str] | None = None) -> list[Any]:
        """The backends named; all of them when ``names`` is empty (a session's selection,
        ``GEMMZOO_BACKENDS``, is applied by :meth:`gemmzoo.Session.select`)."""
        chosen = list(names or ())
        if not chosen:
            return self.backends()
        return [self.get(name) for name in dict.fromkeys(chosen)]


def _no_hook(plugin: Any) -> str:
    """Why a plugin registered nothing: a hook function not marked ``@gemmzoo.hookimpl``, or none."""
    try:
        found = getattr(plugin, "gemmzoo_register_backends", None)
    except Exception:
        found = None
    if callable(found):
        return ("defines gemmzoo_register_backends without @gemmzoo.hookimpl, so it is never called: "
                "mark it @gemmzoo.hookimpl")
    return ("has no gemmzoo_register_backends hook: a plugin registers its backends from a function "
            "gemmzoo_register_backends(register) marked @gemmzoo.hookimpl")


def _bounded(info: PluginInfo, what: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)`` for plugin ``info``: inline for gemmzoo's own plugins, within the
    watchdog's time limit for any other (:class:`BackendTimeoutError` when it overruns; what it
    raises, ``SystemExit`` included, is raised here as it was)."""
    if info.own:
        return fn(*args, **kwargs)

    def boxed() -> tuple[bool, Any]:
        try:
            return True, fn(*args, **kwargs)
        except BaseException as error:  # carried to the caller's thread as it was raised
            return False, error

    ok, value = watched(None, f"plugin {info.describe()}: {what}", boxed, timeout="default")
    if ok:
        return value
    raise value


def _identity(backend: Any) -> tuple[Any, ...]:
    """The members that say which backend this is."""
    return (backend.name, backend.device, frozenset(backend.dtypes))


def warn_at_plugin(message: str, location: Location | None, info: PluginInfo) -> None:
    """Issue a :class:`PluginWarning` at the plugin's file and line, not at gemmzoo's."""
    if location is None:  # nothing of the plugin's own could be found (say, its module is missing)
        location = (f"<gemmzoo plugin {info.describe()}>", 0)
    warnings.warn_explicit(message, PluginWarning, location[0], location[1])


_lock = threading.Lock()
_registry: Registry | None = None


def get_registry(config: Config | None = None) -> Registry:
    """The process-wide registry, built from the entry points on first use, under ``config``'s
    plugin settings (``strict_plugins``, ``disabled_plugins``; default: read from the
    environment); a registry built already is returned as it is."""
    global _registry
    with _lock:
        if _registry is None:
            settings = Config.from_environ() if config is None else config
            registry = Registry(strict=settings.strict_plugins)
            registry.load_entry_points(settings.disabled_plugins)
            _registry = registry
        return _registry


def reset_registry() -> None:
    """Forget the process-wide registry, so the next use reloads the entry points."""
    global _registry
    with _lock:
        _registry = None
    forget_availability()


# Availability ------------------------------------------------------------------------------------

# By id (each entry keeps its object, so that the id is not reused while it is remembered).
_availability: dict[int, tuple[Any, str | None, str | None]] = {}
_trusted: dict[int, Any] = {}
"""Backends registered by gemmzoo's own distribution: their ``unavailable_reason()`` imports
torch, CuPy or JAX, which may take longer than a short time limit, so it runs without one."""
_REASON_LIMIT = 500


def is_trusted(backend: Any) -> bool:
    """Whether ``backend`` was registered by gemmzoo's own distribution (a bundled backend)."""
    return _trusted.get(id(backend)) is backend


def probe_timeout(backend: Any) -> float | str | None:
    """The time limit of a backend's cheap calls (``unavailable_reason()``, a 1x1 ``from_numpy``):
    none for a bundled backend, the watchdog's default for any other."""
    return None if is_trusted(backend) else "default"


def probe_availability(backend: Any, registry: Registry | None = None) -> tuple[str | None, str | None]:
    """``(reason, fault)``: ``reason`` is ``None`` when ``backend`` is usable here, else one line
    saying why not; ``fault`` is set (and equals ``reason``) when the backend itself misbehaved:
    malformed members, members moved since ``registry`` registered it (default: the process-wide
    registry, where one is built; :meth:`Registry.drift`), ``unavailable_reason()`` raised, overran
    its time limit or returned something that is neither ``None`` nor a string. Answered once per
    process."""
    held = quarantined(backend)
    if held is not None:
        return held, held
    entry = _availability.get(id(backend))
    if entry is not None and entry[0] is backend:
        return entry[1], entry[2]
    reason, fault = _probe(backend, _registry if registry is None else registry)
    _availability[id(backend)] = (backend, reason, fault)
    return reason, fault


def unavailable_reason(backend: Any, registry: Registry | None = None) -> str | None:
    """``backend.unavailable_reason()``, guarded: ``None`` when usable here, else one line saying
    why not, including why the backend is broken when it is (see :func:`probe_availability`;
    ``registry`` is the one that registered it). Never raises, and waits at most the watchdog's
    time limit for a backend of another distribution."""
    return probe_availability(backend, registry)[0]


def _probe(backend: Any, registry: Registry | None) -> tuple[str | None, str | None]:
    problem = backend_problem(backend) or (registry.drift(backend) if registry is not None else None)
    if problem is not None:
        fault = f"malformed backend: {problem}"
        return fault, fault
    try:
        reason = watched(backend, "unavailable_reason()", backend.unavailable_reason,
                         timeout=probe_timeout(backend))
    except BackendTimeoutError as error:
        fault = quarantined(backend) or f"TIMEOUT: {error}"
        return fault, fault
    except Exception as error:
        fault = f"unavailable_reason() raised {_one_line(error)}"[:_REASON_LIMIT]
        return fault, fault
    if reason is None:
        return None, None
    if not isinstance(reason, str):
        fault = (f"unavailable_reason() returned {type(reason).__name__}, not a str or None: "
                 f"{' '.join(_safe_repr(reason).split())[:80]}")
        return fault, fault
    text = inert(" ".join(reason.split()))[:_REASON_LIMIT]
    return (text or "unavailable (unavailable_reason() gave an empty reason)"), None


def _safe_repr(value: Any) -> str:
    try:
        return repr(value)
    except Exception:
        return f"<{type(value).__name__}>"


def forget_availability() -> None:
    """Forget the remembered answers of :func:`unavailable_reason` (quarantines stay)."""
    _availability.clear()
