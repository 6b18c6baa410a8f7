"""``triton-fp8``: float8_e4m3fn GEMM in Triton, fp32 accumulation with promoted partial sums, C in bf16."""

# ruff: noqa: N806 - M, N, K as the tutorial writes them

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from gemmzoo_triton.core.backend import TritonBackend, output_allocator
from gemmzoo_triton.core.env import interpreter_mode, triton_unavailable_reason
from gemmzoo_triton.core.hopper import TMA_MIN_WORK, gluon_shared_memory, tma_device

#: The oldest CUDA capability with fp8 tensor cores (Ada 8.9; Hopper is 9.0).
FP8_MIN_CAPABILITY = (8, 9)
#: Smallest M and N the Gluon kernel takes (its tiles are 128x128).
GLUON_MIN_MN = 128


@functools.cache
def _fp8_gpu_reason() -> str | None:
    import torch

    if not hasattr(torch, "float8_e4m3fn"):
        return f"torch {torch.__version__} has no float8_e4m3fn"
    capability = torch.cuda.get_device_capability()
    if capability < FP8_MIN_CAPABILITY:
        name, (major, minor) = torch.cuda.get_device_name(), capability
        return f"{name} (capability {major}.{minor}) has no fp8 tensor cores; needs 8.9 or later"
    return None


def k_major(x: Any, y: Any) -> tuple[Any, Any]:
    """A row-major (K contiguous) and B column-major (K contiguous), copied where they are not.

    Hopper's fp8 MMA instructions take both operands K-major from shared memory; Triton handles
    an fp8 B that is not by a path many times slower (docs/results/2026-11-23-fp8.md). A copy of a
    row-major B (the usual ``x @ w`` layout) into a column-major one moves K·N bytes each way.
    """
    if x.stride(1) != 1:
        x = x.contiguous()
    if y.stride(0) != 1:
        y = y.t().contiguous().t()
    return x, y


def tma_fp8_eligible(x: Any, y: Any, c: Any, min_work: int = TMA_MIN_WORK) -> bool:
    """Whether ``c = x @ y`` (K-major operands, see :func:`k_major`) runs on a TMA kernel.

    Needs a Hopper GPU and Triton >= 3.4 (:func:`~gemmzoo_triton.core.hopper.tma_device`), more than
    ``min_work`` multiply-adds (:data:`~gemmzoo_triton.core.hopper.TMA_MIN_WORK` for the Triton
    TMA kernel, :data:`GLUON_MIN_WORK` for the Gluon one), and what descriptors need: 16-byte
    aligned starts and rows, so K a multiple of 16 (fp8 rows of A and Bᵀ) and N of 8 (bf16 rows of C).
    """
    M, K = x.shape
    N = y.shape[1]
    if M * N * K <= min_work or not tma_device(x.device):
        return False
    rows = (x.stride(0), y.stride(1), c.stride(0) * 2)
    starts = (x.data_ptr(), y.data_ptr(), c.data_ptr())
    return all(r % 16 == 0 for r in rows) and all(p % 16 == 0 for p in starts) and c.stride(1) == 1 \
        and x.stride(0) >= K and y.stride(1) >= K


def scaled_tma_eligible(x: Any, y: Any, c: Any) -> bool:
    """Whether a scaled product runs on :mod:`~gemmzoo_triton.fp8.scaled_tma_kernel`: a Hopper
    GPU, more than :data:`~gemmzoo_triton.core.hopper.TMA_MIN_WORK` multiply-adds, and operands
    :func:`scaled_descriptors_take`."""
    M, K = x.shape
    N = y.shape[1]
    if M * N * K <= TMA_MIN_WORK or not tma_device(x.device):
        return False
    return scaled_descriptors_take(x, y, c)


