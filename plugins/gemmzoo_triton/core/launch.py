"""A kernel launch bound once per problem: the fast path's last step.

``triton.jit``'s own launch path (``kernel[grid](...)``) binds the arguments to the signature,
works out their specialization and looks the compiled kernel up in its cache on every call. For a
problem whose shapes, strides, dtype and constexprs are fixed, all of that has one answer, except
for what depends on the operands' addresses: Triton specializes a pointer on whether it is 16-byte
aligned. :class:`BoundLaunch` therefore launches through ``triton.jit`` once per alignment
pattern, keeps the compiled kernel it returns, and later launches that compiled kernel directly.

Under Triton's interpreter there is no compiled kernel: every call takes ``triton.jit``'s path,
as it does on a Triton whose internals :mod:`~gemmzoo_triton.core.triton_internals` does not know.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from gemmzoo_triton.core import triton_internals
from gemmzoo_triton.core.env import interpreter_mode


class BoundLaunch:
    """``kernel[grid](*args, **constexprs)`` for one problem, with the binding done once.

    ``kernel`` is a ``triton.jit`` function (not an autotuner: the config is already chosen and
    is part of ``constexprs``, with its launch options such as ``num_warps``); ``grid`` a tuple
    of one to three program counts. The kernel's parameters must be its run-time arguments first,
    in the order callers pass them, then its constexprs, every one of which ``constexprs`` names.
    ``pointers`` are the positions of the run-time arguments that are tensors. ``device``: the
    CUDA device the operands live on; given one, launches look up its current stream themselves
    and call the driver's launcher directly (see :meth:`on_stream`), else they go through the
    compiled kernel's own launcher, which looks the current device and its stream up each time.
    """

    __slots__ = ("_aligned", "_compiled", "_constexprs", "_grid", "_jit_path", "_kernel", "_on_stream",
                 "_pointers", "_stream", "_tail")

    def __init__(
        self, kernel: Any, grid: Sequence[int], constexprs: dict[str, Any],
        pointers: Sequence[int] = (0, 1, 2), device: Any = None,
    ) -> None:
        self._kernel = kernel
        self._pointers = tuple(pointers)
        self._grid = (*grid, *(1,) * (3 - len(grid)))
        self._constexprs = constexprs
        # The compiled kernel takes every parameter in order, constexprs included; launch
        # options such as num_warps are in ``constexprs`` too but are no parameters.
        self._jit_path = interpreter_mode() or triton_internals.unsupported_reason() is not None
        self._tail = () if self._jit_path else triton_internals.constexpr_values(kernel, constexprs)
        self._compiled: dict[tuple[bool, ...], Any] = {}
        self._on_stream: dict[tuple[bool, ...], Any] = {}
        self._aligned = _alignment_reader(self._pointers)
        self._stream = None if self._jit_path else triton_internals.stream_reader_of(device)

    def __call__(self, *args: Any) -> None:
        """Launch on ``args``: the run-time arguments (tensors, descriptors, integers)."""
        if self._jit_path:
            self._kernel[self._grid](*args, **self._constexprs)
            return
        aligned = self._aligned(args)
        if self._stream is not None:
            launch = self._on_stream.get(aligned)
            if launch is not None:
                launch(self._stream(), *args, *self._tail)
                return
        else:
            runner = self._compiled.get(aligned)
            if runner is not None:
                runner(*args, *self._tail)
                return
        self._first(aligned, args)

    def on_stream(self, stream: Any, *args: Any) -> None:
        """:meth:`__call__` on the CUDA stream handle ``stream``, which must be the current one:
        for a caller that has looked it up already (Triton's launch would look it up again)."""
        if self._jit_path:
            self._kernel[self._grid](*args, **self._constexprs)
            return
        aligned = self._aligned(args)
        launch = self._on_stream.get(aligned)
        if launch is not None:
            launch(stream, *args, *self._tail)
            return
        self._first(aligned, args)

    def _first(self, aligned: tuple[bool, ...], args: tuple[Any, ...]) -> None:
        """The first launch of an alignment pattern: through ``triton.jit``, keeping its kernel."""
        launched = self._kernel[self._grid](*args, **self._constexprs)
        launcher = triton_internals.compiled_launcher(launched, self._grid)
        if launcher is not None:
            self._compiled[aligned] = launcher
            direct = triton_internals.stream_launcher(launched, self._grid)
            self._on_stream[aligned] = direct or (lambda stream, *args: launcher(*args, stream=stream))


def _alignment_reader(pointers: tuple[int, ...]) -> Callable[[tuple[Any, ...]], tuple[bool, ...]]:
    """A function of a launch's arguments: whether each of the tensors at ``pointers`` starts
    16-byte aligned. Written out for up to three tensors (a generator over them costs twice as
    much, on every launch)."""
    if len(pointers) == 0:
        return lambda args: ()
    if len(pointers) == 1:
        (i,) = pointers
        return lambda args: (args[i].data_ptr() % 16 == 0,)
    if len(pointers) == 2:
        i, j = pointers
        return lambda args: (args[i].data_ptr() % 16 == 0, args[j].data_ptr() % 16 == 0)
    if len(pointers) == 3:
        i, j, k = pointers
        return lambda args: (args[i].data_ptr() % 16 == 0, args[j].data_ptr() % 16 == 0,
                             args[k].data_ptr() % 16 == 0)
    return lambda args: tuple([args[i].data_ptr() % 16 == 0 for i in pointers])


class DescriptorLaunch:
    """``run(x, y, c)`` of a kernel that reads A and B through TMA descriptors, with the
    descriptors' making apart: ``launch(a_desc(x), b_desc(y), c)``. A plan whose operands live
    in buffers it keeps makes their descriptors once per buffer and calls :attr:`launch`."""

    __slots__ = ("a_desc", "b_desc", "launch")

    def __init__(self, a_desc: Callable[[Any], Any], b_desc: Callable[[Any], Any],
                 launch: Callable[[Any, Any, Any], None]) -> None:
        self.a_desc, self.b_desc, self.launch = a_desc, b_desc, launch

    def __call__(self, x: Any, y: Any, c: Any) -> None:
        self.launch(self.a_desc(x), self.b_desc(y), c)
