"""The problem classes beyond gemm on torch tensors (:mod:`gemmzoo.problems.classes`), shared by the
``torch-cpu`` and ``torch`` backends.

- ``bmm``: ``torch.matmul``'s broadcasting product, on CUDA with the dtype's cuBLAS switches
  held for the launch as the 2-D product holds them (float8_e4m3fn: each matrix of the broadcast
  batch through the backend's own ``matmul``, as ``torch.matmul`` has no fp8 product).
- ``scaled_mm``: on CUDA, ``torch._scaled_mm`` for tensorwise and rowwise scales (cuBLASLt, fp32
  promotion of partial sums), on operands copied into 16-aligned buffers when their sizes are
  not multiples of 16 (zeros in the padding, scale 1 for padded columns; a plan per problem keeps
  the buffers, :func:`gemmzoo_torch.fp8.class_scaled_plan`, and C is the M×N view); blockwise
  scales, and
  any scale where ``torch._scaled_mm`` is missing, through the dequantized operands in fp32.
- ``grouped_mm``: ``torch._grouped_mm`` where the installed torch has it and the operands meet
  its alignment (16-byte rows); fp8 on CUDA through ``torch._scaled_grouped_mm`` with unit
  row-wise scales where it is there (K and N multiples of 16); otherwise, or where those refuse
  the operands, one ``matmul`` per non-empty group (which reads the offsets on the host), the
  baseline every backend can run.
"""

from __future__ import annotations

from typing import Any

from gemmzoo.problems.class_math import batched_problem, offsets_problem, scaled_problem
from gemmzoo.problems.classes import BLOCK, SCALED_OUT_DTYPES
from gemmzoo_torch import torch_internals

ALIGN_BYTES = 16
SCALED_PLANS_KEPT = 64


