"""What the three Triton backends share: availability, the run mode, and the wrapper helpers.

Nothing here imports torch or triton at module import; the functions that need them import them.
"""

from __future__ import annotations

import functools
import importlib.util
import os
from collections.abc import Callable
from typing import Any

from gemmzoo import Backend, TF32Array
from gemmzoo.backend import dtype_name
from gemmzoo.torch_tensors import TorchTensors

#: The oldest Triton with ``tl.dot(..., input_precision=...)`` (it replaced ``allow_tf32``); the
#: keyword has the same name and values ("ieee", "tf32") in Triton 3.6 and 3.9.
MIN_TRITON = (3, 0)

#: The fused epilogues ``triton-grouped`` offers, by the name callers pass as ``activation``.
ACTIVATIONS = ("leaky_relu", "relu")

#: Offsets into each matrix are 32-bit in the kernels.
MAX_OFFSET = 2**31 - 1

#: The oldest Triton for triton-grouped's TMA kernels: host-side ``TensorDescriptor`` and
#: ``tl.range(..., flatten=True)``.
TMA_MIN_TRITON = (3, 4)

#: The oldest CUDA capability with the tensor memory accelerator (Hopper).
TMA_MIN_CAPABILITY = (9, 0)

#: triton-grouped takes its TMA path only for problems with more than this many multiply-adds
#: (M·N·K). On the H100 the TMA kernel beat the pointer kernel above it (4096^3 bf16: 0.96-0.99x
#: cuBLAS against 0.90x) and tied with it at 2048^3, while its launch costs ~25 us more host time
#: (descriptors, their tensor maps), which at 2048^3 and below is as long as the GEMM and flush
#: together: the GPU then waits for the host (docs/results/2026-11-21-h100-triton.md).
TMA_MIN_WORK = 2048**3


def interpreter_mode() -> bool:
    """Whether Triton runs kernels under its CPU interpreter (``TRITON_INTERPRET=1``)."""
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


def mode_dtypes() -> frozenset[str]:
    """The dtypes the Triton backends compute correctly in the current mode.

    On a GPU: float16, bfloat16, float32 (IEEE) and tf32. Under the interpreter only float16 and
    float32: its ``tl.dot`` on bfloat16 reads the raw 16-bit patterns (wrong results, an upstream
    bug), and its fp32 dot is IEEE even when TF32 is asked for, so a tf32 pass there would not
    have computed TF32 at all.
    """
    if interpreter_mode():
        return frozenset({"float16", "float32"})
    return frozenset({"float16", "bfloat16", "float32", "tf32"})


def triton_version() -> tuple[int, ...]:
    """The installed Triton's (major, minor) version."""
    import triton

    return tuple(int(part) for part in triton.__version__.split(".")[:2] if part.isdigit())


def triton_unavailable_reason() -> str | None:
    """Why the Triton backends cannot run here, or ``None``."""
    for package in ("torch", "triton"):
        if importlib.util.find_spec(package) is None:
            return f"{package} is not installed (pip install 'gemmzoo[triton]')"
    if triton_version() < MIN_TRITON:
        import triton

        return f"triton {triton.__version__} is too old; gemmzoo needs triton >= 3.0"
    if interpreter_mode():
        return None
    import torch

    if not torch.cuda.is_available():
        return (
            f"no CUDA GPU visible to torch {torch.__version__}; "
            "set TRITON_INTERPRET=1 to run the Triton kernels on the CPU under Triton's interpreter"
        )
    return None


class TritonBackend(TorchTensors, Backend):
    """Base of the Triton backends: torch tensors in, torch tensors out, one kernel per backend.

    ``device`` is ``"cuda"``, or ``"cpu"`` under Triton's interpreter (``TRITON_INTERPRET=1``),
    which runs the same kernels on CPU tensors. ``dtypes`` follow the mode; see
    :func:`mode_dtypes` for why the interpreter declares fewer.
    """

    def __init__(self) -> None:
        # Decided once: triton.jit reads TRITON_INTERPRET when it decorates the kernels, so the
        # mode cannot change for a process's backends after they are first used anyway.
        self.device = "cpu" if interpreter_mode() else "cuda"
        self.dtypes = mode_dtypes()
        self._plans: dict[tuple[Any, ...], Callable[[Any, Any], Any]] = {}

    def unavailable_reason(self) -> str | None:
        return triton_unavailable_reason()

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
        from gemmzoo_triton.launcher import BoundLaunch

        launch = BoundLaunch(kernel, grid, constexprs)
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


# The Gluon kernels (Hopper) --------------------------------------------------------------------

