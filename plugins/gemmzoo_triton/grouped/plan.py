"""triton-grouped's router: which of four kernels a problem takes, decided once, and its bound launch.

The kernels: the tutorial's pointer kernel (:mod:`~gemmzoo_triton.grouped.pointer_kernel`), the
TMA kernel (:mod:`~gemmzoo_triton.grouped.tma_kernel`), and on Hopper the warp-specialized Gluon
kernel for fp16 and bf16 (:mod:`~gemmzoo_triton.grouped.gluon_kernel`) and the Gluon tf32 kernel
(:mod:`~gemmzoo_triton.grouped.tf32_kernel`), and the one-launch copying kernel
(:mod:`~gemmzoo_triton.grouped.copied_kernel`). Five routes lead to them:

- ``pointer``: the pointer kernel, for everything the others do not take;
- ``tma``: a TMA kernel on the operands as they are, where their rows and C's are 16-byte
  aligned (see :func:`tma_eligible`, and :data:`GLUON_MIN_WORK` for the smaller problems the
  Gluon kernel takes); an operand whose start address is not aligned is copied in that call. On
  Hopper fp16 and bf16 run on the Gluon kernel (see :func:`gluon_run`) unless the plan is made
  with ``gluon=False``; everything else on the TMA kernel;
- ``aligned``: the same TMA kernel on copies of the operands whose rows are not aligned
  (:func:`~gemmzoo_triton.core.aligned.aligned_copy`): cuBLAS is several times slower on such
  shapes, and so is the pointer kernel, whose loads cannot be vectorised
  (docs/results/2026-11-23-triton-grouped.md). A C whose rows are not aligned is a view of a
  buffer with padded rows, stored whole through a descriptor, unless the plan is made with
  ``contiguous_c=True`` (then C is contiguous and stored through masked pointers);
- ``copied``: fp16 and bf16 problems the aligned route does not take (smaller ones) whose rows
  are not aligned, above :data:`COPIED_MIN_WORK`: one launch that copies A and B into aligned
  buffers the plan keeps and multiplies from them (no fused activation: with one, the pointer
  route);
- ``tf32``: large float32 problems in tf32. Hopper's tf32 tensor-core instruction reads its
  shared-memory operands only K-major: on Hopper the Gluon tf32 kernel (see
  :func:`tf32_gluon_takes`) takes A row-major (copied when it is not) and B either way;
  elsewhere, with a fused activation or with ``gluon=False``, the TMA kernel takes A row-major and
  B column-major (copied into those layouts), where the pointer kernel is far behind.

A plan's first call picks the config (autotuning when no earlier problem of this key did) and
binds the launch (the copied route's config is chosen by its problem's shape, when the plan is
made); later calls allocate C, make any copies and descriptors their addresses need,
and launch the compiled kernel.
"""

# ruff: noqa: N803, N806 - M, N, K as the tutorial writes them

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gemmzoo import TF32Array
from gemmzoo_triton.core import hopper
from gemmzoo_triton.core.aligned import AlignedCopy, KeptCopies, aligned_copy
from gemmzoo_triton.core.backend import MAX_OFFSET, output_allocator
from gemmzoo_triton.core.padding import padded
from gemmzoo_triton.core.stream_buffers import REUSED_BUFFER_BYTES

#: The aligned route copies A and/or B: (M·K + K·N) elements read and written once more, against
#: 2·M·N·K flops, a share of the product's time proportional to (1/M + 1/N) times the GPU's ratio
#: of flops to copy bandwidth. So the copies pay where both M and N are large, and the product
#: must also be large enough that the copies' launches (host time) hide. The thresholds are where
#: the route overtook the pointer kernel (docs/results/2026-11-23-triton-grouped.md).
ALIGNED_MIN_SIDE = 256
ALIGNED_MIN_WORK = 2 * 1024**3


#: Under ALIGNED_MIN_WORK, problems of more multiply-adds than this whose rows are not aligned
#: take the one-launch kernel (:mod:`~gemmzoo_triton.grouped.copied_kernel`): its copies and
#: product cost one launch's host time, where the aligned route's cost two and descriptors.
COPIED_MIN_WORK = 128**3


