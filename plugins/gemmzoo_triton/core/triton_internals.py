"""Triton's undocumented launch and autotuner attributes, the only place the plugin touches them.

The fast path binds each problem's launch once and then calls the compiled kernel directly, which
needs what ``triton.jit`` and ``triton.autotune`` keep on their objects but do not document: a
``JITFunction``'s parameter list (``params``, to know the constexprs a compiled kernel takes),
the launcher a ``CompiledKernel`` returns for a grid (``compiled[grid]``) and what that launcher
calls (the driver's launcher ``run``, with ``function`` and ``packed_metadata``, after
``_init_handles``; the launch hooks in ``triton.knobs.runtime``), an ``Autotuner``'s
picked config (``best_config``), wrapped function (``fn``, ``base_fn``) and argument names
(``arg_names``), the active driver's current-stream lookup
(``triton.runtime.driver.active.get_current_stream``, what each Triton launch asks), and the
compile mode that hands a ``warmup``'s compilation to an executor
(``triton.runtime._async_compile.AsyncCompileMode``, in Triton 3.4 and later; the future it
returns, whose ``result`` is the ``CompiledKernel``) and what a compiled kernel's first launch
makes its launcher with (the driver's ``launcher_cls``, given the kernel's ``src`` and
``metadata``), and the per-process work of a first compile: Triton's hash of its own compiler
files and library (``triton.runtime.cache.triton_key``, cached per process) and the import of
Gluon's language, which the first specialization makes.

:func:`unsupported_reason` says whether the installed Triton is one these were written and
checked against (:data:`TESTED_MAJORS`) and still has them. Where it is not, :class:`BoundLaunch`
falls back to Triton's public launch (``kernel[grid](...)``) on every call; the autotuner's
attributes have no public equivalent, so reading them raises a clear error instead.
``tests/test_adapters.py`` fails when a Triton release moves any of them.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

#: Major versions of Triton whose internals these accessors were written for (3.0 to 3.9 checked).
TESTED_MAJORS = (3,)
#: The autotuner attributes read here.
AUTOTUNER_ATTRIBUTES = ("best_config", "fn", "base_fn", "arg_names")


@functools.cache
def unsupported_reason() -> str | None:
    """Why the launch internals cannot be relied on with this Triton (``None``: they can)."""
    import triton

    major = triton.__version__.split(".", 1)[0]
    if not major.isdigit() or int(major) not in TESTED_MAJORS:
        return f"triton {triton.__version__} is not a version gemmzoo's fast launch was checked with"
    return None


def constexpr_values(kernel: Any, constexprs: dict[str, Any]) -> tuple[Any, ...]:
    """The values a compiled ``kernel`` takes after its run-time arguments: its constexpr
    parameters in order, each looked up in ``constexprs``."""
    return tuple(constexprs[param.name] for param in kernel.params if param.is_constexpr)


def compiled_launcher(launched: Any, grid: tuple[int, int, int]) -> Any | None:
    """The compiled kernel's own launcher for ``grid``, from what ``kernel[grid](...)`` returned
    (a compiled kernel, or a future of one), or ``None`` where it returned neither."""
    compiled = launched.result() if hasattr(launched, "result") else launched
    if compiled is None or not hasattr(compiled, "__getitem__"):
        return None
    return compiled[grid]


def stream_launcher(launched: Any, grid: tuple[int, int, int]) -> Callable[..., None] | None:
    """``launch(stream, *args)``: the compiled kernel's launch on the CUDA stream handle
    ``stream``, calling the driver's launcher directly, as the compiled kernel's own launcher
    (:func:`compiled_launcher`) does after it has looked up the device, the stream and the launch
    hooks; or ``None`` where this Triton's compiled kernel lacks what that needs. While a launch
    hook is set (a profiler such as Proton listening), launches take Triton's own launcher, which
    calls the hooks."""
    from triton import knobs

    compiled = launched.result() if hasattr(launched, "result") else launched
    try:
        compiled._init_handles()
        run, function, packed = compiled.run, compiled.function, compiled.packed_metadata
        hooks = knobs.runtime
        hooks.launch_enter_hook, hooks.launch_exit_hook  # noqa: B018 - both exist
    except AttributeError:
        return None
    own = compiled[grid]
    grid_x, grid_y, grid_z = grid

    def launch(stream: Any, *args: Any) -> None:
        if _quiet(hooks.launch_enter_hook) and _quiet(hooks.launch_exit_hook):
            run(grid_x, grid_y, grid_z, stream, function, packed, None, None, None, *args)
        else:
            own(*args, stream=stream)

    return launch


def _quiet(hook: Any) -> bool:
    """Whether a launch hook calls nothing: unset (``None``), or a chain of hooks (``HookChain``,
    whose ``calls`` Triton fills as hooks are added) that is empty."""
    return hook is None or not getattr(hook, "calls", True)


def _autotuner_attribute(autotuner: Any, name: str) -> Any:
    try:
        return getattr(autotuner, name)
    except AttributeError:
        import triton

        raise RuntimeError(f"triton {triton.__version__}'s Autotuner has no {name!r}, which "
                           "gemmzoo_triton needs to bind the tuned launch once per problem") from None


def picked_config(autotuner: Any) -> Any:
    """The config ``autotuner`` picked on its last tuned launch (``triton.Config``)."""
    return _autotuner_attribute(autotuner, "best_config")


def kernel_name(autotuner: Any) -> str:
    """The name of the Python function under ``autotuner``'s decorators."""
    return _autotuner_attribute(autotuner, "base_fn").__name__