#: The capability the Gluon kernels are written for (Hopper's warpgroup MMA instructions).
GLUON_CAPABILITY = (9, 0)
#: The oldest Triton whose Gluon they were written and checked against; the API moved fast
#: before it, so an older Triton keeps the backends on their ``tl`` kernels.
GLUON_MIN_TRITON = (3, 6)


def gluon_shared_memory(device: Any) -> int | None:
    """The shared memory a block may use on CUDA ``device`` where the Gluon kernels can run
    there (capability 9.0, Triton >= 3.6 with Gluon's Hopper API, not the interpreter), else
    None."""
    if interpreter_mode() or device.type != "cuda":
        return None
    return _gluon_shared_memory(device.index)


@functools.cache
def _gluon_shared_memory(device_index: int) -> int | None:
    import torch

    if torch.cuda.get_device_capability(device_index) != GLUON_CAPABILITY:
        return None
    try:
        import gemmzoo_triton.gluon_parts  # noqa: F401 - raises on a Triton without what they need
    except (ImportError, AttributeError):
        return None
    return getattr(torch.cuda.get_device_properties(device_index), "shared_memory_per_block_optin", 0)


# triton-grouped's TMA path ---------------------------------------------------------------------


@functools.cache
def _tma_capable(device: Any) -> bool:
    import torch

    capability = torch.cuda.get_device_capability(device)
    return capability >= TMA_MIN_CAPABILITY and triton_version() >= TMA_MIN_TRITON


def tma_device(device: Any) -> bool:
    """Whether triton-grouped's TMA kernels can run compiled on ``device`` (a ``torch.device``).

    True for a CUDA device of capability 9.0 or later (Hopper on) with Triton >= 3.4. False under
    the interpreter, where the backend stays on its pointer kernel (the TMA kernels run there
    too, but only when called directly, as the tests do).
    """
    return not interpreter_mode() and device.type == "cuda" and _tma_capable(device)


def column_major(tensor: Any) -> bool:
    """Whether a 2-D tensor is read through its transpose: not row-major (``stride(1) != 1``).

    For the operands :func:`tma_eligible` accepts, this means column-major (``stride(0) == 1``),
    and the transpose is row-major.
    """
    return tensor.stride(1) != 1


def tma_layout(tensor: Any) -> bool:
    """Whether ``tensor``'s strides let a tensor descriptor cover it (or its transpose, when
    column-major): one dimension contiguous, the stride between rows a multiple of 16 bytes, no
    overlapping rows. Its start address is the other condition (see :func:`_tma_readable`)."""
    if tensor.stride(1) == 1:
        row_stride, row_length = tensor.stride(0), tensor.shape[1]
    elif tensor.stride(0) == 1:
        row_stride, row_length = tensor.stride(1), tensor.shape[0]
    else:
        return False
    return (row_stride * tensor.element_size()) % 16 == 0 and row_stride >= row_length


def _tma_readable(tensor: Any) -> bool:
    """Whether a tensor descriptor can cover ``tensor``: :func:`tma_layout`, and its start
    16-byte aligned. Rows that overlap (a broadcast view's stride 0, say) are left to the pointer
    kernel too: TMA is not relied on for them."""
    return tma_layout(tensor) and tensor.data_ptr() % 16 == 0


def tma_eligible(x: Any, y: Any, c: Any, precision: str) -> bool:
    """Whether triton-grouped's TMA kernels read ``x`` and ``y`` as they are, with no copy.

    Needs a :func:`tma_device`; a problem of more than :data:`TMA_MIN_WORK` multiply-adds;
    float16 or bfloat16 operands; A and B each row-major or column-major, with rows and start
    16-byte aligned as TMA requires (see :func:`_tma_readable`); and C (contiguous) with rows of
    a multiple of 16 bytes. This is the ``tma`` route of
    :func:`gemmzoo_triton.grouped_plan.route` for operands whose start is aligned; the other TMA
    routes copy operands first (rows not aligned, or float32 in tf32, whose tensor-core
    instruction on Hopper wants B column-major; a row-major B made the TMA kernel slower than
    the pointer kernel on the H100, 112 against 140 TFLOPS at 4096^3). IEEE float32 runs on the
    FMA units, where TMA loads gain nothing.
    """
    import torch

    if x.shape[0] * x.shape[1] * y.shape[1] <= TMA_MIN_WORK or not tma_device(x.device):
        return False
    if x.dtype not in (torch.float16, torch.bfloat16):
        return False
    if not (_tma_readable(x) and _tma_readable(y)):
        return False
    return c.is_contiguous() and (c.shape[1] * c.element_size()) % 16 == 0 and c.data_ptr() % 16 == 0