def gluon_schedule(x: Any, M: int, N: int, K: int) -> Any:
    """The Gluon kernel's schedule for an M x N x K problem on ``x``'s device
    (:func:`~gemmzoo_triton.grouped.gluon_kernel.pick_schedule`), or None where it cannot run: a GPU
    other than capability 9.0, a Triton without Gluon's Hopper API, M or N under one tile."""
    shared = hopper.gluon_shared_memory(x.device)
    if shared is None:
        return None
    from gemmzoo_triton.grouped import gluon_kernel as kernel

    return kernel.pick_schedule(M, N, K, hopper.num_sms(x.device), shared)


def gluon_run(x: Any, y: Any, c: Any, activation: str | None) -> Callable[[Any, Any, Any], None] | None:
    """``run(x, y, c)``: the Gluon kernel bound for ``x @ y`` (operands and C already laid out for
    TMA), or None where it does not take the problem: a fused activation, C stored through
    pointers, or no :func:`gluon_schedule`."""
    from gemmzoo_triton.grouped.tma_kernel import c_needs_pointers

    if activation or c_needs_pointers(c):
        return None
    M, K = x.shape
    N = y.shape[1]
    schedule = gluon_schedule(x, M, N, K)
    if schedule is None:
        return None
    from gemmzoo_triton.grouped import gluon_kernel as kernel

    return kernel.bind(M, N, K, hopper.column_major(x), hopper.column_major(y), hopper.num_sms(x.device),
                       schedule, x.device)


#: Below :data:`~gemmzoo_triton.core.hopper.TMA_MIN_WORK` multiply-adds, the Gluon kernel still
#: takes problems of more than this many that it has a schedule for: timed with L2 flushed, as
#: gemmzoo times every backend, it beat the pointer kernel on every such problem measured, those
#: that leave most SMs idle included (docs/results/2026-11-23-grouped-split-wave.md).
GLUON_MIN_WORK = 1024**3


@dataclass(frozen=True)
class RoutePolicy:
    """The size thresholds :func:`route` decides by, in multiply-adds (M·N·K) or elements of a
    side: ``tma_min_work`` (:data:`~gemmzoo_triton.core.hopper.TMA_MIN_WORK`), ``gluon_min_work``
    (:data:`GLUON_MIN_WORK`), ``aligned_min_work`` and ``aligned_min_side``
    (:data:`ALIGNED_MIN_WORK`, :data:`ALIGNED_MIN_SIDE`), ``copied_min_work``
    (:data:`COPIED_MIN_WORK`). The defaults are the measured ones; a study (or a test) makes a
    backend with other values (``TritonGroupedBackend(routes=RoutePolicy(...))``) rather than
    changing the constants."""

    tma_min_work: int = hopper.TMA_MIN_WORK
    gluon_min_work: int = GLUON_MIN_WORK
    aligned_min_work: int = ALIGNED_MIN_WORK
    aligned_min_side: int = ALIGNED_MIN_SIDE
    copied_min_work: int = COPIED_MIN_WORK


#: The measured thresholds.
MEASURED_ROUTES = RoutePolicy()


def _gluon_takes(x: Any, M: int, N: int, K: int, policy: RoutePolicy = MEASURED_ROUTES) -> bool:
    """Whether the Gluon kernel takes an M x N x K problem under the policy's ``tma_min_work``
    (see :data:`GLUON_MIN_WORK`)."""
    return M * N * K > policy.gluon_min_work and gluon_schedule(x, M, N, K) is not None


def tf32_gluon_takes(x: Any, activation: str | None) -> bool:
    """Whether the tf32 route runs on the Gluon tf32 kernel for operands on ``x``'s device: a
    Hopper GPU with Gluon, shared memory for its slots, no fused activation."""
    if activation:
        return False
    shared = hopper.gluon_shared_memory(x.device)
    if shared is None:
        return False
    from gemmzoo_triton.grouped import tf32_kernel as grouped_tf32_kernel

    return grouped_tf32_kernel.CONFIG.shared_bytes() <= shared


