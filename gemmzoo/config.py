"""gemmzoo's configuration: the one module that reads the environment.

A :class:`Config` is frozen and is read once: :meth:`Config.from_environ` reads gemmzoo's
variables (and the few of other tools that gemmzoo's core acts on), parses each with one parser
per kind (:func:`parse_flag`, :func:`parse_names`, :func:`parse_timeout`) and validates it whole;
options of the command line or keywords of :class:`gemmzoo.Session` override fields with
:meth:`Config.replace`, which validates again. A bad value raises :class:`ConfigError`, naming
the variable or option and what it accepts (the command line exits 2 on it).

Code elsewhere asks the current session's config (:func:`gemmzoo.session.current`), never the
environment. Worker processes inherit the parent's config through :meth:`Config.child_environment`.

This module also keeps which session is current (the context variable ``with Session(...)`` sets,
and the slot of the default session), so that the modules below the session (the plugin host's
watchdog, the tuning database, the grids, the shipped prior) read the configuration in force
without importing the session, which imports them: :func:`active` and :func:`current_config`.
The session itself is made above (:func:`gemmzoo.tuning.state.default`).
"""

from __future__ import annotations

import contextvars
import dataclasses
import math
import os
import sys
import threading
from collections.abc import Callable, Mapping, MutableMapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

from gemmzoo.errors import GemmError

#: gemmzoo's version (``gemmzoo.__version__``; a stored measurement records it).
VERSION = "0.1.0"

#: The words that turn a switch off (any case, surrounding spaces ignored); any other non-empty
#: value turns it on, and an empty or unset variable leaves the switch at its default.
OFF_WORDS = frozenset({"0", "false", "no", "off"})

#: Seconds a backend task may take when neither ``--timeout`` nor ``GEMMZOO_TIMEOUT`` says.
DEFAULT_TIMEOUT_S = 60.0
#: The longest limit accepted: a limit past a day is a typing error, not a plan.
MAX_TIMEOUT_S = 86400.0

BACKENDS = "GEMMZOO_BACKENDS"
CACHE_DIR = "GEMMZOO_CACHE_DIR"
DISABLE_PLUGINS = "GEMMZOO_DISABLE_PLUGINS"
STRICT_PLUGINS = "GEMMZOO_STRICT_PLUGINS"
TUNE = "GEMMZOO_TUNE"
RECORD = "GEMMZOO_RECORD"
TIMEOUT = "GEMMZOO_TIMEOUT"
COMPILED_DISPATCH = "GEMMZOO_COMPILED_DISPATCH"
_FIELD_VARIABLES = frozenset({BACKENDS, CACHE_DIR, DISABLE_PLUGINS, STRICT_PLUGINS, TUNE, RECORD, TIMEOUT,
                              COMPILED_DISPATCH})


class ConfigError(GemmError, ValueError):
    """A configuration value (an environment variable, an option, a keyword) that is not valid."""


def parse_flag(text: str | None, default: bool) -> bool:
    """A switch: ``default`` when ``text`` is unset or blank, false for one of :data:`OFF_WORDS`,
    else true."""
    word = (text or "").strip().lower()
    if not word:
        return default
    return word not in OFF_WORDS


#: The values of ``compiled_dispatch``: build it in the background on first use and use it
#: (``auto``), use it where built (``on``), never (``off``).
COMPILED_DISPATCH_MODES = ("auto", "on", "off")


def parse_compiled_dispatch(text: str | None, default: str = "auto") -> str:
    """``GEMMZOO_COMPILED_DISPATCH``: ``default`` when unset or blank, ``"off"`` for one of
    :data:`OFF_WORDS`, ``"auto"`` for ``auto``, else ``"on"`` (any other word turns a switch on)."""
    word = (text or "").strip().lower()
    if not word:
        return default
    if word in OFF_WORDS:
        return "off"
    return "auto" if word == "auto" else "on"


def parse_names(text: str | None) -> tuple[str, ...]:
    """Comma-separated names, stripped, empties and repeats dropped, in order."""
    return tuple(dict.fromkeys(part.strip() for part in (text or "").split(",") if part.strip()))


def parse_timeout(text: str, where: str = "timeout") -> float | None:
    """Seconds from ``text`` (``--timeout``, ``GEMMZOO_TIMEOUT``): ``None`` (no limit) for ``0``
    or one of :data:`OFF_WORDS` or ``none``; otherwise a finite number above 0 and at most
    :data:`MAX_TIMEOUT_S`. Raises :class:`ConfigError` naming ``where`` for anything else."""
    word = text.strip().lower()
    if word in OFF_WORDS or word == "none":
        return None
    try:
        seconds = float(word)
    except ValueError:
        seconds = math.nan
    return check_timeout(seconds, where, text)