def scaled_descriptors_take(x: Any, y: Any, c: Any) -> bool:
    """Whether TMA descriptors can be made over a scaled product's operands: A row-major and B
    column-major with 16-byte aligned starts and rows (K a multiple of 16 once padded), and C's
    rows 16-byte aligned (N a multiple of 8 for 16-bit C, of 4 for float32)."""
    if x.stride(1) != 1 or y.stride(0) != 1 or c.stride(1) != 1:
        return False
    rows = (x.stride(0), y.stride(1), c.stride(0) * c.element_size())
    starts = (x.data_ptr(), y.data_ptr(), c.data_ptr())
    return all(r % 16 == 0 for r in rows) and all(p % 16 == 0 for p in starts)


def gluon_fp8_config(x: Any, y: Any) -> Any:
    """The Gluon kernel's config for ``x @ y`` on operands :func:`tma_fp8_eligible` accepted, or
    None where the problem stays on the Triton TMA kernel: the GPU or Triton cannot run it
    (:func:`~gemmzoo_triton.core.hopper.gluon_shared_memory`), too little shared memory, or M or N
    under one 128-wide tile (the Triton kernel's autotuned tiles include 64-row ones)."""
    if min(x.shape[0], y.shape[1]) < GLUON_MIN_MN:
        return None
    shared = gluon_shared_memory(x.device)
    if shared is None:
        return None
    from gemmzoo_triton.fp8 import gluon_kernel as fp8_gluon_kernel

    return fp8_gluon_kernel.config_for(shared)


def gluon_scaled_config(m: int, n: int, device: Any, out_bytes: int, scaling: str, k: int = 0) -> Any:
    """The Gluon scaled kernel's config for an m×n product (of depth ``k``, where known) with
    ``scaling`` on ``device``, C of ``out_bytes`` a value, where :func:`scaled_descriptors_take`
    accepts the operands; or None where the problem stays on the Triton kernels: M or N under one
    128-wide tile, at most :data:`GLUON_MIN_WORK` multiply-adds (for a known ``k``), or
    a GPU or Triton that cannot run it (as :func:`gluon_fp8_config` decides)."""
    if min(m, n) < GLUON_MIN_MN or (k and m * n * k <= GLUON_MIN_WORK):
        return None
    shared = gluon_shared_memory(device)
    if shared is None:
        return None
    from gemmzoo_triton.fp8 import gluon_scaled_kernel

    return gluon_scaled_kernel.config_for(shared, out_bytes, scaling)


GLUON_MIN_WORK = 2**31
"""Multiply-adds past which a problem goes to a Gluon kernel (fp8, scaled or not) where it can:
below, the pointer kernel's smaller tiles finish sooner; from this size up, the Gluon kernels
ran faster than the pointer kernel's best tile on the H200, most of all where M or N is not a
multiple of 16 (docs/results/2026-11-28-fp8-small-problems.md). The Triton TMA kernel, which
they replace where they run, starts at :data:`~gemmzoo_triton.core.hopper.TMA_MIN_WORK`."""