def jit_function(autotuner: Any) -> Any:
    """The ``triton.jit`` function ``autotuner`` launches."""
    return _autotuner_attribute(autotuner, "fn")


def argument_names(autotuner: Any) -> list[str]:
    """The kernel's parameter names, in order."""
    return list(_autotuner_attribute(autotuner, "arg_names"))


def stream_reader_of(device: Any) -> Callable[[], Any] | None:
    """:func:`current_stream_reader` of a torch device, or ``None`` when it is no CUDA device
    (or ``None``)."""
    if device is None or getattr(device, "type", None) != "cuda":
        return None
    import torch

    return current_stream_reader(device.index if device.index is not None else torch.cuda.current_device())


def current_stream_reader(device_index: int) -> Callable[[], Any]:
    """A function giving the handle of ``device_index``'s current CUDA stream, through the lookup
    Triton's own launches make (the active driver's ``get_current_stream``), which costs a small
    fraction of building torch's ``Stream`` object; torch's public ``current_stream`` where this
    Triton has no such lookup. Only for CUDA devices: without a GPU Triton has no active driver."""
    import triton

    try:
        lookup = triton.runtime.driver.active.get_current_stream
    except (AttributeError, RuntimeError):
        import torch

        return lambda: torch.cuda.current_stream(device_index).cuda_stream
    return functools.partial(lookup, device_index)


def compile_at_once(kernel: Any, configs: Sequence[Any], args: tuple[Any, ...], options: dict[str, Any],
                    named_args: dict[str, Any]) -> bool:
    """Compile the ``triton.jit`` function ``kernel`` for each of ``configs`` (``triton.Config``)
    on these arguments at once, in threads, without launching: Triton's compiler spends its time
    in LLVM and ``ptxas``, outside Python's lock, so an autotuner that then times the configs one
    by one finds them all compiled. Each config's ``pre_hook`` runs first, as the autotuner runs
    it (it may set the block shape of a tensor descriptor, which the compiled kernel depends on).
    A warmup launches nothing, so its grid is any one. Each compiled kernel's launcher is then
    made in the same threads (:func:`_make_launcher`).

    Returns whether it compiled anything: ``False`` (the autotuner compiles them one by one, as
    before) where this Triton has no such compile mode, another one is active, or fewer than two
    configs are given. A config that fails to compile is left to the autotuner, which meets and
    handles the error as it would have.
    """
    if len(configs) < 2:
        return False
    try:
        from triton.runtime._async_compile import AsyncCompileMode, active_mode
    except ImportError:
        return False
    if active_mode.get() is not None:
        return False
    workers = min(len(configs), os.cpu_count() or 1)
    # Triton 3.4 and 3.5 take no ignore_errors: a failed compile then raises as the mode ends
    takes = inspect.signature(AsyncCompileMode).parameters
    quiet = {"ignore_errors": True} if "ignore_errors" in takes else {}
    with ThreadPoolExecutor(workers, thread_name_prefix="gemmzoo-triton-compile") as pool:
        compiled = []
        try:
            with AsyncCompileMode(pool, **quiet):
                for config in configs:
                    values = config.all_kwargs()
                    try:
                        if config.pre_hook is not None:
                            config.pre_hook({**named_args, **options, **values})
                        compiled.append(kernel.warmup(*args, **options, **values, grid=(1,)))
                    except Exception:  # met again, and handled, by the autotuner
                        continue
        except Exception:  # a compile that failed in the pool: the autotuner meets it again too
            pass
        launcher = _launcher_maker()
        if launcher is not None:
            for each in compiled:
                pool.submit(_make_launcher, launcher, each)
    return True


def _launcher_maker() -> Callable[[Any, Any], Any] | None:
    """The active driver's ``launcher_cls`` (what a compiled kernel's first launch calls on its
    ``src`` and ``metadata``); ``None`` where there is no active driver or no such attribute."""
    try:
        import triton

        return triton.runtime.driver.active.launcher_cls
    except (AttributeError, RuntimeError):
        return None


def _make_launcher(launcher: Callable[[Any, Any], Any], compiled: Any) -> None:
    """Make the launcher of ``compiled`` (a kernel a warmup returned, or its future) and drop it.

    Some Triton releases (3.6 among them) build each kernel's C launcher with the system's C
    compiler on its first launch, one after another on the caller's thread, and keep the built
    module in their cache; made here, in a pool's thread, the first launch finds it there.
    Anything that fails is left to that launch, which meets the error again."""
    try:
        kernel = compiled.result() if hasattr(type(compiled), "result") else compiled
        if kernel is not None and getattr(kernel, "module", None) is None:
            launcher(kernel.src, kernel.metadata)
    except Exception:
        pass


def warm_compiler() -> None:
    """Do the work a process's first Triton compile does whatever the kernel: the hash of
    Triton's own files (the cache key every compile includes) and the import of Gluon's
    language. Skipped, part by part, where this Triton lacks them."""
    from triton.runtime import cache

    key = getattr(cache, "triton_key", None)
    if callable(key):
        key()
    try:
        importlib.import_module("triton.experimental.gluon.language")
    except ImportError:
        pass