def check_timeout(seconds: float | None, where: str = "timeout", shown: Any = None) -> float | None:
    """``seconds`` validated as a time limit (``None`` or 0: no limit)."""
    if seconds is None or seconds == 0:
        return None
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not math.isfinite(seconds) \
            or not 0 < seconds <= MAX_TIMEOUT_S:
        prefix = "" if where == "timeout" else f"{where}: "
        raise ConfigError(f"{prefix}timeout must be a number of seconds above 0 and at most "
                          f"{MAX_TIMEOUT_S:g} (a day), or 0/off for none; got "
                          f"{seconds if shown is None else shown!r}")
    return float(seconds)


def _default_cache_dir(environ: Mapping[str, str]) -> Path:
    """The user cache directory of gemmzoo (platformdirs' where installed)."""
    try:
        import platformdirs
    except ImportError:
        pass
    else:
        return Path(platformdirs.user_cache_dir("gemmzoo", appauthor=False))
    home = Path.home()
    if sys.platform == "win32":
        return Path(environ.get("LOCALAPPDATA") or home / "AppData" / "Local") / "gemmzoo" / "Cache"
    if sys.platform == "darwin":
        return home / "Library" / "Caches" / "gemmzoo"
    return Path(environ.get("XDG_CACHE_HOME") or home / ".cache") / "gemmzoo"