class TritonFp8Backend(TritonBackend):
    """``triton-fp8``: Triton kernels on fp8 operands, partial sums promoted to fp32, C in bf16.

    Computes only ``float8_e4m3fn``: A and B hold E4M3 values, C comes back in bfloat16 (the
    contract's per-tensor scale 1). The tensor cores' partial sums are promoted to the fp32
    accumulator once per K tile (:data:`~gemmzoo_triton.fp8.pointer_kernel.PROMOTE_EVERY`), as cuBLAS does
    with ``use_fast_accum=False``; Triton's default on Hopper (no promotion) is faster and fails
    the conformance bound.

    On a GPU, operands that are not K-major (A row-major, B column-major) are copied first (see
    :func:`k_major`: a row-major B costs a transpose per call). Sizes that keep a large problem
    off the TMA kernels (K not a multiple of 16, N not of 8) are copied into zero-padded buffers
    first, in one launch (:func:`padding_pays`). Problems that :func:`tma_fp8_eligible` allows
    (Hopper, aligned) past :data:`GLUON_MIN_WORK` multiply-adds go to
    :mod:`~gemmzoo_triton.fp8.gluon_kernel` (warp-specialized Gluon) where
    :func:`gluon_fp8_config` allows; else, past :data:`~gemmzoo_triton.core.hopper.TMA_MIN_WORK`, to
    :mod:`~gemmzoo_triton.fp8.tma_kernel` (TMA loads and
    stores, a persistent grid, two programs per SM, autotuned once per problem); the others to
    :mod:`~gemmzoo_triton.fp8.pointer_kernel` (autotuned likewise), which also runs on the CPU
    under Triton's interpreter (reading any layout through strides there, and working around the
    interpreter's E4M3 decoding and bfloat16 rounding). Available on CUDA GPUs of capability 8.9
    and later, and under the interpreter.

    Options (keywords of the constructor, for comparisons; pass such an instance as a backend):
    ``promote``, the partial-sum promotion (``None``: the kernels' default, once per K tile; a
    positive number: every that many products); ``tma=False`` keeps every problem on the
    pointer kernel; ``gluon=False`` sends what the Gluon kernel would take to the Triton TMA
    kernel; ``autotune``, ``"quick"`` or ``"full"``, as for ``triton-grouped``
    (:mod:`~gemmzoo_triton.core.autotune`).
    """

    name = "triton-fp8"
    classes = frozenset({"gemm", "scaled", "grouped"})

    def __init__(self, *, promote: int | None = None, tma: bool = True, gluon: bool = True,
                 autotune: str | None = None) -> None:
        super().__init__(autotune=autotune)
        if promote is not None and promote < 0:
            raise ValueError(f"triton-fp8: promote={promote}: the partial sums are promoted once per K "
                             "tile (None or 0) or every that many products (a positive number)")
        self.dtypes = frozenset({"float8_e4m3fn"})
        self.promote = promote
        self.tma = tma
        self.gluon = gluon

    def unavailable_reason(self) -> str | None:
        reason = triton_unavailable_reason()
        if reason is not None or interpreter_mode():
            return reason
        return _fp8_gpu_reason()

    def prepare(self, a: Any, b: Any) -> Callable[[Any, Any], Any]:
        """The plan for this problem: the kernel :meth:`matmul` would take, decided and bound
        once (the Gluon kernel at once; the TMA and pointer kernels after the first call, which
        tunes them), so that a call copies what :func:`k_major` copies, allocates C and launches."""
        M, N, K = self.check_operands(a, b)
        if M * N * K == 0:
            return self.compute
        import torch

        from gemmzoo_triton.fp8 import pointer_kernel as fp8_kernel

        x, y, _ = self.operands(a, b)
        promote = fp8_kernel.PROMOTE_EVERY if self.promote is None else self.promote
        gpu = self.device == "cuda"
        copy_a, copy_b = (x.stride(1) != 1, y.stride(0) != 1) if gpu else (False, False)
        if gpu:
            x, y = k_major(x, y)
        c = torch.empty((M, N), device=x.device, dtype=torch.bfloat16)
        tma = gpu and self.tma and tma_fp8_eligible(x, y, c)
        gluon = gpu and self.tma and self.gluon and promote == 0 and \
            tma_fp8_eligible(x, y, c, GLUON_MIN_WORK)
        if gpu and not (tma or gluon) and padding_pays(M, N, K, x.device):
            return _padded_plan(self, a, b)
        compute, allocate = self.compute, output_allocator(M, N, torch.bfloat16, x.device)
        mode = self.autotune
        if gluon:
            config = gluon_fp8_config(x, y)
            if config is not None:
                from gemmzoo_triton.core.hopper import num_sms
                from gemmzoo_triton.fp8 import gluon_kernel as fp8_gluon_kernel

                bound = fp8_gluon_kernel.bind(M, N, K, num_sms(x.device), config, x.device)
                return _plan(bound, copy_a, copy_b, True, allocate, compute)
        if tma:
            from gemmzoo_triton.core.hopper import num_sms
            from gemmzoo_triton.fp8 import tma_kernel as fp8_tma_kernel

            sms = num_sms(x.device)
            tuned_tma = _FirstCall(lambda x, y, c: fp8_tma_kernel.picked(x, y, promote, mode),
                                   lambda x, y, c: fp8_tma_kernel.launch(x, y, c, promote, mode),
                                   lambda config, x, y, c: fp8_tma_kernel.bind(M, N, K, promote, config, sms,
                                                                                x.device))
            return _plan(tuned_tma, copy_a, copy_b, True, allocate, compute)

        tuned_pointers = _FirstCall(lambda x, y, c: fp8_kernel.picked(x, y, promote, mode),
                                    lambda x, y, c: fp8_kernel.launch(x, y, c, promote, mode),
                                    lambda config, x, y, c: fp8_kernel.bind(x, y, promote, config))
        return _plan(tuned_pointers, copy_a, copy_b, False, allocate, compute)

    def matmul(self, a: Any, b: Any) -> Any:
        return self.remembered_plan(a, b)(a, b)

    def grouped_mm(self, a: Any, b: Any, offsets: Any) -> Any:
        """The ``grouped`` class on fp8 operands, C in bfloat16: one persistent launch over every
        group (:mod:`~gemmzoo_triton.core.grouped_mm_kernel`)."""
        from gemmzoo_triton.core import grouped_mm_kernel

        return grouped_mm_kernel.grouped_mm(self, a, b, offsets)

    def scaled_mm(self, a: Any, b: Any, scale_a: Any, scale_b: Any, out_dtype: str) -> Any:
        """The ``scaled`` class: block-wise scales in the accumulator loop, row-wise and
        tensor-wise in the epilogue; operands made K-major on a GPU (and K zero-padded to a
        multiple of 16 where it is not). On Hopper, problems that :func:`gluon_scaled_config`
        allows (``gluon`` on) run on :mod:`~gemmzoo_triton.fp8.gluon_scaled_kernel`
        (warp-specialized) where :func:`scaled_descriptors_take` the operands; with ``gluon``
        off, problems that :func:`scaled_tma_eligible` allows run on
        :mod:`~gemmzoo_triton.fp8.scaled_tma_kernel` (persistent, TMA); the others on
        :mod:`~gemmzoo_triton.fp8.scaled_kernel`, tuned on a problem's first call and then
        launched as bound (:func:`~gemmzoo_triton.fp8.scaled_kernel.bind`). What that takes is
        decided once per problem (the operands' shapes, strides, dtypes and devices, the scales'
        shapes, ``out_dtype``) in a plan kept for the last :data:`SCALED_PLANS_KEPT` problems met
        (:meth:`_scaled_plan`)."""
        import torch

        sa = torch.as_tensor(scale_a, dtype=torch.float32, device=a.device)
        sb = torch.as_tensor(scale_b, dtype=torch.float32, device=a.device)
        try:
            key = (*self.problem_key(a, b), sa.shape, sb.shape, str(out_dtype))
        except AttributeError:  # not tensors: the plan's checks say what is wrong
            return self._scaled_plan(a, b, sa, sb, out_dtype)(a, b, sa, sb)
        plan = self.kept("_scaled_plans", key, lambda: self._scaled_plan(a, b, sa, sb, out_dtype),
                         SCALED_PLANS_KEPT)
        return plan(a, b, sa, sb)

    def _scaled_plan(self, a: Any, b: Any, sa: Any, sb: Any, out_dtype: str) -> Callable[..., Any]:
        """``plan(a, b, sa, sb)`` for :meth:`scaled_mm`'s problem: its checks made, and the copies,
        the kernel and (Gluon) its bound launch chosen; a call copies what it must, allocates C,
        checks the TMA kernels' alignment and launches. Bad input raises here, and is never kept."""
        import torch

        from gemmzoo.problems.class_math import scaled_problem
        from gemmzoo.problems.classes import SCALED_OUT_DTYPES
        from gemmzoo_triton.core.padding import round_up
        from gemmzoo_triton.fp8 import scaled_kernel

        scaling, problem = scaled_problem(tuple(a.shape), tuple(b.shape), tuple(sa.shape), tuple(sb.shape))

        def fail(why: str) -> Exception:
            return self.input_error("scaled_mm", why, A=a.shape, B=b.shape, scale_a=sa.shape,
                                    scale_b=sb.shape)

        if scaling is None:
            raise fail(problem)
        if a.device.type != self.device:
            raise fail(f"A is on {a.device}, this backend runs on {self.device}")
        if a.dtype != torch.float8_e4m3fn or b.dtype != torch.float8_e4m3fn or a.device != b.device:
            raise fail(f"A is {a.dtype} on {a.device} and B {b.dtype} on {b.device}; both must be "
                       "float8_e4m3fn on one device")
        if out_dtype not in SCALED_OUT_DTYPES:
            raise fail(f"out_dtype must be one of {', '.join(SCALED_OUT_DTYPES)}, not {out_dtype!r}")
        (M, K), N = a.shape, b.shape[1]
        out = getattr(torch, out_dtype)
        device = a.device
        if M * N == 0 or K == 0:
            return lambda a, b, sa, sb: torch.zeros((M, N), dtype=out, device=device)
        gpu = self.device == "cuda"
        if gpu and K % 16:
            copies = k_major_copies(a, b)

            def operands(a: Any, b: Any) -> tuple[Any, Any]:
                x, y, _ = copies(a, b)
                return x, y
        else:
            operands = k_major if gpu else _as_given
        interpreted = interpreter_mode()
        c_dtype = torch.float32 if interpreted else out
        gluon = None
        k16 = round_up(K, 16)
        if gpu and self.tma and self.gluon:
            config = gluon_scaled_config(M, N, device, c_dtype.itemsize, scaling, k16)
            if config is not None:
                from gemmzoo_triton.core.hopper import num_sms
                from gemmzoo_triton.fp8 import gluon_scaled_kernel

                gluon = gluon_scaled_kernel.bind(M, N, k16, scaling, num_sms(device), config, device)
        tma = gpu and self.tma and gluon is None
        mode = self.autotune
        if tma:
            from gemmzoo_triton.core.hopper import num_sms
            from gemmzoo_triton.fp8 import scaled_tma_kernel

            sms = num_sms(device)

        pointers = _FirstCall(lambda x, y, sa, sb, c: scaled_kernel.picked(x, y, scaling, c, mode),
                              lambda x, y, sa, sb, c: scaled_kernel.launch(x, y, sa, sb, scaling, c, mode),
                              lambda config, x, y, sa, sb, c: scaled_kernel.bind(x, y, sa, sb, scaling, c,
                                                                                 config))

        def plan(a: Any, b: Any, sa: Any, sb: Any) -> Any:
            x, y = operands(a, b)
            c = _output(M, N, c_dtype, device)
            if gluon is not None and scaled_descriptors_take(x, y, c):
                gluon(x, y, sa, sb, c)
                return c
            sa, sb = sa.contiguous(), sb.contiguous()
            if tma and scaled_tma_eligible(x, y, c):
                scaled_tma_kernel.launch(x, y, sa, sb, scaling, c, sms, mode)
                return c
            pointers(x, y, sa, sb, c)
            return c.to(out) if interpreted else c

        return plan

    def compute(self, a: Any, b: Any) -> Any:
        """``a @ b`` with every decision taken on this call (the plans' fallback)."""
        import torch

        from gemmzoo_triton.fp8 import pointer_kernel as fp8_kernel

        # (1) check the operands
        M, N, K = self.check_operands(a, b)
        x, y, _ = self.operands(a, b)
        promote = fp8_kernel.PROMOTE_EVERY if self.promote is None else self.promote
        # (2) allocate the output: bfloat16, as the contract's float8_e4m3fn says
        c = torch.empty((M, N), device=x.device, dtype=torch.bfloat16)
        if c.numel() == 0:
            return c
        if K == 0:
            return c.zero_()
        # (3) launch; the autotuner picks the config on a problem's first call
        if self.device == "cuda":
            x, y = k_major(x, y)
            if self.tma and self.gluon and promote == 0 and tma_fp8_eligible(x, y, c, GLUON_MIN_WORK):
                config = gluon_fp8_config(x, y)
                if config is not None:
                    from gemmzoo_triton.core.hopper import num_sms
                    from gemmzoo_triton.fp8 import gluon_kernel as fp8_gluon_kernel

                    fp8_gluon_kernel.launch(x, y, c, num_sms(x.device), config)
                    return c
            if self.tma and tma_fp8_eligible(x, y, c):
                from gemmzoo_triton.fp8 import tma_kernel as fp8_tma_kernel

                fp8_tma_kernel.launch(x, y, c, promote, self.autotune)
                return c
        fp8_kernel.launch(x, y, c, promote, self.autotune)
        return c


