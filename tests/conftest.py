"""Test-wide setup: Triton's interpreter on machines without a CUDA GPU, the ``gpu`` marker, and an
empty tuning cache for the modules that ask for one (``pytest.mark.usefixtures("empty_cache")``)."""

from __future__ import annotations

import functools
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest


@functools.cache
def cuda_available() -> bool:
    """Whether torch sees a CUDA GPU (False without torch)."""
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def skip_dead_overflow_work() -> None:
    """Spare Triton's interpreter the overflow checks it computes and never reads.

    The interpreter redoes every int32 add, sub and mul of a kernel in int64 and compares the
    result with int32's range (``sanitize_overflow``), then hands the comparison to
    ``device_assert``, which does nothing unless the options say ``debug``; the interpreter's never
    do. That dead work is about half of an interpreted kernel's time (its index arithmetic).
    Turning it off changes no value a kernel computes and drops no check; where a Triton version
    lacks these names, or runs debug, nothing is changed (``test_triton.py`` checks the premise).
    """
    import dataclasses
    import importlib.util

    if importlib.util.find_spec("triton") is None:
        return
    from triton.runtime import interpreter

    builder = getattr(interpreter, "interpreter_builder", None)
    options = getattr(builder, "options", None)
    if not dataclasses.is_dataclass(options) or getattr(options, "debug", True):
        return
    if getattr(options, "sanitize_overflow", False):
        builder.options = dataclasses.replace(options, sanitize_overflow=False)


def memoize_interpreter_dtypes() -> None:
    """Let Triton's interpreter find the NumPy dtype of each Triton type once, not at every
    operation.

    The interpreter's ``_get_np_dtype`` builds its table of Triton types anew at every call, and
    most operations of an interpreted kernel call it: about a tenth of the kernel's time. Its
    answer depends only on the element type (every pointer: ``uint64``), so each answer, the
    function's own, is kept per element type (``test_triton.py`` checks them against it). Where a
    Triton version lacks the function, nothing is changed.
    """
    import importlib.util

    if importlib.util.find_spec("triton") is None:
        return
    from triton.runtime import interpreter

    original = getattr(interpreter, "_get_np_dtype", None)
    if callable(original) and not hasattr(original, "original"):
        interpreter._get_np_dtype = memoized_np_dtype(original)


def memoized_np_dtype(original: Callable[[object], object]) -> Callable[[object], object]:
    """``original`` (Triton's interpreter's ``_get_np_dtype``), its answers kept per element type;
    the original is the result's ``original``."""
    import triton.language as tl

    answers: dict[object, object] = {}

    def np_dtype(tt_dtype: object) -> object:
        scalar = tt_dtype.element_ty if isinstance(tt_dtype, tl.block_type) else tt_dtype
        key = "pointer" if isinstance(scalar, tl.pointer_type) else scalar
        try:
            found = answers.get(key)
        except TypeError:  # a type that cannot be a key: asked every time, as before
            return original(tt_dtype)
        if found is None:
            found = answers[key] = original(tt_dtype)
        return found

    np_dtype.original = original
    return np_dtype


def hands_tests_out(config: pytest.Config) -> bool:
    """Whether this process is pytest-xdist's controller: it starts the workers and runs no test."""
    if hasattr(config, "workerinput") or config.option.collectonly:
        return False
    return getattr(config.option, "dist", "no") != "no" and bool(getattr(config.option, "tx", None))


def pytest_configure(config: pytest.Config) -> None:
    # Without a GPU, run the Triton backends' kernels on the CPU under Triton's interpreter, so
    # the conformance suite covers them in CI. This must happen before the kernels are defined:
    # triton.jit reads TRITON_INTERPRET when it decorates a kernel. An explicit setting wins.
    # Each process that runs tests decides it (xdist's controller runs none: torch and Triton
    # stay unimported there).
    if not hands_tests_out(config):
        if not cuda_available():
            os.environ.setdefault("TRITON_INTERPRET", "1")
        if os.environ.get("TRITON_INTERPRET") == "1" and not config.option.collectonly:
            skip_dead_overflow_work()
            memoize_interpreter_dtypes()
    # Nothing a test does reaches the user's own tuning cache: a test that needs a cache of its
    # own sets one (and makes a session of it); every other session of the run uses this one.
    os.environ["GEMMZOO_CACHE_DIR"] = tempfile.mkdtemp(prefix="gemmzoo-tests-")
    # Nor does a test start the compiled dispatch's background build by itself (on a GPU, the
    # default "auto" would start one in every test's fresh cache): the compiled dispatch is used
    # where built, and the tests of the background build ask for "auto" themselves.
    os.environ.setdefault("GEMMZOO_COMPILED_DISPATCH", "on")


