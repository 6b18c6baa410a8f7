"""``torch-padded``: cuBLAS on copies of A and B padded with zeros to whole 16-byte rows.

cuBLAS slows down by several times when K or N is not a multiple of 16 bytes' worth of elements
(a float16 matrix with 4097 columns): even views whose rows are aligned but whose K or N is odd
get its slow kernels. Padding K and N with zeros gives it a shape it runs at full speed (an
operand that is copied anyway is padded to whole 128-byte units, which it runs faster still than
16-byte ones; :data:`COPY_UNIT_BYTES`): the extra products are 0·0, which leave every sum as
it was, and the extra columns of C are cut off by returning a view of the padded result. The
copies cost one read and one write of each operand that needs one; see ``docs/results`` for
where that pays.

The plan for a problem (:func:`padded_plan`) decides once which operands to copy and into what
layout: an operand keeps its own layout (row- or column-major) so that the copy never transposes,
so a column-major A has its M padded too and C is cut in both dimensions. Where nothing needs
padding the plan is the ``torch`` backend's own launcher: this backend then is cuBLAS exactly.
The copies are a Triton kernel (:mod:`gemmzoo_triton.core.copy_kernel`) where Triton is installed,
torch's ``copy_`` into a buffer whose padding was zeroed once otherwise.

A plan keeps the buffers its copies write (:mod:`gemmzoo_triton.core.stream_buffers`), so a call
allocates nothing but C.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from typing import Any

from gemmzoo.contract.backend import TF32Array, dtype_name
from gemmzoo_torch.backend import TorchBackend
from gemmzoo_torch.precision import needless_switches
from gemmzoo_triton.core.aligned import padded, units
from gemmzoo_triton.core.padding import zero
from gemmzoo_triton.core.stream_buffers import REUSED_BUFFER_BYTES, StreamBuffers

#: Bytes a K or N is rounded up to where its operand is copied anyway: cuBLAS ran padded products
#: faster with K and N in whole 128-byte units than in 16-byte ones on most shapes measured
#: (docs/results/2026-11-23-torch-padded.md), and the copy writes those zeros for free.
COPY_UNIT_BYTES = 128


def rounded(length: int, element_size: int) -> int:
    """``length`` elements rounded up to whole :data:`COPY_UNIT_BYTES` units (at least one element)."""
    return padded(length, element_size, COPY_UNIT_BYTES)


def _column_major(x: Any) -> bool:
    """Whether ``x`` is stored column by column (a transposed view), so its copy is too."""
    return x.stride(0) == 1 and x.stride(1) != 1 and x.shape[1] > 1


def _cublas_ready(x: Any, rows: int, cols: int, column_major: bool) -> bool:
    """Whether ``x`` already has the padded extent ``rows`` x ``cols`` in a layout whose leading
    dimension is a whole number of 16-byte units (nothing to copy)."""
    if tuple(x.shape) != (rows, cols):
        return False
    inner, outer = (0, 1) if column_major else (1, 0)
    return (x.stride(inner) == 1 or x.shape[inner] == 1) and x.stride(outer) % units(x.element_size()) == 0


def _triton_copies(like: Any) -> bool:
    """Whether the copies of tensors like ``like`` are made by the Triton kernel."""
    return like.is_cuda and importlib.util.find_spec("triton") is not None


class PaddedCopy:
    """A copy of a 2-D tensor like ``like`` into a zeroed ``rows`` x ``cols`` tensor (the
    tensor's values top left), stored column-major when ``column_major``. The copy writes a buffer
    it keeps (:class:`~gemmzoo_triton.core.stream_buffers.StreamBuffers`, where it has at most
    ``reused_buffer_bytes``); the result is a view of it, valid until the next copy on the same
    thread and stream. Triton's copy kernel writes the values and the padding's zeros; without
    it (no Triton, a host tensor, or a copy that transposes) torch's ``copy_`` writes the values
    into a buffer whose padding was zeroed when it was made."""

    def __init__(self, like: Any, rows: int, cols: int, column_major: bool,
                 reused_buffer_bytes: int = REUSED_BUFFER_BYTES) -> None:
        self.column_major = column_major
        # what is written: the transposed problem for a column-major copy, so rows are adjacent
        self.shape = (cols, rows) if column_major else (rows, cols)
        self.numel = rows * cols
        self.dtype, self.device = like.dtype, like.device
        source = self.source(like)
        # the kernel's sizes after its two pointers: the source's extent, the destination's, the
        # source's strides and the destination's row stride
        self.sizes = (*source.shape, *self.shape, *source.stride(), self.shape[1])
        self._extent = tuple(source.shape)
        self._launch = None
        stride_rows, stride_cols = source.stride()
        # the kernel walks the source along the destination's rows: a transposing copy (a row-major
        # B made column-major) is torch's, which reads it in an order that suits it
        if _triton_copies(like) and stride_cols <= stride_rows:
            from gemmzoo_triton.core import copy_kernel
            from gemmzoo_triton.core.launch import BoundLaunch

            self._launch = BoundLaunch(copy_kernel.copy_kernel, (copy_kernel.blocks(*self.shape),),
                                       copy_kernel.constexprs(units(like.element_size())), pointers=(0, 1),
                                       device=like.device)
        views = self._views if self._launch is not None else self._zeroed_views
        self._buffers = StreamBuffers(self.numel, like.dtype, like.device, views, reused_buffer_bytes)

    @property
    def by_kernel(self) -> bool:
        """Whether the copy is Triton's kernel (else torch's ``copy_``)."""
        return self._launch is not None

    def _views(self, buffer: Any) -> tuple[Any, Any]:
        """What the kernel writes (the buffer in :attr:`shape`) and the padded operand it is."""
        written = buffer.view(self.shape)
        return written, self.result(written)

    def _zeroed_views(self, buffer: Any) -> tuple[Any, Any]:
        """The buffer zeroed, the region ``copy_`` writes and the padded operand it is part of."""
        zero(buffer)
        written = buffer.view(self.shape)
        rows, cols = self._extent
        return written[:rows, :cols], self.result(written)

    def source(self, tensor: Any) -> Any:
        """What the copy reads: ``tensor``, or its transpose for a column-major copy."""
        return tensor.T if self.column_major else tensor

    def result(self, written: Any) -> Any:
        """The padded operand, from the tensor the copy wrote."""
        return written.T if self.column_major else written

    def example(self) -> Any:
        """A padded operand as calls will give it (shape, strides, the very buffer), with no copy
        made: what a launcher is planned for."""
        return self._buffers.get()[1]

    def __call__(self, tensor: Any) -> Any:
        written, operand = self._buffers.get()
        if self._launch is not None:
            self._launch(self.source(tensor), written, *self.sizes)
        else:
            written.copy_(self.source(tensor))
        return operand


class PaddedPair:
    """Both copies, A's and B's, into one buffer (kept as :class:`PaddedCopy`'s are, where it has
    at most ``reused_buffer_bytes``) by one launch of the Triton kernel."""

    def __init__(self, copy_a: PaddedCopy, copy_b: PaddedCopy,
                 reused_buffer_bytes: int = REUSED_BUFFER_BYTES) -> None:
        from gemmzoo_triton.core import copy_kernel
        from gemmzoo_triton.core.launch import BoundLaunch

        self._a, self._b = copy_a, copy_b
        self._numel = copy_a.numel + copy_b.numel  # A's part ends on whole rows of 16 bytes
        constexprs = copy_kernel.constexprs(units(copy_a.dtype.itemsize))
        blocks_a = copy_kernel.blocks(*copy_a.shape)
        grid = (blocks_a + copy_kernel.blocks(*copy_b.shape),)
        self._launch = BoundLaunch(copy_kernel.copy_pair_kernel, grid, constexprs, pointers=(0, 1, 9, 10),
                                   device=copy_a.device)
        self._blocks_a = blocks_a
        self._buffers = StreamBuffers(self._numel, copy_a.dtype, copy_a.device, self._views,
                                      reused_buffer_bytes)

    def _views(self, buffer: Any) -> tuple[Any, Any, Any, Any]:
        """What the kernel writes for A and for B, and the padded operands they are."""
        copy_a, copy_b = self._a, self._b
        written_a = buffer[: copy_a.numel].view(copy_a.shape)
        written_b = buffer[copy_a.numel :].view(copy_b.shape)
        return written_a, written_b, copy_a.result(written_a), copy_b.result(written_b)

    def examples(self) -> tuple[Any, Any]:
        """Both padded operands as calls will give them, with no copy made."""
        return self._buffers.get()[2:]

    def __call__(self, a: Any, b: Any) -> tuple[Any, Any]:
        copy_a, copy_b = self._a, self._b
        written_a, written_b, operand_a, operand_b = self._buffers.get()
        self._launch(copy_a.source(a), written_a, *copy_a.sizes, copy_b.source(b), written_b, *copy_b.sizes,
                     self._blocks_a)
        return operand_a, operand_b


Launch = Callable[[Any, Any], Any]


def padded_plan(a: Any, b: Any, launch: Launch, tf32: bool = False,
                launcher: Callable[[Any, Any], Launch] | None = None) -> Launch:
    """``run(a, b)`` for tensors like ``a`` and ``b`` (shape, strides, dtype, device): ``launch``
    on zero-padded copies of the operands that need one, C cut to M x N; ``launch`` itself when
    no operand does. With ``tf32`` the operands and the result are :class:`TF32Array` wrappers
    (``launch`` takes and gives them too). ``launcher(x, y)``, when given, makes the launch for
    operands like ``x`` and ``y`` instead (the padded ones where there are copies), so that what
    it decides per problem is decided for the problem cuBLAS actually gets."""
    x, y = (a.data, b.data) if tf32 else (a, b)
    (m, k), n = x.shape, y.shape[1]
    if launcher is not None:
        launch_for = launcher
    else:
        def launch_for(x: Any, y: Any) -> Callable[[Any, Any], Any]:
            return launch
    if m == 0 or n == 0 or k == 0:
        return launch_for(a, b)
    size = x.element_size()
    a_columns, b_columns = _column_major(x), _column_major(y)
    kp, np_ = padded(k, size), padded(n, size)
    mp = padded(m, size) if a_columns else m
    copies_a, copies_b = not _cublas_ready(x, mp, kp, a_columns), not _cublas_ready(y, kp, np_, b_columns)
    if not (copies_a or copies_b):
        return launch_for(a, b)
    # what is copied anyway gets whole 128-byte units: K when both operands are copied, N when B is
    if copies_a and copies_b:
        kp = rounded(k, size)
    if copies_b:
        np_ = rounded(n, size)
    copy_a = PaddedCopy(x, mp, kp, a_columns) if copies_a else None
    copy_b = PaddedCopy(y, kp, np_, b_columns) if copies_b else None
    cut = (mp, np_) != (m, n)
    pair = copy_a is not None and copy_b is not None and copy_a.by_kernel and copy_b.by_kernel
    both = PaddedPair(copy_a, copy_b) if pair else None

    # Every decision above is taken once: each case gets a function that only does its work.
    copy: Callable[[Any, Any], tuple[Any, Any]]
    if both is not None:
        copy = both
    elif copy_b is None:
        copy = lambda a, b: (copy_a(a), b)  # noqa: E731
    elif copy_a is None:
        copy = lambda a, b: (a, copy_b(b))  # noqa: E731
    else:
        copy = lambda a, b: (copy_a(a), copy_b(b))  # noqa: E731
    if both is not None:
        example_x, example_y = both.examples()
    else:
        example_x = copy_a.example() if copy_a is not None else x
        example_y = copy_b.example() if copy_b is not None else y
    if tf32:
        example_x, example_y = TF32Array(example_x), TF32Array(example_y)
    launch = launch_for(example_x, example_y)

    if tf32:
        def run_tf32(a: Any, b: Any) -> Any:
            x, y = copy(a.data, b.data)
            c = launch(TF32Array(x), TF32Array(y)).data
            return TF32Array(c[:m, :n] if cut else c)

        return run_tf32
    if cut:
        def run_cut(a: Any, b: Any) -> Any:
            x, y = copy(a, b)
            return launch(x, y)[:m, :n]

        return run_cut

    def run(a: Any, b: Any) -> Any:
        x, y = copy(a, b)
        return launch(x, y)

    return run


class TorchPaddedBackend(TorchBackend):
    """``torch-padded``: ``torch.mm`` (cuBLAS) on operands whose K and N are padded with zeros to
    whole 16-byte units, for shapes where cuBLAS is slow; cuBLAS itself where nothing needs padding.

    C is returned as an M x N view of the padded product (rows ``N`` rounded up apart) when N is
    padded, and cut in M as well when a column-major A had M padded. The precision switches are
    those of ``torch`` (:mod:`gemmzoo_torch.precision`).
    """

    classes = frozenset({"gemm"})  # the padded route is for 2-D products; torch has the classes
    name = "torch-padded"
    # cuBLAS leaves its fast kernels when a 16-bit operand's rows are not 16-byte aligned
    # The copies into aligned buffers cost a fixed time per call that only products of about ten
    # GFLOP or more recover (docs/results/2026-11-27-session-merge-gpu.md)
    prior_routes = ({"device": "cuda", "library": "torch", "dtypes": ("float16", "bfloat16"),
                     "misaligned_bytes": 16, "min_flops": 1e10},)
    # where every stored row is 16-byte aligned nothing is padded: the plan is torch's own call
    contends = ({"misaligned_bytes": 16, "why": "every row is 16-byte aligned: it runs torch's own call"},)
    dtypes = frozenset({"float16", "bfloat16", "float32", "tf32", "float64"})

    def __init__(self) -> None:
        super().__init__()
        self._plans: dict[Any, Callable[[Any, Any], Any]] = {}
        # its copies are Triton kernels where Triton is installed: the suite's misaligned cases
        # and layouts compile one each (a first answer prefers a tied torch's suite to this one)
        self.suite_compiles = importlib.util.find_spec("triton") is not None

    def warm_up(self) -> None:
        """Where its copies are Triton kernels, what Triton's first compile in a process does
        (:func:`gemmzoo_triton.core.triton_internals.warm_compiler`)."""
        if self.suite_compiles:
            from gemmzoo_triton.core.triton_internals import warm_compiler

            warm_compiler()

    def prepare(self, a: Any, b: Any) -> Callable[[Any, Any], Any]:
        """The plan for this problem: which operands are copied, into what, decided once."""
        self.check_operands(a, b)
        dtype = dtype_name(a)

        def launcher(x: Any, y: Any) -> Callable[[Any, Any], Any]:  # the torch backend's, per problem
            return self._run(dtype, needless_switches(dtype, x, y))

        return padded_plan(a, b, self._run(dtype), tf32=dtype == "tf32", launcher=launcher)

    def matmul(self, a: Any, b: Any) -> Any:
        return self.remembered_plan(a, b)(a, b)