PAD_MIN_WORK = 2**30
"""Multiply-adds past which a problem whose rows are not 16-byte aligned is copied into padded
operands (:func:`padding_pays`)."""


def padding_pays(m: int, n: int, k: int, device: Any) -> bool:
    """Whether a problem is multiplied on zero-padded copies of its operands: K not a multiple
    of 16 (fp8 rows of A and Bᵀ) or N not of 8 (bf16 rows of C), on a GPU, with more than
    :data:`PAD_MIN_WORK` multiply-adds.

    On a TMA device past :data:`~gemmzoo_triton.core.hopper.TMA_MIN_WORK` the descriptors need
    aligned rows; below it, and on other GPUs, the pointer kernel's loads of rows that are not
    16-byte aligned cannot be vectorised, and it runs many times slower than at the aligned
    neighbour (docs/results/2026-11-28-regret-classes-gpu-suite.md). The copies move
    (M + N)·K bytes, small against 2·M·N·K operations once the work is past the threshold.
    """
    return (k % 16 != 0 or n % 8 != 0) and m * n * k > PAD_MIN_WORK and device.type == "cuda"


def _padded_plan(backend: Any, a: Any, b: Any) -> Callable[[Any, Any], Any]:
    """``plan(a, b)`` for operands like ``a`` (M×K) and ``b`` (K×N): A copied into an M×K16 buffer
    and Bᵀ into an N8×K16 one (zeros in the padding, which add nothing to the sums), both in one
    launch into a buffer kept per thread and stream (:func:`k_major_copies`), the aligned
    problem's own plan (TMA or Gluon) run on them, and C returned as the M×N view of the M×N8
    product."""
    from gemmzoo_triton.core.padding import round_up

    N = b.shape[1]
    n8 = round_up(N, 8)
    copies = k_major_copies(a, b, n8)
    inner: list[Callable[[Any, Any], Any]] = []

    def plan(a: Any, b: Any) -> Any:
        x, y, _ = copies(a, b)
        if not inner:
            inner.append(backend.prepare(x, y))
        c = inner[0](x, y)
        return c if n8 == N else c[:, :N]

    return plan


