"""gemmzoo.matmul's compiled dispatch for torch tensors (``dispatch.cpp`` beside this file).

On a warm problem, ``gemmzoo.matmul`` does three things: it reads the problem's key from the
operands, finds the plan kept for it, and calls the plan. From Python, reading the key (shapes,
strides, dtype, device and autograd state of both tensors) costs more than the rest, and a plan
that is ``torch.mm`` itself still goes through torch's Python argument parsing. The compiled
dispatch reads the key in C++ (operands of two to four dimensions: products and batched
products), keeps its own table of the plans the Python dispatch made, and launches ``at::mm``
directly for plans declared to be ``torch.mm``
(:func:`gemmzoo.contract.backend.declare_torch_mm`); other plans (``torch.matmul`` for a batched
product, say) are called as they are.

It is a torch C++ extension, built with ``torch.utils.cpp_extension`` (a C++ compiler and ninja),
never while a product waits: :func:`build` builds it (``gemmzoo cache --build-dispatch``
calls it), and ``gemmzoo.matmul`` uses it from then on in every process whose torch,
Python and source match the build. With the session's ``compiled_dispatch="auto"`` (the default),
the first product of CUDA torch tensors in a process where it is not built starts the build in
a background process (:mod:`gemmzoo.native.background`), and the process switches to it once it
is built. ``GEMMZOO_COMPILED_DISPATCH=on`` uses it only where it is built; ``0``/``off`` turns it
off. Without it nothing changes but speed.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import importlib.util
import os
import platform
import shutil
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import NamedTuple

from gemmzoo.config import COMPILED_DISPATCH, environment_value
from gemmzoo.errors import GemmError

SOURCE = Path(__file__).with_name("dispatch.cpp")
ENV_SWITCH = COMPILED_DISPATCH

_lock = threading.Lock()
_loaded: dict[Path, ModuleType] = {}


class CompiledDispatchError(GemmError):
    """The compiled dispatch could not be built here (no compiler, no ninja, a failed build)."""


class Status(NamedTuple):
    """Where the compiled dispatch of this torch and Python lives, and whether it is usable."""

    built: bool
    path: Path | None
    reason: str | None
    """Why it is not used here, or ``None``."""


#: Beside the build, in its directory: the background build's output, and the record of its
#: failure (the error, one line), which stops further background builds of that directory until a
#: build succeeds (``gemmzoo cache --build-dispatch``).
BACKGROUND_LOG = "background-build.log"
BACKGROUND_FAILED = "background-build.failed"


def enabled() -> bool:
    """Whether the current session's ``compiled_dispatch`` is ``"auto"`` or ``"on"`` (not
    ``"off"``: ``GEMMZOO_COMPILED_DISPATCH=0``)."""
    from gemmzoo.tuning.state import current

    return current().config.compiled_dispatch != "off"


def mode() -> str:
    """The current session's ``compiled_dispatch``: ``"auto"``, ``"on"`` or ``"off"``."""
    from gemmzoo.tuning.state import current

    return current().config.compiled_dispatch


def build_directory() -> tuple[str, Path] | None:
    """The module name and build directory of the compiled dispatch for the installed torch and
    this Python, in the current session's cache; ``None`` when torch is not installed."""
    version = _torch_version()
    return None if version is None else _identity(version)


def background_failure(directory: Path) -> str | None:
    """The error of the background build of ``directory`` that failed, as it recorded it, or
    ``None`` where none failed since the last build that succeeded."""
    try:
        text = (directory / BACKGROUND_FAILED).read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return None
    except OSError as error:
        return f"its record cannot be read ({type(error).__name__})"
    from gemmzoo.plugins.inert import inert

    said = inert(" ".join(text.split())[:400])  # one line, bounded, no control character: it is shown
    return said or "no error recorded"