def route(x: Any, y: Any, precision: str, gluon: bool = True, policy: RoutePolicy = MEASURED_ROUTES) -> str:
    """``"pointer"``, ``"tma"``, ``"aligned"``, ``"copied"`` or ``"tf32"``: the route for ``x @ y``
    (layouts and sizes only, by ``policy``'s thresholds); ``gluon=False`` leaves the Gluon kernels
    out of the decision."""
    import torch

    M, K = x.shape
    N = y.shape[1]
    if not hopper.tma_device(x.device) or max(M * padded_k(x), K * padded_k(y)) > MAX_OFFSET:
        return "pointer"
    if x.dtype == torch.float32:
        # the Gluon tf32 kernel takes smaller problems too: there it keeps up with cuBLAS where the
        # pointer kernel is far behind (docs/results/2026-11-23-tf32-gluon.md)
        least = policy.gluon_min_work if gluon and tf32_gluon_takes(x, None) else policy.tma_min_work
        large = min(M, N) >= policy.aligned_min_side and M * N * K > least
        return "tf32" if precision == "tf32" and large else "pointer"
    if x.dtype not in (torch.float16, torch.bfloat16):
        return "pointer"
    if hopper.tma_layout(x) and hopper.tma_layout(y) and (N * x.element_size()) % 16 == 0:
        takes = M * N * K > policy.tma_min_work or (gluon and _gluon_takes(x, M, N, K, policy))
        return "tma" if takes else "pointer"
    if min(M, N) >= policy.aligned_min_side and M * N * K > policy.aligned_min_work:
        return "aligned"
    return "copied" if M * N * K > policy.copied_min_work else "pointer"


def padded_k(tensor: Any) -> int:
    """The longest row of ``tensor``'s aligned copy, row- or column-major (for the offset limit)."""
    return padded(max(tensor.shape), tensor.element_size())


def _needs_copy(tensor: Any, column_major: bool | None) -> bool:
    """Whether ``tensor`` must be copied for a TMA route that wants it ``column_major`` (or
    either way, when None): rows not 16-byte aligned, or the other layout."""
    if not hopper.tma_layout(tensor):
        return True
    return column_major is not None and hopper.column_major(tensor) != column_major