SCALED_PLANS_KEPT = 64
"""Scaled problems whose plans (with their kept copies, :func:`k_major_copies`) a backend keeps
(:meth:`TritonFp8Backend._scaled_plan`)."""


def _as_given(x: Any, y: Any) -> tuple[Any, Any]:
    """The operands as they are (the CPU's interpreted kernel reads any layout through strides)."""
    return x, y


def k_major_copies(like_a: Any, like_b: Any, n_rows: int | None = None) -> Any:
    """``copies(a, b) -> (A, B, None)`` for operands like ``like_a`` (M×K) and ``like_b`` (K×N)
    whose rows are not all 16-byte aligned: A copied row-major and B column-major, as
    :func:`k_major` makes them, with K zero-padded to a multiple of 16, into one buffer kept per
    thread and CUDA stream
    (:class:`~gemmzoo_triton.core.aligned.KeptCopies`: one launch of the copy kernel, which writes
    the zeros too, where neither copy transposes). Every row then starts 16-byte aligned (fp8 rows of
    7000 fp8 bytes can be neither loaded in vectors nor described for TMA), and the kernels see
    the K of the aligned problem. The padding never starts a new 128-block (128 is a multiple of
    16), so block-wise scales stay as they are. ``n_rows``: Bᵀ copied into that many rows, those
    past N zeros (N padded so that C's rows are aligned too)."""
    from gemmzoo_triton.core.aligned import AlignedCopy, KeptCopies
    from gemmzoo_triton.core.padding import round_up

    k16 = round_up(like_a.shape[1], 16)
    return KeptCopies(AlignedCopy(like_a, column_major=False, zero_padded=k16),
                      AlignedCopy(like_b, column_major=True, zero_padded=k16, padded_rows=n_rows),
                      lambda x, y: None)