def building(directory: Path) -> bool:
    """Whether a build holds :data:`BUILD_LOCK` of ``directory`` now (asked without waiting)."""
    try:
        import fcntl
    except ImportError:
        return False
    try:
        handle = os.open(directory / BUILD_LOCK, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(handle)  # closing lets go of a lock taken here
    return False


def _torch_version() -> str | None:
    """The installed torch's version (its local part names the build: +cpu, +cu130, ...), read
    without importing torch; ``None`` when torch is not installed."""
    try:
        return importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return None


def _identity(torch_version: str) -> tuple[str, Path]:
    """The module name and build directory for this source, torch and Python."""
    from gemmzoo.tuning.db import default_cache_dir

    parts = [SOURCE.read_bytes(), torch_version.encode(), sys.version.encode(), platform.machine().encode()]
    digest = hashlib.sha256(b"\0".join(parts)).hexdigest()[:16]
    name = f"gemmzoo_dispatch_{digest}"
    return name, default_cache_dir() / "compiled-dispatch" / name


def _library(name: str, directory: Path) -> Path:
    """Where ``torch.utils.cpp_extension.load`` leaves the module it builds."""
    return directory / f"{name}{'.pyd' if sys.platform == 'win32' else '.so'}"


def _manifest(library: Path) -> Path:
    """The file where :func:`build` records the digest of the library it built."""
    return library.with_name(library.name + ".sha256")


def _digest(path: Path) -> str:
    hasher = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            hasher.update(block)
    return hasher.hexdigest()


def verified(library: Path) -> str | None:
    """``None`` when ``library`` is one :func:`build` made: its digest matches the one recorded at
    the build, and it and its record belong to this user and are writable by no one else; else
    why it must not be loaded. Nothing in the cache directory runs as code otherwise (a shared
    object placed there by anyone or anything else is never loaded)."""
    record = _manifest(library)
    try:
        for path in (library, record):
            info = path.stat()
            if hasattr(os, "getuid") and info.st_uid != os.getuid():
                return f"{path.name} belongs to another user"
            if info.st_mode & 0o022:
                return f"{path.name} is writable by other users"
        expected = record.read_text(encoding="ascii").strip()
        if _digest(library) != expected:
            return "its digest does not match the one recorded when gemmzoo built it"
    except FileNotFoundError:
        return "gemmzoo did not build it (no build record beside it)"
    except (OSError, UnicodeDecodeError) as error:
        return f"its build record cannot be read ({type(error).__name__})"
    return None


def toolchain_missing() -> str | None:
    """What a build needs and this machine lacks (a C++ compiler, ninja), or ``None``."""
    compiler = environment_value("CXX") or "c++"  # the compiler torch's extension builder runs
    if shutil.which(compiler) is None:
        return f"no C++ compiler ({compiler}) on the PATH"
    if shutil.which("ninja") is None:
        return "no ninja on the PATH (pip install ninja)"
    return None


def status() -> Status:
    """Whether the compiled dispatch is built for this torch and Python, and where."""
    if not enabled():
        return Status(False, None, f"turned off ({ENV_SWITCH}=0 or the session's compiled_dispatch=\"off\")")
    version = _torch_version()
    if version is None:
        return Status(False, None, "torch is not installed")
    name, directory = _identity(version)
    library = _library(name, directory)
    if not library.exists():
        log = directory / BACKGROUND_LOG
        if building(directory):
            return Status(False, library,
                          f"being built now (log: {log}); gemmzoo cache --build-dispatch waits for it")
        failed = background_failure(directory)
        if failed is not None:
            return Status(False, library, f"its background build failed: {failed} (log: {log}); not tried "
                                          "again by itself: gemmzoo cache --build-dispatch tries again")
        if mode() == "auto":
            missing = toolchain_missing()
            if missing is not None:
                return Status(False, library, f"not built, and not built in the background here: {missing}")
            return Status(False, library, "not built yet: built in the background on the first product of "
                                          "CUDA torch tensors (compiled_dispatch=auto), or now by gemmzoo "
                                          "cache --build-dispatch")
        return Status(False, library, "not built yet: gemmzoo cache --build-dispatch")
    refused = verified(library)
    if refused is not None:
        return Status(False, library, f"not loaded: {refused} (gemmzoo cache --build-dispatch rebuilds it)")
    return Status(True, library, None)


def _import(name: str, library: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, library)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {library}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load() -> ModuleType | None:
    """The compiled dispatch when it is built, enabled and importable here, else ``None``. Never
    builds; imports torch only where torch is already imported (a torch tensor's caller has)."""
    if not enabled() or "torch" not in sys.modules:
        return None
    version = _torch_version()
    if version is None:
        return None
    with _lock:
        name, directory = _identity(version)
        library = _library(name, directory)
        if not library.exists():
            return None
        if library not in _loaded:
            if verified(library) is not None:  # not the library gemmzoo built: never loaded
                return None
            try:
                _loaded[library] = _import(name, library)
            except (ImportError, OSError):  # built for another environment that hashed alike: rebuild it
                return None
        return _loaded[library]


#: torch's lock file in a build directory (:class:`torch.utils.file_baton.FileBaton`): made when a
#: build starts, removed when it ends, so one that was killed leaves it, and every later build of
#: the directory then waits for it forever.
TORCH_BATON = "lock"
#: gemmzoo's own lock file in a build directory, held while gemmzoo builds there.
BUILD_LOCK = "gemmzoo-build.lock"


@contextlib.contextmanager
def build_lock(directory: Path) -> Iterator[None]:
    """Hold the right to build in ``directory`` against other processes: an advisory lock on
    :data:`BUILD_LOCK` (``flock``), which the system lets go when its holder dies, however it dies.
    Holding it, no other gemmzoo build runs there, so torch's lock file, if present, was left by a
    build that died, and it is removed. Where ``flock`` is missing (not POSIX), torch's lock file
    alone guards the build."""
    try:
        import fcntl
    except ImportError:
        yield
        return
    with open(directory / BUILD_LOCK, "ab") as held:
        fcntl.flock(held.fileno(), fcntl.LOCK_EX)  # waits for a build running now
        try:
            (directory / TORCH_BATON).unlink(missing_ok=True)
            yield
        finally:
            fcntl.flock(held.fileno(), fcntl.LOCK_UN)


def build(verbose: bool = False) -> ModuleType:
    """Build (or find built) and import the compiled dispatch for this torch and Python (the caller
    hands it to :func:`gemmzoo.dispatch.matmul.use_compiled` to use it in this process: this module
    imports no dispatch). Raises :class:`CompiledDispatchError` saying why it cannot be built
    here."""
    version = _torch_version()
    if version is None:
        raise CompiledDispatchError("the compiled dispatch needs torch, which is not installed")
    from torch.utils import cpp_extension

    if not cpp_extension.is_ninja_available():
        raise CompiledDispatchError("the compiled dispatch needs ninja to build (pip install ninja)")
    name, directory = _identity(version)
    library = _library(name, directory)
    with _lock:
        if library not in _loaded:
            directory.mkdir(parents=True, exist_ok=True)
            with build_lock(directory):
                _build(name, directory, library, verbose)
        return _loaded[library]


def _build(name: str, directory: Path, library: Path, verbose: bool) -> None:
    """Build the library (or find it built) into ``directory`` and import it, holding
    :func:`build_lock`; the caller holds :data:`_lock`."""
    from torch.utils import cpp_extension

    if library.exists() and verified(library) is not None:  # not ours: never reused as built
        library.unlink()
    try:
        _loaded[library] = cpp_extension.load(
            name=name, sources=[str(SOURCE)], build_directory=str(directory), extra_cflags=["-O2"],
            with_cuda=False, verbose=verbose)
    except Exception as error:  # the compiler's own message: its errors, else its last lines
        lines = str(error).strip().splitlines()
        said = [line.strip() for line in lines if "error" in line.lower()][:4] or lines[-6:]
        raise CompiledDispatchError(f"building the compiled dispatch in {directory} failed: "
                                    + " | ".join(said)) from error
    record_build(library)


def record_build(library: Path) -> None:
    """Record ``library`` as the one gemmzoo built (its digest beside it, see :func:`verified`),
    made writable by its owner alone, and forget any failed background build of its directory."""
    library.chmod(library.stat().st_mode & ~0o022)  # whatever the umask: no one else may edit it
    record = _manifest(library)
    temporary = record.with_name(f"{record.name}.{os.getpid()}.tmp")
    temporary.write_text(_digest(library) + "\n", encoding="ascii")
    temporary.chmod(0o644)
    os.replace(temporary, record)
    (library.parent / BACKGROUND_FAILED).unlink(missing_ok=True)
