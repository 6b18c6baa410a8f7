"""``triton-grouped``: a router over four kernels (see :class:`TritonGroupedBackend`)."""

# ruff: noqa: N806 - M, N, K as the tutorial writes them

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gemmzoo import TF32Array
from gemmzoo_triton.core.backend import TritonBackend
from gemmzoo_triton.core.stream_buffers import REUSED_BUFFER_BYTES

#: The fused epilogues ``triton-grouped`` offers, by the name callers pass as ``activation``.
ACTIVATIONS = ("leaky_relu", "relu")


class TritonGroupedBackend(TritonBackend):
    """``triton-grouped``: a router over four Triton kernels, tuned once per problem.

    ``matmul(a, b, activation=None)`` (and ``prepare(a, b, activation=None)``) fuses
    ``"leaky_relu"`` (slope 0.01) or ``"relu"`` into the epilogue, applied to the fp32 accumulator
    before the rounding to C's dtype.

    The kernels (:mod:`gemmzoo_triton.grouped`), and which problems take them
    (:func:`~gemmzoo_triton.grouped.plan.route` decides once per problem):

    - the **pointer kernel** (:mod:`~gemmzoo_triton.grouped.pointer_kernel`), Triton's matmul
      tutorial with grouped program order, K masked and the fused activation: everything the
      others do not take, and every problem under Triton's interpreter;
    - the **TMA kernel** (:mod:`~gemmzoo_triton.grouped.tma_kernel`), which reads A and B through
      tensor descriptors: on a GPU of capability 9.0 or later with Triton >= 3.4, large float16
      and bfloat16 problems whose A and B are row- or column-major with 16-byte aligned rows, the
      same on aligned copies of operands whose rows are not aligned (K or N not a multiple of 8,
      strided views), and large float32 problems in tf32 with A row-major and B column-major
      (copied into those layouts where they are not) where the Gluon tf32 kernel does not run;
    - on Hopper (Triton >= 3.6), the warp-specialized **Gluon kernel**
      (:mod:`~gemmzoo_triton.grouped.gluon_kernel`), which takes the TMA kernel's fp16 and bf16
      problems without a fused activation, and smaller ones too;
    - on Hopper, the **Gluon tf32 kernel** (:mod:`~gemmzoo_triton.grouped.tf32_kernel`), which
      takes the tf32 problems without a fused activation, A row-major and B either way.

    A C whose rows would not be 16-byte aligned comes back from the TMA routes as a view of a
    buffer with padded rows (``C.is_contiguous()`` false).

    Options (keywords of the constructor): ``gluon=False`` keeps the Gluon kernels out, so the TMA
    kernel takes their problems (registered as ``triton-grouped-tma`` for comparisons);
    ``contiguous_c=True`` returns a contiguous C on the TMA routes, stored through masked pointers
    (the Gluon kernel does not take those problems); ``autotune="full"`` times every config of the
    autotuned kernels on a problem's first call instead of the few a model of the problem ranks
    best (``"quick"``, the default unless ``GEMMZOO_TRITON_AUTOTUNE`` says otherwise; see
    :mod:`~gemmzoo_triton.core.autotune`); ``reused_buffer_bytes`` bounds the copy buffers a plan
    keeps from call to call (default :data:`~gemmzoo_triton.core.stream_buffers.REUSED_BUFFER_BYTES`;
    larger ones are made per call). Pass such an instance wherever a backend goes:
    ``gemmzoo.matmul(a, b, backend=TritonGroupedBackend(contiguous_c=True))``.

    Each kernel autotunes once per problem in a process: per shape, dtype and precision, and for
    TMA per transposed operand and C's store. A full autotune's pick is kept on disk and launched
    by quick backends too. On Triton >= 3.4 the pointer kernel's results are
    also kept in Triton's cache directory across processes; the TMA kernel's are not, because
    Triton does not cache the results of configs with a ``pre_hook``, which it needs to set the
    descriptors' block shapes. A prepared plan binds the picked config's launch after its first
    call and then launches the compiled kernel directly. Under the interpreter there is one
    config and no tuning.

    The ``grouped`` class (mixture-of-experts layers, ``grouped_mm``) runs in one persistent
    launch over every group: :mod:`~gemmzoo_triton.core.grouped_mm_kernel`.
    """

    name = "triton-grouped"
    activations = ACTIVATIONS
    classes = frozenset({"gemm", "grouped"})

    def grouped_mm(self, a: Any, b: Any, offsets: Any) -> Any:
        """One persistent launch over every group (:mod:`~gemmzoo_triton.core.grouped_mm_kernel`)."""
        from gemmzoo_triton.core import grouped_mm_kernel

        return grouped_mm_kernel.grouped_mm(self, a, b, offsets)

    def __init__(self, *, gluon: bool = True, contiguous_c: bool = False,
                 autotune: str | None = None, routes: Any = None,
                 reused_buffer_bytes: int = REUSED_BUFFER_BYTES) -> None:
        super().__init__(autotune=autotune)
        self.reused_buffer_bytes = reused_buffer_bytes
        self.gluon = gluon
        self.contiguous_c = contiguous_c
        #: The thresholds its plans route by (:class:`~gemmzoo_triton.grouped.plan.RoutePolicy`;
        #: ``None``: the measured ones).
        self.routes = routes

    def prepare(self, a: Any, b: Any, activation: str | None = None) -> Callable[[Any, Any], Any]:
        """The plan for ``activation(a @ b)``; see :class:`~gemmzoo_triton.grouped.plan.GroupedPlan`."""
        from gemmzoo_triton.grouped.plan import MEASURED_ROUTES, GroupedPlan

        M, N, K = self.check_operands(a, b)
        if activation is not None and activation not in ACTIVATIONS:
            raise self.input_error(
                "matmul",
                f"unknown activation {activation!r}; known: {', '.join(ACTIVATIONS)} (or None)",
                A=a.shape, B=b.shape,
            )
        x, y, precision = self.operands(a, b)
        if M * N == 0 or K == 0:  # every activation offered maps 0 to 0
            return self.empty_plan(a, x, y)
        return GroupedPlan(x, y, precision, activation, isinstance(a, TF32Array),
                           gluon=self.gluon, contiguous_c=self.contiguous_c, autotune=self.autotune,
                           routes=self.routes or MEASURED_ROUTES,
                           reused_buffer_bytes=self.reused_buffer_bytes)

    def matmul(self, a: Any, b: Any, activation: str | None = None) -> Any:
        if activation is None:
            return self.remembered_plan(a, b)(a, b)
        return self.prepare(a, b, activation)(a, b)


class TritonGroupedTmaBackend(TritonGroupedBackend):
    """``triton-grouped-tma``: ``triton-grouped`` with ``gluon=False``, for comparing its Gluon
    kernels with the Triton TMA kernel on the same problems. Never chosen by ``best_backend``
    unless named. Where the Gluon kernels cannot run (no Hopper GPU, Triton before 3.6, the
    interpreter) it would compute exactly what ``triton-grouped`` does, so it reports itself
    unavailable there instead of running the same kernels twice."""

    name = "triton-grouped-tma"
    selectable = False

    def __init__(self, *, autotune: str | None = None) -> None:
        super().__init__(gluon=False, autotune=autotune)

    def unavailable_reason(self) -> str | None:
        reason = super().unavailable_reason()
        if reason is not None:
            return reason
        from gemmzoo_triton.core import hopper

        if self.device != "cuda" or hopper.gluon_shared_memory(_current_cuda_device()) is None:
            return ("runs the same kernels as triton-grouped here: the variant differs only where the "
                    "Gluon kernels run (Hopper, Triton >= 3.6)")
        return None


def _current_cuda_device() -> object:
    import torch

    return torch.device("cuda", torch.cuda.current_device())