def _output(m: int, n: int, dtype: Any, device: Any) -> Any:
    """C for an M×N product: an M×N view of a buffer whose rows are padded to 16 bytes where N's
    are not (TMA stores need aligned rows), else a contiguous tensor."""
    import torch

    from gemmzoo_triton.core.padding import padded

    stride = padded(n, dtype.itemsize)
    if stride == n or device.type != "cuda":
        return torch.empty((m, n), dtype=dtype, device=device)
    return torch.empty((m, stride), dtype=dtype, device=device)[:, :n]


class _FirstCall:
    """``run(*args)`` of a kernel tuned once per problem: on the first call, the config
    ``picked(*args)`` gives, or where none is yet, the one ``tune(*args)`` picks while it computes C;
    the launch of that config bound once (``bind(config, *args)``), launched by every later call."""

    __slots__ = ("_bind", "_bound", "_picked", "_tune")

    def __init__(self, picked: Callable[..., Any], tune: Callable[..., Any],
                 bind: Callable[..., Callable[..., None]]) -> None:
        self._picked, self._tune, self._bind = picked, tune, bind
        self._bound: Callable[..., None] | None = None

    def __call__(self, *args: Any) -> None:
        bound = self._bound
        if bound is not None:
            bound(*args)
            return
        config = self._picked(*args)
        if config is None:  # tuning launches the configs, the pick among them computing C
            self._bound = self._bind(self._tune(*args), *args)
            return
        self._bound = bound = self._bind(config, *args)
        bound(*args)


def _plan(run: Callable[[Any, Any, Any], None], copy_a: bool, copy_b: bool, descriptors: bool,
          allocate: Callable[[], Any], fallback: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    """``plan(a, b)``: A and B made K-major where the problem's layouts need it (``copy_a``,
    ``copy_b``), C allocated, ``run(x, y, c)``. With ``descriptors`` an operand whose start is not
    16-byte aligned (views can start anywhere) goes to ``fallback`` instead."""
    if descriptors:
        def plan(a: Any, b: Any) -> Any:
            x = a.contiguous() if copy_a else a
            y = b.t().contiguous().t() if copy_b else b
            if (x.data_ptr() | y.data_ptr()) % 16:  # a start the descriptors cannot take
                return fallback(a, b)
            c = allocate()
            run(x, y, c)
            return c

        return plan

    def plan_pointers(a: Any, b: Any) -> Any:
        c = allocate()
        run(a.contiguous() if copy_a else a, b.t().contiguous().t() if copy_b else b, c)
        return c

    return plan_pointers
