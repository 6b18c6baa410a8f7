"""Autograd through ``gemmzoo.matmul``: ``C = A·B`` on torch tensors that require grad.

The forward product is the plan ``gemmzoo.matmul`` made for the operands (detached), and the
backward products are ``gemmzoo.matmul`` calls too, so the zoo chooses a backend for each of them
(``dA = dC·Bᵀ`` and ``dB = Aᵀ·dC``) with the same ``backend``, ``accuracy`` and ``by`` as the forward call;
each is computed only when its operand requires grad. Like any ``gemmzoo.matmul`` call, each is
recorded with its shape and layout where nothing is stored for it, so ``gemmzoo tune --recorded``
tunes it. A gradient comes in its operand's own layout, as torch's ``mm`` backward gives it: for a
column-major operand (``x @ w.t()``'s ``w.t()``) the transposed product is computed and its
transpose returned (``dBᵀ = dCᵀ·A``), so the gradient of a weight stored ``out x in`` is a
contiguous ``out x in`` tensor and needs no copy. Under ``torch.no_grad()`` or inference mode
the plan calls the forward product directly and the result does not require grad, as
``torch.matmul``'s would not.

Where the forward product and both backward products are the caller's library's own
(:attr:`gemmzoo.Backend.library_product`: nothing measured for them, or torch's own product
measured fastest), :mod:`gemmzoo.dispatch.matmul` plans the call as ``torch.mm`` itself on the
operands, and torch's own autograd computes the backward products with the same call: this module
only names those products (:func:`backward_problems`), so they are recorded and looked up with the
layouts the autograd function below would give them.

Double backward works: with ``create_graph=True`` the backward products are themselves
``gemmzoo.matmul`` calls on tensors that require grad, so they are recorded in turn. torch is
imported when the first differentiable plan is made.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from gemmzoo.contract.backend import TF32Array

Plan = Callable[[Any, Any], Any]
Multiply = Callable[..., Any]
"""``gemmzoo.matmul``'s signature: ``(a, b, backend, *, accuracy, by)``."""


def column_major(x: Any) -> bool:
    """Whether the 2-D tensor ``x`` is stored column by column with no gaps (the transposed view
    of a contiguous tensor): torch's own rule for computing its gradient transposed."""
    return x.stride(0) == 1 and x.stride(1) == x.shape[0]


def gradient_products(a: Any, b: Any, grad: Any, need_a: bool, need_b: bool) -> list[tuple[Any, Any, bool]]:
    """The products that give ``C = A·B``'s gradients from the upstream gradient ``grad``: for dA
    (where ``need_a``), then dB (where ``need_b``), the operands ``(x, y)`` and whether ``x·y`` is
    the gradient's transpose. Each gradient comes in its operand's own layout, as torch's mm
    backward gives it: a column-major operand (a weight's transposed view) gets the transposed
    product's transpose, so its gradient needs no copy to match the parameter's strides."""
    found = []
    if need_a:  # dA = dC·Bᵀ, or (B·dCᵀ)ᵀ for a column-major A
        found.append((b, grad.t(), True) if column_major(a) else (grad, b.t(), False))
    if need_b:  # dB = Aᵀ·dC, or (dCᵀ·A)ᵀ for a column-major B
        found.append((grad.t(), a, True) if column_major(b) else (a.t(), grad, False))
    return found


def backward_problems(a: Any, b: Any) -> list[tuple[tuple[int, int, int], str]]:
    """The backward products of ``C = A·B`` for 2-D torch operands ``a`` and ``b`` (those whose
    operand requires grad), each as ``((M, N, K), layout)`` as :func:`differentiable`'s backward
    computes it (:func:`gradient_products`), for an upstream gradient stored row by row (as
    autograd gives most): worked out on meta tensors of the operands' strides, nothing computed."""
    import torch

    def meta(x: Any) -> Any:
        return torch.empty_strided(x.shape, x.stride(), device="meta", dtype=x.dtype)

    def letter(x: Any) -> str:
        return "T" if x.stride(0) < x.stride(1) else "N"

    upstream = torch.empty((a.shape[0], b.shape[1]), device="meta", dtype=a.dtype)
    return [((x.shape[0], y.shape[1], x.shape[1]), letter(x) + letter(y))
            for x, y, _ in gradient_products(meta(a), meta(b), upstream, a.requires_grad, b.requires_grad)]


@functools.cache
def _function() -> Any:
    """The ``torch.autograd.Function`` of the product (torch is imported here)."""
    import torch

    def product(multiply: Multiply, x: Any, y: Any, backend: Any, accuracy: str, by: str, tf32: bool) -> Any:
        if tf32:
            return multiply(TF32Array(x), TF32Array(y), backend, accuracy=accuracy, by=by).data
        return multiply(x, y, backend, accuracy=accuracy, by=by)

    class GemmzooMatmul(torch.autograd.Function):
        """``C = A·B`` through a gemmzoo plan; both gradients through ``gemmzoo.matmul``."""

        @staticmethod
        def forward(ctx: Any, a: Any, b: Any, run: Plan, multiply: Multiply,  # type: ignore[override]
                    backend: Any, accuracy: str, by: str, tf32: bool) -> Any:
            ctx.save_for_backward(a, b)
            ctx.gemm = multiply, backend, accuracy, by, tf32
            if tf32:
                return run(TF32Array(a.detach()), TF32Array(b.detach())).data
            return run(a.detach(), b.detach())

        @staticmethod
        def backward(ctx: Any, grad: Any) -> tuple[Any, ...]:  # type: ignore[override]
            a, b = ctx.saved_tensors
            multiply, backend, accuracy, by, tf32 = ctx.gemm
            if 0 in grad.stride():  # an expanded gradient (of a sum, say): give the GEMM real rows
                grad = grad.contiguous()
            need_a, need_b = ctx.needs_input_grad[:2]
            grads = []
            for x, y, transposed in gradient_products(a, b, grad, need_a, need_b):
                c = product(multiply, x, y, backend, accuracy, by, tf32)
                grads.append(c.t() if transposed else c)
            grad_a = grads.pop(0) if need_a else None
            grad_b = grads.pop(0) if need_b else None
            return grad_a, grad_b, None, None, None, None, None, None

    return GemmzooMatmul


def differentiable(forward: Plan, multiply: Multiply, backend: Any, accuracy: str, by: str,
                   tf32: bool) -> Plan:
    """The plan of a problem whose operands require grad: ``forward`` (the plan of the detached
    operands) inside an autograd function whose backward products go through ``multiply``
    (``gemmzoo.matmul``, handed in by :mod:`gemmzoo.dispatch.matmul`: this module imports no dispatch).
    ``tf32``: the operands and the result are :class:`~gemmzoo.TF32Array` wrappers."""
    import torch

    apply = _function().apply
    grad_enabled = torch.is_grad_enabled

    if tf32:
        def plan_tf32(a: Any, b: Any) -> Any:
            x, y = a.data, b.data
            if not grad_enabled():
                return forward(TF32Array(x.detach()), TF32Array(y.detach()))
            return TF32Array(apply(x, y, forward, multiply, backend, accuracy, by, True))

        return plan_tf32

    def plan(a: Any, b: Any) -> Any:
        if not grad_enabled():
            return forward(a.detach(), b.detach())
        return apply(a, b, forward, multiply, backend, accuracy, by, False)

    return plan