class TorchClasses:
    """``bmm``, ``scaled_mm`` and ``grouped_mm`` for a torch backend (a mixin of Backend)."""

    def bmm(self, a: Any, b: Any) -> Any:
        import torch

        # Operands of one declared dtype on this backend's device go straight to torch.matmul, which
        # rejects shapes that do not broadcast (said again below, naming the shapes).
        try:
            if type(a) is type(b) and a.dtype == b.dtype and a.dtype in self._torch_dtypes \
                    and a.dtype != getattr(torch, "float8_e4m3fn", None) \
                    and a.is_cuda == (self.device == "cuda") and a.dim() >= 2 and b.dim() >= 2:
                return self._batched_launch(a.dtype)(a, b) if a.is_cuda else torch.matmul(a, b)
        except Exception:
            pass
        batch, problem = batched_problem(tuple(a.shape), tuple(b.shape))
        if batch is None or a.dtype != b.dtype or self.device not in str(a.device):
            why = problem or f"A is {a.dtype} on {a.device}, B is {b.dtype} on {b.device}; one dtype " \
                f"and this backend's device ({self.device}) are needed"
            raise self.input_error("bmm", why, A=a.shape, B=b.shape)
        if a.dtype == getattr(torch, "float8_e4m3fn", None):
            m, n = a.shape[-2], b.shape[-1]
            flat_a = a.expand(*batch, *a.shape[-2:]).reshape(-1, *a.shape[-2:])
            flat_b = b.expand(*batch, *b.shape[-2:]).reshape(-1, *b.shape[-2:])
            if flat_a.shape[0] == 0:
                return torch.empty((*batch, m, n), dtype=torch.bfloat16, device=a.device)
            return torch.stack([self.matmul(x, y) for x, y in zip(flat_a, flat_b, strict=True)]).reshape(
                *batch, m, n)
        return self._batched_launch(a.dtype)(a, b) if a.is_cuda else torch.matmul(a, b)

    def _batched_launch(self, dtype: Any) -> Any:
        """``torch.matmul`` with the dtype's cuBLAS switches held for the launch (fp32 accumulation
        for the 16-bit types, IEEE fp32), as the 2-D product holds them; made once per dtype."""
        launches = self.__dict__.setdefault("_batched_launches", {})
        found = launches.get(dtype)
        if found is None:
            import torch

            from gemmzoo_torch.precision import held

            found = launches[dtype] = held(str(dtype).removeprefix("torch."), torch.matmul)
        return found

    def scaled_mm(self, a: Any, b: Any, scale_a: Any, scale_b: Any, out_dtype: str) -> Any:
        import torch

        sa, sb = _float32(scale_a, a.device), _float32(scale_b, a.device)
        scaling, problem = scaled_problem(tuple(a.shape), tuple(b.shape), tuple(sa.shape), tuple(sb.shape))

        def fail(why: str) -> Exception:
            return self.input_error("scaled_mm", why, A=a.shape, B=b.shape, scale_a=sa.shape,
                                    scale_b=sb.shape)

        if scaling is None:
            raise fail(problem)
        fp8 = getattr(torch, "float8_e4m3fn", None)
        if a.dtype != fp8 or b.dtype != fp8:
            raise fail(f"A is {a.dtype} and B is {b.dtype}; both must be float8_e4m3fn")
        if out_dtype not in SCALED_OUT_DTYPES:
            raise fail(f"out_dtype must be one of {', '.join(SCALED_OUT_DTYPES)}, not {out_dtype!r}")
        out = getattr(torch, out_dtype)
        (m, k), n = a.shape, b.shape[1]
        if min(m, n) == 0:
            return torch.empty((m, n), dtype=out, device=a.device)
        op = torch_internals.scaled_mm_op()
        if a.is_cuda and scaling != "blockwise" and op is not None and k > 0:
            return self._scaled_launch(op, a, b, scaling, out)(a, b, sa, sb)
        return _dequantized_product(a, b, sa, sb, scaling, out)

    def _scaled_launch(self, op: Any, a: Any, b: Any, scaling: str, out: Any) -> Any:
        """The kept :func:`~gemmzoo_torch.fp8.class_scaled_plan` of this problem (its
        :meth:`~gemmzoo.arrays.torch_tensors.TorchTensors.problem_key`, scaling and output dtype;
        the last :data:`SCALED_PLANS_KEPT` met)."""
        from gemmzoo_torch.fp8 import class_scaled_plan

        return self.kept("_scaled_plans", (*self.problem_key(a, b), scaling, out),
                         lambda: class_scaled_plan(op, a, b, scaling, out), SCALED_PLANS_KEPT)

    def grouped_mm(self, a: Any, b: Any, offsets: Any) -> Any:
        import torch

        offs = offsets if isinstance(offsets, torch.Tensor) else torch.as_tensor(offsets)
        shapes = {"A": a.shape, "B": b.shape, "offsets": offs.shape}
        if a.dim() != 2 or b.dim() != 3:
            raise self.input_error("grouped_mm", "A must be 2-D (total M×K) and B 3-D (G×K×N)", **shapes)
        if a.shape[1] != b.shape[1]:
            raise self.input_error("grouped_mm", f"inner dimensions differ (A has K={a.shape[1]}, "
                                   f"B has K={b.shape[1]})", **shapes)
        if a.dtype != b.dtype or a.device != b.device:
            raise self.input_error("grouped_mm", f"A is {a.dtype} on {a.device}, B is {b.dtype} on "
                                   f"{b.device}", **shapes)
        if offs.dim() != 1 or offs.shape[0] != b.shape[0] or offs.dtype != torch.int32:
            raise self.input_error("grouped_mm", f"offsets must be int32 with one end row per group "
                                   f"({b.shape[0]}), not {offs.dtype}", **shapes)
        op = torch_internals.grouped_mm_op()
        if op is not None and _grouped_ready(a, b):
            try:
                return op(a, b, offs=offs.to(a.device))
            except RuntimeError:  # a layout or device this torch's grouped kernels refuse: the loop
                pass
        scaled_op = torch_internals.scaled_grouped_mm_op()
        if scaled_op is not None and _scaled_grouped_ready(a, b):
            try:
                return _fp8_grouped(scaled_op, a, b, offs.to(a.device))
            except RuntimeError:  # sizes or a GPU the fp8 grouped kernels refuse: the loop
                pass
        ends = offs.tolist()
        problem = offsets_problem(ends, b.shape[0], a.shape[0])
        if problem is not None:
            raise self.input_error("grouped_mm", problem, **shapes)
        return grouped_loop(self.matmul, a, b, ends)


