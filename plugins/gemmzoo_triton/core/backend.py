"""The base of every Triton backend: torch tensors in and out, the operand checks and the
one-kernel plan; nothing here imports torch or triton at module import."""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable
from typing import Any

from gemmzoo import Backend, TF32Array
from gemmzoo.arrays.torch_tensors import TorchTensors
from gemmzoo.contract.backend import dtype_name
from gemmzoo_triton.core.env import autotune_mode, interpreter_mode, mode_dtypes, triton_unavailable_reason

#: Offsets into each matrix are 32-bit in the kernels.
MAX_OFFSET = 2**31 - 1


class TritonBackend(TorchTensors, Backend):
    """Base of the Triton backends: torch tensors in, torch tensors out, one kernel per backend.

    ``device`` is ``"cuda"``, or ``"cpu"`` under Triton's interpreter (``TRITON_INTERPRET=1``),
    which runs the same kernels on CPU tensors. ``dtypes`` follow the mode; see
    :func:`mode_dtypes` for why the interpreter declares fewer.

    ``autotune``: how the autotuned kernels tune a problem they meet for the first time,
    ``"quick"`` or ``"full"`` (see :mod:`~gemmzoo_triton.core.autotune`); None reads
    ``GEMMZOO_TRITON_AUTOTUNE`` now, else ``"quick"``. Backends without autotuned kernels ignore it.
    """

    requires = ("torch", "triton")

    def __init__(self, *, autotune: str | None = None) -> None:
        # Decided once: triton.jit reads TRITON_INTERPRET when it decorates the kernels, so the
        # mode cannot change for a process's backends after they are first used anyway.
        self.device = "cpu" if interpreter_mode() else "cuda"
        # compiled kernels: every layout and edge case of the suite is a specialization of its own
        self.suite_compiles = self.device == "cuda"
        self.dtypes = mode_dtypes()
        self.autotune = autotune_mode(autotune)
        self._plans: dict[tuple[Any, ...], Callable[[Any, Any], Any]] = {}

    def unavailable_reason(self) -> str | None:
        return triton_unavailable_reason()

    def warm_up(self) -> None:
        """What Triton's first compile in a process does whatever the kernel
        (:func:`~gemmzoo_triton.core.triton_internals.warm_compiler`); nothing under the
        interpreter, which compiles nothing."""
        if self.device == "cuda":
            from gemmzoo_triton.core.triton_internals import warm_compiler

            warm_compiler()

    def for_tuning(self) -> TritonBackend:
        """This backend as a deliberate tuning run measures it (``gemmzoo tune``): the same
        backend with ``autotune="full"``, which times every config of a problem not fully tuned
        before and keeps its pick for quick backends too. Made once; itself when already full."""
        if self.autotune == "full":
            return self
        twin = self.__dict__.get("_full_twin")
        if twin is None:
            twin = copy.copy(self)
            twin.autotune, twin._plans = "full", {}
            twin.__dict__.pop("_full_twin", None)
            self._full_twin = twin
        return twin

    def synchronize(self) -> None:
        if self.device == "cuda":
            import torch

            torch.cuda.synchronize()

    # Wrapper helpers ---------------------------------------------------------------------------

    def operands(self, a: Any, b: Any) -> tuple[Any, Any, str]:
        """The torch tensors behind A and B, and the ``tl.dot`` input precision for their mode.

        The precision is "ieee" for float32 and "tf32" otherwise: TF32 tensor-core math for the
        tf32 mode, and Triton's default for 16-bit inputs, where it has no effect.

        Call after :meth:`check_operands`. Raises a clear error for tensors on the wrong device
        or too large for the kernels' 32-bit offsets.
        """
        x, y = (a.data, b.data) if isinstance(a, TF32Array) else (a, b)
        for label, tensor in (("A", x), ("B", y)):
            if tensor.device.type != self.device:
                raise self.input_error(
                    "matmul", f"{label} is on {tensor.device}, this backend runs on {self.device}",
                    A=x.shape, B=y.shape,
                )
            if _largest_offset(tensor) > MAX_OFFSET:
                raise self.input_error(
                    "matmul", f"{label} spans more than 2**31 elements, past the kernels' 32-bit offsets",
                    A=x.shape, B=y.shape,
                )
        if x.shape[0] * y.shape[1] > MAX_OFFSET:
            raise self.input_error(
                "matmul", "C would hold more than 2**31 elements, past the kernels' 32-bit offsets",
                A=x.shape, B=y.shape,
            )
        return x, y, "ieee" if dtype_name(a) == "float32" else "tf32"

    def plan(
        self, a: Any, x: Any, y: Any, kernel: Any, grid: tuple[int, ...], constexprs: dict[str, Any]
    ) -> Callable[[Any, Any], Any]:
        """``run(a, b)`` for a one-kernel backend: allocate C, launch ``kernel`` on ``grid``.

        ``a`` is the caller's A (a :class:`TF32Array` or a tensor), ``x`` and ``y`` the tensors
        behind A and B. The kernel takes (A, B, C, M, N, K, then the strides of A, B and C),
        then ``constexprs``.
        """
        m, k = x.shape
        n = y.shape[1]
        if m * n == 0 or k == 0:
            return self.empty_plan(a, x, y)
        from gemmzoo_triton.core.launch import BoundLaunch

        launch = BoundLaunch(kernel, grid, constexprs, device=x.device)
        sizes = (m, n, k, x.stride(0), x.stride(1), y.stride(0), y.stride(1), n, 1)
        new_c = output_allocator(m, n, x.dtype, x.device)
        if isinstance(a, TF32Array):

            def run_tf32(a: Any, b: Any) -> Any:
                c = new_c()
                launch(a.data, b.data, c, *sizes)
                return TF32Array(c)

            return run_tf32

        def run(a: Any, b: Any) -> Any:
            c = new_c()
            launch(a, b, c, *sizes)
            return c

        return run

    @staticmethod
    def result(c: Any, a: Any) -> Any:
        """``c`` in the caller's mode: a :class:`TF32Array` when A was one."""
        return TF32Array(c) if isinstance(a, TF32Array) else c

    @staticmethod
    def empty_plan(a: Any, x: Any, y: Any) -> Callable[[Any, Any], Any]:
        """``run(a, b)`` for a problem with no work: an empty C, or all zeros when K == 0."""
        import torch

        shape, dtype, device = (x.shape[0], y.shape[1]), x.dtype, x.device
        wrap = isinstance(a, TF32Array)

        def run(a: Any, b: Any) -> Any:
            c = torch.zeros(shape, dtype=dtype, device=device)
            return TF32Array(c) if wrap else c

        return run


def output_allocator(rows: int, cols: int, dtype: Any, device: Any) -> Callable[[], Any]:
    """A function that returns a new row-major ``rows`` x ``cols`` tensor each call: C of a plan.

    ``torch.empty_strided`` with its arguments bound once: ``torch.empty``'s more general
    argument parsing costs about as much again as the allocation of a small C.
    """
    import torch

    return functools.partial(torch.empty_strided, (rows, cols), (cols, 1), dtype=dtype, device=device)


def _largest_offset(tensor: Any) -> int:
    """The largest element offset a kernel computes into ``tensor`` (0 when it is empty)."""
    if tensor.numel() == 0:
        return 0
    return sum((size - 1) * abs(stride) for size, stride in zip(tensor.shape, tensor.stride(), strict=True))
