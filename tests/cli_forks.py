"""Many ``python -m gemmzoo`` runs for the price of one interpreter start.

A server process imports what every run would import anyway (gemmzoo's third-party dependencies,
and for runs that probe them, the frameworks), never gemmzoo itself, then forks one child per run.
The child takes the run's environment and working directory, redirects its output to files, and
runs ``gemmzoo`` as ``python -m gemmzoo`` does: gemmzoo is imported afresh in every run, its
consoles read the run's ``COLUMNS`` and ``TTY_COMPATIBLE``, and its exit code, traceback and
exit handlers are those of a process of its own. The server also compiles gemmzoo's and its
plugins' sources once (without importing them), so that a child's imports compile none of them
again, as where Python keeps its bytecode caches. For tests about what a command prints and its
exit code, where the interpreter's start is not what is tested (tests of imports and of the start
itself, and of signals, run ``python -m gemmzoo`` as a plain subprocess).
"""

from __future__ import annotations

import io
import json
import locale
import os
import select
import subprocess
import sys
import tempfile
from pathlib import Path

from fake_distributions import subprocess_env

#: What ``python -m gemmzoo`` imports before any command runs (none of it reads gemmzoo's settings).
DEPENDENCIES = ("numpy", "numpy.random", "ml_dtypes", "pluggy", "platformdirs", "threadpoolctl",
                "rich.console", "rich.table", "rich.progress", "sqlite3", "json", "importlib.metadata",
                "email.parser", "hashlib", "concurrent.futures", "argparse", "multiprocessing.connection",
                "statistics", "subprocess")
#: What ``gemmzoo list -v`` imports to probe the bundled backends.
FRAMEWORKS = ("torch", "jax", "triton")

SERVER = r'''
import importlib, importlib.metadata, importlib.util, json, os, runpy, sys
from importlib import _bootstrap_external as external
from pathlib import Path

for name in sys.argv[1:]:
    try:
        importlib.import_module(name)
    except ImportError:
        pass
# gemmzoo's and its plugins' sources compiled once here (not imported): a child's import compiles
# none of them again, as where Python may keep its bytecode caches; a source changed since (other
# bytes) is compiled as usual.
# (Found as an import finds them, an editable install's finder included; none is imported.)
compiled = {}
entries = importlib.metadata.entry_points(group="gemmzoo")
plugins = {entry.value.split(":")[0].split(".")[0] for entry in entries}
for name in sorted({"gemmzoo", *plugins}):
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        continue
    for folder in (spec.submodule_search_locations or []) if spec else []:
        for source in Path(folder).rglob("*.py"):
            data = source.read_bytes()
            compiled[str(source), data] = compile(data, str(source), "exec", dont_inherit=True)
compile_source = external.SourceLoader.source_to_code


def source_to_code(self, data, path, *, _optimize=-1):
    code = compiled.get((path, bytes(data))) if _optimize == -1 else None
    return code if code is not None else compile_source(self, data, path, _optimize=_optimize)


external.SourceLoader.source_to_code = source_to_code
sys.stdout.write("ready\n")
sys.stdout.flush()
for line in sys.stdin:
    request = json.loads(line)
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        os.environ.clear()
        os.environ.update(request["env"])
        os.chdir(request["cwd"])
        sys.path[0] = request["cwd"]  # as `python -m` puts the working directory first
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
            os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), fd)
        sys.stdin = open(0, closefd=False)
        sys.argv = ["gemmzoo", *request["args"]]
        runpy.run_module("gemmzoo", run_name="__main__", alter_sys=True)
        sys.exit(0)  # as the end of `python -m gemmzoo`; an exception goes up and exits 1 with its traceback
    _, status = os.waitpid(pid, 0)
    sys.stdout.write(json.dumps(os.waitstatus_to_exitcode(status)) + "\n")
    sys.stdout.flush()
'''


class CliForks:
    """A server of ``python -m gemmzoo`` runs with ``site`` first on the path (see
    :func:`fake_distributions.subprocess_env`), preloading ``preload`` (module names)."""

    def __init__(self, site: Path, preload: tuple[str, ...] = DEPENDENCIES) -> None:
        self.site = site
        self.env = subprocess_env(site)
        self.folder = Path(tempfile.mkdtemp(prefix="cli-forks-"))
        self.process = subprocess.Popen([sys.executable, "-c", SERVER, *preload], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, text=True, env=self.env)
        self.runs = 0
        assert self._line(300) == "ready"

    def _line(self, timeout: float) -> str:
        assert self.process.stdout is not None
        ready, _, _ = select.select([self.process.stdout], [], [], timeout)
        if not ready:
            self.close()
            raise subprocess.TimeoutExpired(self.process.args, timeout)
        return self.process.stdout.readline().strip()

    def run(self, *args: str, timeout: float = 300, **variables: str) -> subprocess.CompletedProcess[str]:
        """What :func:`fake_distributions.run_gemmzoo` returns for the same arguments."""
        env = subprocess_env(self.site, **variables)
        same_path = env.get("PYTHONPATH") == self.env.get("PYTHONPATH")
        assert same_path, "a run on another path needs a server of its own"
        self.runs += 1
        out, err = self.folder / f"{self.runs}.out", self.folder / f"{self.runs}.err"
        request = {"args": list(args), "env": env, "cwd": os.getcwd(), "stdout": str(out), "stderr": str(err)}
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        code = int(self._line(timeout))
        return subprocess.CompletedProcess([sys.executable, "-m", "gemmzoo", *args], code,
                                           _text(out), _text(err))

    def close(self) -> None:
        """End the server."""
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()


def _text(path: Path) -> str:
    """A file's bytes read as ``subprocess.run(text=True)`` reads a pipe (universal newlines)."""
    data = path.read_bytes() if path.exists() else b""
    return io.TextIOWrapper(io.BytesIO(data), encoding=locale.getpreferredencoding(False)).read()