def grouped_loop(product: Any, a: Any, b: Any, ends: list[int]) -> Any:
    """One ``product`` (a 2-D matmul) per non-empty group, written into C; rows past the last
    offset are zero. The per-group loop baseline."""
    import torch

    fp8 = a.dtype == getattr(torch, "float8_e4m3fn", None)
    c = torch.zeros((a.shape[0], b.shape[2]), dtype=torch.bfloat16 if fp8 else a.dtype, device=a.device)
    start = 0
    for g, end in enumerate(ends):
        if end > start:
            c[start:end] = product(a[start:end], b[g])
        start = end
    return c


def _grouped_ready(a: Any, b: Any) -> bool:
    """Whether ``torch._grouped_mm`` takes these operands: 16- or 32-bit floats (fp8 goes through
    the scaled grouped call or the loop), and every row of A and of each B[g] 16-byte aligned."""
    import torch

    if a.dtype not in (torch.bfloat16, torch.float16, torch.float32) or a.shape[0] == 0:
        return False
    if a.is_cuda and a.dtype != torch.bfloat16:  # cuBLAS/CUTLASS grouped kernels take bf16
        return False
    size = a.element_size()
    rows_aligned = (a.shape[1] * size) % ALIGN_BYTES == 0 and (b.shape[2] * size) % ALIGN_BYTES == 0
    return rows_aligned and a.is_contiguous() and b.is_contiguous()


def _scaled_grouped_ready(a: Any, b: Any) -> bool:
    """Whether ``torch._scaled_grouped_mm`` may take fp8 operands: on CUDA, K and N multiples of 16."""
    import torch

    fp8 = getattr(torch, "float8_e4m3fn", None)
    return a.is_cuda and a.dtype == fp8 and a.shape[0] > 0 and a.shape[1] % 16 == 0 and b.shape[2] % 16 == 0


def _fp8_grouped(op: Any, a: Any, b: Any, offs: Any) -> Any:
    """fp8 groups through ``torch._scaled_grouped_mm`` with unit row-wise scales (the class's
    unscaled product), A row-major and each B[g] column-major as it wants them, C in bfloat16."""
    import torch

    x = a.contiguous()
    y = b.transpose(1, 2).contiguous().transpose(1, 2)
    scale_a = torch.ones(a.shape[0], dtype=torch.float32, device=a.device)
    scale_b = torch.ones((b.shape[0], b.shape[2]), dtype=torch.float32, device=a.device)
    return op(x, y, scale_a, scale_b, offs=offs, out_dtype=torch.bfloat16, use_fast_accum=False)


def _float32(x: Any, device: Any) -> Any:
    import torch

    if isinstance(x, torch.Tensor):
        return x.to(device=device, dtype=torch.float32)
    return torch.as_tensor(x, dtype=torch.float32, device=device)


def _dequantized_product(a: Any, b: Any, sa: Any, sb: Any, scaling: str, out: Any) -> Any:
    """The operands dequantized in fp32 (values times their scales), one IEEE fp32 product."""
    import torch

    (m, k), n = a.shape, b.shape[1]
    x = a.float() * _expanded(sa, scaling, m, k, "A")
    y = b.float() * _expanded(sb, scaling, k, n, "B")
    if x.is_cuda:
        from gemmzoo_torch.precision import runner

        return runner("float32", ())(x, y).to(out)
    return torch.mm(x, y).to(out)


def _expanded(scale: Any, scaling: str, rows: int, cols: int, operand: str) -> Any:
    if scaling == "tensorwise":
        return scale.reshape(())
    if scaling == "rowwise":
        return scale.reshape(rows, 1) if operand == "A" else scale.reshape(1, cols)
    if operand == "A":
        return scale.repeat_interleave(BLOCK, dim=1)[:, :cols]
    return scale.repeat_interleave(BLOCK, dim=0).repeat_interleave(BLOCK, dim=1)[:rows, :cols]