@dataclass(frozen=True)
class Config:
    """Everything gemmzoo reads from outside its arguments, read once.

    ``backends``: the backends that the suite, the benchmarks and selection are restricted to
    (``GEMMZOO_BACKENDS``; empty: all). ``cache_dir``: the tuning database's directory
    (``GEMMZOO_CACHE_DIR``, else the user cache directory). ``disabled_plugins``: entry-point
    names not loaded (``GEMMZOO_DISABLE_PLUGINS``). ``strict_plugins``: a plugin that fails to
    load is an error (``GEMMZOO_STRICT_PLUGINS``). ``tune``: ``best_backend`` measures on a miss
    (``GEMMZOO_TUNE``, default on). ``record``: ``gemmzoo.matmul`` records problems it answered
    without a measurement (``GEMMZOO_RECORD``, default on). ``timeout``: seconds a backend task
    may take, ``None`` for no limit (``GEMMZOO_TIMEOUT``, ``--timeout``). ``compiled_dispatch``:
    ``"auto"`` (default) uses the compiled dispatch where it is built and, where it is not, builds it
    in a background process on the first product of CUDA torch tensors; ``"on"`` uses it where it is
    built; ``"off"`` never (``GEMMZOO_COMPILED_DISPATCH``: ``auto``, ``1``/``on``, ``0``/``off``;
    ``True``/``False`` are taken for ``"on"``/``"off"``).
    ``triton_interpret``: Triton's CPU interpreter is on (``TRITON_INTERPRET=1``).
    ``xdist_worker``: the pytest-xdist worker this process is (``PYTEST_XDIST_WORKER``), or "".
    ``visible_devices``: ``CUDA_VISIBLE_DEVICES`` as set (``None`` when unset).
    ``variables``: the other ``GEMMZOO_*`` variables as set, for the settings of plugins, which
    read theirs with :meth:`variable` (the core knows no plugin's settings by name).
    """

    backends: tuple[str, ...] = ()
    cache_dir: Path = dataclasses.field(default_factory=lambda: _default_cache_dir(os.environ))
    disabled_plugins: tuple[str, ...] = ()
    strict_plugins: bool = False
    tune: bool = True
    record: bool = True
    timeout: float | None = DEFAULT_TIMEOUT_S
    compiled_dispatch: str = "auto"
    triton_interpret: bool = False
    xdist_worker: str = ""
    visible_devices: str | None = None
    variables: Mapping[str, str] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("backends", "disabled_plugins"):
            value = getattr(self, name)
            if isinstance(value, str):
                value = parse_names(value)
            if not all(isinstance(item, str) and item for item in value):
                raise ConfigError(f"{name}: names must be non-empty strings; got {value!r}")
            object.__setattr__(self, name, tuple(dict.fromkeys(value)))
        if not isinstance(self.cache_dir, (str, os.PathLike)):
            raise ConfigError(f"cache_dir: a directory path; got {self.cache_dir!r}")
        object.__setattr__(self, "cache_dir", Path(self.cache_dir).expanduser())
        if isinstance(self.compiled_dispatch, bool):  # the switch it was: True is on, False off
            object.__setattr__(self, "compiled_dispatch", "on" if self.compiled_dispatch else "off")
        if self.compiled_dispatch not in COMPILED_DISPATCH_MODES:
            raise ConfigError(f"compiled_dispatch: one of {', '.join(COMPILED_DISPATCH_MODES)} (or "
                              f"True/False); got {self.compiled_dispatch!r}")
        for name in ("strict_plugins", "tune", "record", "triton_interpret"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(f"{name}: True or False; got {getattr(self, name)!r}")
        object.__setattr__(self, "timeout", check_timeout(self.timeout))
        object.__setattr__(self, "variables", MappingProxyType(dict(self.variables)))

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> Config:
        """The configuration the environment (``os.environ`` unless ``environ`` is given) sets,
        with ``overrides`` (field names) on top. Raises :class:`ConfigError` naming the variable
        of a bad value."""
        env: Mapping[str, str] = os.environ if environ is None else environ
        cache = env.get(CACHE_DIR, "").strip()
        timeout_text = env.get(TIMEOUT, "").strip()
        values: dict[str, Any] = {
            "backends": parse_names(env.get(BACKENDS)),
            "cache_dir": Path(cache) if cache else _default_cache_dir(env),
            "disabled_plugins": parse_names(env.get(DISABLE_PLUGINS)),
            "strict_plugins": parse_flag(env.get(STRICT_PLUGINS), False),
            "tune": parse_flag(env.get(TUNE), True),
            "record": parse_flag(env.get(RECORD), True),
            "timeout": parse_timeout(timeout_text, TIMEOUT) if timeout_text else DEFAULT_TIMEOUT_S,
            "compiled_dispatch": parse_compiled_dispatch(env.get(COMPILED_DISPATCH)),
            "triton_interpret": env.get("TRITON_INTERPRET", "0").strip() == "1",
            "xdist_worker": env.get("PYTEST_XDIST_WORKER", ""),
            "visible_devices": env.get("CUDA_VISIBLE_DEVICES"),
            "variables": {name: value for name, value in env.items()
                          if name.startswith("GEMMZOO_") and name not in _FIELD_VARIABLES},
        }
        values.update(overrides)
        return cls(**values)

    def replace(self, **overrides: Any) -> Config:
        """A copy with ``overrides`` (field names), validated."""
        unknown = set(overrides) - {f.name for f in dataclasses.fields(self)}
        if unknown:
            raise ConfigError(f"unknown configuration field(s): {', '.join(sorted(unknown))}; known: "
                              f"{', '.join(f.name for f in dataclasses.fields(self))}")
        return dataclasses.replace(self, **overrides)

    def variable(self, name: str, default: str = "") -> str:
        """The ``GEMMZOO_*`` variable ``name`` as it was read (``default`` when unset)."""
        return self.variables.get(name, default)

    def child_environment(self) -> dict[str, str]:
        """The variables that give a worker process started from this one the same configuration
        (its own :meth:`from_environ` reads them back)."""
        return {
            **self.variables,
            BACKENDS: ",".join(self.backends),
            CACHE_DIR: str(self.cache_dir),
            DISABLE_PLUGINS: ",".join(self.disabled_plugins),
            STRICT_PLUGINS: "1" if self.strict_plugins else "0",
            TUNE: "1" if self.tune else "0",
            RECORD: "1" if self.record else "0",
            TIMEOUT: "0" if self.timeout is None else repr(self.timeout),
            COMPILED_DISPATCH: self.compiled_dispatch,
        }


def environment_value(name: str) -> str | None:
    """The current value of another tool's variable ``name`` (``None`` when unset), for the few
    places that must follow a value a process changes while it runs (``CUDA_VISIBLE_DEVICES`` in
    a worker); gemmzoo's own settings come from :class:`Config`."""
    return os.environ.get(name)


def process_environment() -> MutableMapping[str, str]:
    """This process's environment, for the few places that *set* a variable for the libraries
    of this process or for the processes it starts (a worker's ``CUDA_VISIBLE_DEVICES``, the
    configuration a worker inherits); gemmzoo's own settings are read from :class:`Config`."""
    return os.environ


# The session in force --------------------------------------------------------------------------
# The sessions are gemmzoo.tuning.state.SessionState objects (gemmzoo.Session among them); this
# module does not import them, it only holds them.

_current: contextvars.ContextVar[Any] = contextvars.ContextVar("gemmzoo_session")
# The default session, made on first use: a one-slot list so that making it needs no `global`.
_default: list[Any] = []
_default_lock = threading.Lock()


def active() -> Any:
    """The current session where one exists already (the innermost ``with Session(...)`` block's,
    else the default one once made), else ``None``: none is made."""
    found = _current.get(None)
    if found is not None:
        return found
    return _default[0] if _default else None


def current_config() -> Config:
    """The current session's configuration; before any session exists, the environment's, read
    now (no session is made: see :func:`active`)."""
    found = active()
    return Config.from_environ() if found is None else found.config


def default_session(make: Callable[[], Any]) -> Any:
    """The default session, made by ``make()`` on the first call (one thread makes it)."""
    if not _default:
        with _default_lock:
            if not _default:
                _default.append(make())
    return _default[0]


def swap_default_session(session: Any) -> list[Any]:
    """Make ``session`` the default session; returns the one it replaces (``[]`` if none)."""
    with _default_lock:
        old = _default[:]
        _default[:] = [session]
    return old