# The files that take longest, most first: pytest-xdist's --dist loadfile hands out files in
# collection order, so starting with these keeps one worker from finishing a long file alone
# while the other idles (the measurements are in docs/results/2026-11-27-test-suite-time.md).
LONGEST_FIRST = (
    "test_conformance.py",
    "test_plugin_boundary.py",
    "test_cli_output.py",
    "test_pytest_benchmarks.py",
    "test_cli_behaviour.py",
    "test_example_plugin_venv.py",
    "test_scale_executors.py",
    "test_matmul.py",
    "test_timing.py",
    "test_interrupt.py",
    "test_compare_verdicts.py",
    "test_random_cases.py",
    "test_cli.py",
    "test_trust_files.py",
    "test_scale_out.py",
    "test_jax_backend.py",
    "test_tune_contenders.py",
    "test_trust_plugin_bounds.py",
    "test_collection_without_torch.py",
    "test_model_example.py",
    "test_triton_fp8.py",
    "test_trust_edits.py",
)


# Files that check again what another file checks, run by the worker that runs that file, after it:
# its process has then compiled the same problems already (Inductor, JAX's jit), and what these files
# check is checked without the compilers' start-up a second time. The key's tests keep their ids.
SAME_WORKER = {
    "test_torch_compile_backend.py": "test_conformance.py",
    "test_jax_backend.py": "test_conformance.py",
}


@pytest.hookimpl(tryfirst=True, optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object | None:
    """pytest-xdist's ``--dist loadfile``, with the files of :data:`SAME_WORKER` in the scope of
    the file they name (other modes: pytest-xdist's own)."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class SharedWarmth(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            scope = super()._split_scope(nodeid)
            folder, _, name = scope.rpartition("/")
            shared = SAME_WORKER.get(name)
            if shared is None:
                return scope
            return f"{folder}/{shared}" if folder else shared

    return SharedWarmth(config, log)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    rank = {name: place for place, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: each file's order kept
    if os.environ.get("TRITON_INTERPRET") != "1":
        compiled = pytest.mark.skip(reason="runs Triton kernels on CPU tensors under Triton's interpreter; "
                                           "this run compiles them for the GPU (TRITON_INTERPRET=1 runs it)")
        for item in items:
            if "interpreter" in item.keywords:
                item.add_marker(compiled)
    if cuda_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU; torch sees none here")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _session_scope() -> Iterator[None]:
    """No test leaves another gemmzoo session current than the one it found (see :mod:`sessions`)."""
    from sessions import isolated

    with isolated():
        yield


@pytest.fixture
def wide_tables(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tables printed 200 columns wide. rich reads COLUMNS once when a console is made, and the
    CLI's consoles are made at import, which may come before any test sets it: set both."""
    from gemmzoo.cli import console

    monkeypatch.setenv("COLUMNS", "200")
    for shown in (console.console, console.errors):
        monkeypatch.setattr(shown, "width", 200)


@pytest.fixture
def empty_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, wide_tables: None) -> Iterator[Path]:
    """An empty tuning cache directory (yielded), no backend selection or tuning switch from the
    environment, wide tables, and a fresh :class:`gemmzoo.Session` of that configuration current
    for the test (see :mod:`sessions`)."""
    from sessions import scoped

    cache = tmp_path / "cache"
    monkeypatch.setenv("GEMMZOO_CACHE_DIR", str(cache))
    monkeypatch.delenv("GEMMZOO_BACKENDS", raising=False)
    monkeypatch.delenv("GEMMZOO_TUNE", raising=False)
    with scoped():
        yield cache


@pytest.fixture
def gemmzoo_session(empty_cache: Path) -> object:
    """The fresh session :func:`empty_cache` made current for this test."""
    from gemmzoo.session import current

    return current()


@pytest.fixture(scope="session")
def compiled_dispatch_module(tmp_path_factory: pytest.TempPathFactory) -> object:
    """gemmzoo.matmul's compiled dispatch (:mod:`gemmzoo.native`), built once for the whole run
    (xdist workers share the build directory), left switched off: tests switch it on."""
    pytest.importorskip("torch")
    from gemmzoo import native
    from gemmzoo.dispatch import matmul as dispatch

    root = tmp_path_factory.getbasetemp()
    shared = root.parent if os.environ.get("PYTEST_XDIST_WORKER") else root
    from gemmzoo import Session

    with Session(cache_dir=shared / "compiled-dispatch-cache", compiled_dispatch=True):
        try:
            module = native.build()
        except native.CompiledDispatchError as error:
            pytest.skip(f"the compiled dispatch cannot be built here: {error}")
    dispatch.use_compiled(None)
    return module


@pytest.fixture(params=["python", "compiled"])
def dispatch_route(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Each test twice: with gemmzoo.matmul's Python dispatch for torch tensors, and with the
    compiled one."""
    from gemmzoo import native
    from gemmzoo.dispatch import matmul as dispatch

    if request.param == "compiled":
        dispatch.use_compiled(request.getfixturevalue("compiled_dispatch_module"))
    else:
        monkeypatch.setenv(native.ENV_SWITCH, "0")
        dispatch.use_compiled(None)
    yield request.param
    dispatch.use_compiled(None)