class GroupedPlan:
    """``run(a, b)`` for one triton-grouped problem (M, N, K > 0): see the module's docstring.

    ``gluon``: whether Hopper's Gluon kernels may take the problem (off: the TMA kernel takes what
    they would). ``contiguous_c``: whether a C whose rows are not 16-byte aligned comes back
    contiguous (stored through masked pointers) rather than as a view of a padded buffer.
    ``autotune``: how the pointer and TMA kernels tune a problem not tuned before, ``"quick"`` or
    ``"full"`` (:mod:`~gemmzoo_triton.core.autotune`). ``routes``: the thresholds of :func:`route`.
    ``reused_buffer_bytes``: the largest copy buffer kept from call to call
    (:mod:`~gemmzoo_triton.core.stream_buffers`).
    """

    def __init__(self, x: Any, y: Any, precision: str, activation: str | None, wrap: bool,
                 gluon: bool = True, contiguous_c: bool = False, autotune: str = "quick",
                 routes: RoutePolicy = MEASURED_ROUTES,
                 reused_buffer_bytes: int = REUSED_BUFFER_BYTES) -> None:
        self.route = route(x, y, precision, gluon, routes)
        self._reused_buffer_bytes = reused_buffer_bytes
        if self.route == "copied" and activation:  # the one-launch kernel fuses no activation
            self.route = "pointer"
        self._autotune = autotune
        self._gluon = gluon
        self._precision = precision
        self._activation = activation
        self._wrap = wrap
        self._shape = (x.shape[0], y.shape[1])
        self._new_c = output_allocator(*self._shape, x.dtype, x.device)
        self._bound: Callable[[Any, Any, Any], None] | None = None
        tma = self.route in ("tma", "aligned", "tf32")
        # Hopper's tf32 tensor-core instruction reads shared-memory operands K-major only: A
        # row-major, and B column-major unless the Gluon kernel takes B into registers. 16-bit
        # types take either layout.
        self._tf32_gluon = self.route == "tf32" and gluon and tf32_gluon_takes(x, activation)
        self._x_layout, self._y_layout = (None, None)
        if self.route == "tf32":
            self._x_layout, self._y_layout = (False, None) if self._tf32_gluon else (False, True)
        self._copy_x = AlignedCopy(x, self._x_layout) if tma and _needs_copy(x, self._x_layout) else None
        self._copy_y = AlignedCopy(y, self._y_layout) if tma and _needs_copy(y, self._y_layout) else None
        self._tma = tma
        if tma and not contiguous_c and (y.shape[1] * x.element_size()) % 16 != 0:
            # C's rows padded to 16 bytes (in one allocation: no buffer sliced per call)
            self._new_c = c_view_allocator(*self._shape, x.dtype, x.device)
        self._run: Callable[[Any, Any], Any] = self._general
        if self.route == "copied":
            self._copied = _copied_run(x, y, self._new_c, wrap)
            self._run = self._first_copied

    def _first_copied(self, a: Any, b: Any) -> Any:
        """The copied route's first call. Its launch is cooperative: every program must be resident
        at once, which a GPU shared under MPS, or a partitioned one, may refuse. Then this plan
        takes the pointer route (its kernel needs no such launch) from this call on."""
        try:
            c = self._copied(a, b)
        except RuntimeError as error:
            if "cooperative" not in str(error).lower():
                raise
            self.route, self._run = "pointer", self._general
            return self._general(a, b)
        self._run = self._copied
        return c

    def __call__(self, a: Any, b: Any) -> Any:
        return self._run(a, b)

    def _general(self, a: Any, b: Any) -> Any:
        """A call of any route: copies into new buffers, descriptors made by the bound launch."""
        x, y = (a.data, b.data) if self._wrap else (a, b)
        c = self._new_c()
        if self._tma:
            # An operand whose rows (decided per problem) or start (per call: views can start
            # anywhere) are not 16-byte aligned goes through an aligned copy: descriptors need both.
            if self._copy_x is not None:
                x = self._copy_x(x)
            elif x.data_ptr() % 16:
                x = aligned_copy(x, self._x_layout)
            if self._copy_y is not None:
                y = self._copy_y(y)
            elif y.data_ptr() % 16:
                y = aligned_copy(y, self._y_layout)
        if self._bound is not None:
            self._bound(x, y, c)
        else:
            self._first_call(x, y, c)
            self._run = self._kept_copies_run() or self._general
        return TF32Array(c) if self._wrap else c

    def _kept_copies_run(self) -> Callable[[Any, Any], Any] | None:
        """After the first call, for a route that copies A or B into a kernel reading descriptors:
        ``run(a, b)`` copying into buffers kept per thread and stream (one launch when both are
        copied), with their descriptors made once per buffer; per call only C and its descriptor
        are new. None for the other routes."""
        from gemmzoo_triton.core.launch import DescriptorLaunch

        bound = self._bound
        if not isinstance(bound, DescriptorLaunch) or (self._copy_x is None and self._copy_y is None):
            return None
        a_desc, b_desc, launch = bound.a_desc, bound.b_desc, bound.launch

        def describe(x: Any, y: Any) -> tuple[Any, Any]:
            return (None if x is None else a_desc(x)), (None if y is None else b_desc(y))

        copies = KeptCopies(self._copy_x, self._copy_y, describe, self._reused_buffer_bytes)
        new_c, wrap, x_layout, y_layout = self._new_c, self._wrap, self._x_layout, self._y_layout
        if self._copy_x is not None and self._copy_y is not None:
            def run_both(a: Any, b: Any) -> Any:
                if wrap:
                    a, b = a.data, b.data
                dx, dy = copies(a, b)[2]
                c = new_c()
                launch(dx, dy, c)
                return TF32Array(c) if wrap else c

            return run_both

        def run_one(a: Any, b: Any) -> Any:
            if wrap:
                a, b = a.data, b.data
            x, y, (dx, dy) = copies(a, b)
            # the operand not copied must still start 16-byte aligned, as in _general
            if dx is None:
                dx = a_desc(aligned_copy(x, x_layout) if x.data_ptr() % 16 else x)
            else:
                dy = b_desc(aligned_copy(y, y_layout) if y.data_ptr() % 16 else y)
            c = new_c()
            launch(dx, dy, c)
            return TF32Array(c) if wrap else c

        return run_one

    def _first_call(self, x: Any, y: Any, c: Any) -> None:
        """Pick the kernel and config (autotuning unless a problem of this key did), bind the
        launch and run it: C always comes from the bound kernel, so that every call computes alike."""
        if self.route == "pointer":
            from gemmzoo_triton.grouped import pointer_kernel as kernel

            config = kernel.picked(x, y, self._precision, self._autotune)
            if config is None:
                config = kernel.launch(x, y, c, self._precision, self._activation, self._autotune)
            self._bound = kernel.bind(x, y, self._precision, config, self._activation)
        elif self._tf32_gluon:
            from gemmzoo_triton.grouped import tf32_kernel as grouped_tf32_kernel

            (M, K), N = x.shape, y.shape[1]
            self._bound = grouped_tf32_kernel.bind(M, N, K, hopper.column_major(y), hopper.num_sms(x.device),
                                                     device=x.device)
        else:
            gluon = gluon_run(x, y, c, self._activation) if self._gluon and self.route != "tf32" else None
            if gluon is not None:
                self._bound = gluon
                self._bound(x, y, c)
                return
            from gemmzoo_triton.grouped import tma_kernel as kernel

            config = kernel.picked(x, y, c, self._precision, self._activation, self._autotune)
            if config is None:
                config = kernel.launch(x, y, c, self._precision, self._activation, self._autotune)
            self._bound = kernel.bind(x, y, c, self._precision, config, self._activation)
        self._bound(x, y, c)


def _copied_run(x: Any, y: Any, new_c: Callable[[], Any], wrap: bool) -> Callable[[Any, Any], Any]:
    """``run(a, b)`` of the copied route: a contiguous C and one launch."""
    from gemmzoo_triton.core.env import interpreter_mode
    from gemmzoo_triton.grouped import copied_kernel

    interpret = interpreter_mode()
    launch = copied_kernel.bind(x, y, 1 if interpret else hopper.num_sms(x.device), interpret)

    def run(a: Any, b: Any) -> Any:
        if wrap:
            a, b = a.data, b.data
        c = new_c()
        launch(a, b, c)
        return TF32Array(c) if wrap else c

    return run


def c_view_allocator(rows: int, cols: int, dtype: Any, device: Any) -> Callable[[], Any]:
    """A function that returns a new ``rows`` x ``cols`` tensor each call whose rows start every
    16 bytes (a C the TMA kernels store whole through a descriptor): one ``empty_strided``."""
    import functools

    import torch

    stride = padded(cols, torch.empty((), dtype=dtype).element_size())
    return functools.partial(torch.empty_strided, (rows, cols), (stride, 1), dtype=dtype, device=device)


def tma_eligible(x: Any, y: Any, c: Any, precision: str, policy: RoutePolicy = MEASURED_ROUTES) -> bool:
    """Whether triton-grouped's TMA kernels read ``x`` and ``y`` as they are, with no copy.

    Needs a :func:`~gemmzoo_triton.core.hopper.tma_device`; a problem of more than
    :data:`~gemmzoo_triton.core.hopper.TMA_MIN_WORK` multiply-adds; float16 or bfloat16 operands;
    A and B each row-major or column-major, with rows and start 16-byte aligned as TMA requires
    (see :func:`~gemmzoo_triton.core.hopper.tma_readable`); and C (contiguous) with rows of a
    multiple of 16 bytes. This is the ``tma`` route of :func:`route` for operands whose start is
    aligned; the other TMA routes copy operands first (rows not aligned, or float32 in tf32, whose
    tensor-core instruction on Hopper wants B column-major: a row-major B made the TMA kernel
    slower than the pointer kernel). IEEE float32 runs on the FMA units, where TMA loads gain
    nothing.
    """
    import torch

    if x.shape[0] * x.shape[1] * y.shape[1] <= policy.tma_min_work or not hopper.tma_device(x.device):
        return False
    if x.dtype not in (torch.float16, torch.bfloat16):
        return False
    if not (hopper.tma_readable(x) and hopper.tma_readable(y)):
        return False
    return c.is_contiguous() and (c.shape[1] * c.element_size()) % 16 == 0 and c.data_ptr() % 16 == 0
