"""``gemmzoo.matmul``: C = A·B for NumPy, CuPy or torch arrays, through any backend.

The result comes back in the caller's array type, on the caller's device, in the caller's dtype
(bfloat16 for float8_e4m3fn operands: a torch bfloat16 tensor, or an ml_dtypes bfloat16 array).
When the chosen backend keeps its arrays on the same device in another library, operands and
result cross over through DLPack (``torch.from_numpy`` / ``.numpy()`` between NumPy and torch on
the CPU), which shares memory instead of copying. A backend on another device than the caller's
(only when named explicitly) receives host copies through ``from_numpy``, and its result is
copied back. On torch tensors that require grad the result is differentiable: both backward
products go through ``gemmzoo.matmul`` too (see :mod:`gemmzoo.dispatch.autograd`).

The work of a call is done once per *problem* (array types, shapes, strides, dtypes, devices): a
plan is made then (:func:`make_plan`) and kept, and later calls go straight through it. Which
backend a problem gets is decided without measuring (:func:`gemmzoo.tuning.select.plan_decision`),
so a new shape never stalls a program; shapes met without a stored measurement are recorded for
``gemmzoo tune --recorded``. Where nothing is measured and the shipped prior routes the problem to
the backend whose product is the caller's library's own (``torch.mm`` on torch tensors,
``numpy.matmul`` on NumPy arrays), the plan is that library call itself, under the caller's own
precision switches: the call ``gemmzoo.matmul`` replaces (see docs/drop-in.md).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from gemmzoo.arrays.libraries import (
    array_kind,
    convert,
    device_of,
    dtype_of,
    native_kind,
    own_product,
    to_host,
)
from gemmzoo.contract.backend import TF32Array, is_self_checking, shape_text
from gemmzoo.contract.dtypes import DTYPES
from gemmzoo.dispatch.plan_cache import PlanCache
from gemmzoo.errors import BackendUnavailableError, GemmInputError
from gemmzoo.plugins.registry import unavailable_reason
from gemmzoo.tuning.select import RANK_BY, plan_decision
from gemmzoo.tuning.state import _current, _default, current
from gemmzoo.tuning.state import default as _default_session

_get_session = _current.get


def _input_error(problem: str, a: Any, b: Any) -> GemmInputError:
    return GemmInputError(
        f"gemmzoo.matmul of A {shape_text(getattr(a, 'shape', ()))}, "
        f"B {shape_text(getattr(b, 'shape', ()))}: {problem}"
    )


def _from_host(h: np.ndarray, kind: str, like: Any, dtype: str = "") -> Any:
    """``h`` as an array of ``like``'s library and device, in ``like``'s dtype, or in bfloat16 when
    ``dtype`` (the operands' gemmzoo dtype) is float8_e4m3fn."""
    fp8 = dtype == "float8_e4m3fn"
    if kind == "numpy":
        if fp8:
            from gemmzoo.contract.fp8 import BFLOAT16

            return h.astype(BFLOAT16)
        return h.astype(like.dtype, copy=False)
    if kind == "cupy":
        import cupy

        return cupy.asarray(h).astype(like.dtype, copy=False)
    import torch

    result_dtype = torch.bfloat16 if fp8 else like.dtype
    return torch.from_numpy(np.ascontiguousarray(h)).to(device=like.device, dtype=result_dtype)


# A problem's key: both array types, then what a plan was made for (see
# :meth:`gemmzoo.Backend.prepare`) — shapes, strides, dtypes, devices, and for torch whether
# autograd is on — then the backend named, the accuracy class and what candidates are ranked by.
# What else changes a choice (the configuration) is the session's, and each session keeps its own
# plans. Each function builds it in one expression: it runs on every call.
def _numpy_key(a: Any, b: Any, backend: Any, accuracy: str, by: str) -> tuple[Any, ...]:
    return (type(a), type(b), a.shape, b.shape, a.strides, b.strides, a.dtype, b.dtype,
            backend, accuracy, by)


# torch's is read in fewer attributes. Strides: ``True`` for a contiguous tensor (the strides
# of its dimensions of size 1, the only ones contiguity leaves open, address nothing). B's dtype
# and device: only A's are held, and whether B is on the meta device; torch.mm refuses a B of
# another dtype or on another real device, and a plan that would not checks B (see make_plan).
def _torch_key(a: Any, b: Any, backend: Any, accuracy: str, by: str) -> tuple[Any, ...]:
    return (type(a), type(b), a.shape, b.shape, a.is_contiguous() or a.stride(),
            b.is_contiguous() or b.stride(), a.dtype, a.device, b.is_meta, a.requires_grad,
            b.requires_grad, backend, accuracy, by)


def _cupy_key(a: Any, b: Any, backend: Any, accuracy: str, by: str) -> tuple[Any, ...]:
    # MemoryPointer.device_id is the array's device, read faster than a.device.id (no Device object)
    return (type(a), type(b), a.shape, b.shape, a.strides, b.strides, a.dtype, b.dtype,
            a.data.device_id, b.data.device_id, backend, accuracy, by)


def _tf32_key(a: Any, b: Any, backend: Any, accuracy: str, by: str) -> tuple[Any, ...]:
    inner = a.data
    return (type(a), type(b), *_KEYS[type(inner)](inner, b.data, backend, accuracy, by))


KeyFunction = Callable[[Any, Any, Any, str, str], tuple[Any, ...]]
_KEY_OF_KIND: dict[str, KeyFunction] = {"numpy": _numpy_key, "torch": _torch_key, "cupy": _cupy_key}
_KEYS: dict[type, KeyFunction] = {TF32Array: _tf32_key}
"""The key function of each array type of A met so far, decided once per type (see
:func:`_learn_key`)."""



_ROUTES: dict[type, Callable[[Any, Any, Any, str, str], Any]] = {}
"""Array types of A whose calls go to the compiled dispatch (:mod:`gemmzoo.native`) instead."""
_compiled_tried = False


def _learn_key(array_type: type) -> None:
    global _compiled_tried
    kind = array_kind(array_type)
    if kind is not None:
        _KEYS[array_type] = _KEY_OF_KIND[kind]
    if kind == "torch" and not _compiled_tried:
        _compiled_tried = True
        from gemmzoo import native

        module = native.load()
        if module is not None:
            use_compiled(module)


def use_compiled(module: Any) -> None:
    """Route calls on plain torch tensors (parameters, TF32Array) through the compiled dispatch
    ``module`` (see :mod:`gemmzoo.native`), or back through Python when ``module`` is ``None``
    (and then not switched to again by the current session's background build)."""
    import torch

    if module is None:
        _ROUTES.clear()
        from gemmzoo.native.background import watch_of

        watch = watch_of(current())  # nor switched back to by the session's background build
        watch.finished, watch.why = True, "turned off by use_compiled(None)"
        return
    # the current session: the context variable's value, else the default session (its plan_cache)
    module.configure(_dispatch, _compiled_plan, _reject, _current, _default, _default_session, TF32Array)
    for array_type in (torch.Tensor, torch.nn.Parameter):
        _KEYS[array_type] = _torch_key  # the Python dispatch still keys them (wrapped in TF32Array, say)
        _ROUTES[array_type] = module.dispatch
    _ROUTES[TF32Array] = module.dispatch  # of torch tensors there; of others, back to Python


def _watch_build(a: Any) -> None:
    """On a new problem of torch tensors that start a build (:func:`_builds_for`), under the
    session's ``compiled_dispatch="auto"``: start the compiled dispatch's build in the background
    if it is neither built nor being built, and switch to it once it is built (looked at no more
    than once a second: :func:`gemmzoo.native.background.step`)."""
    inner = a.data if type(a) is TF32Array else a
    if _KEYS.get(type(inner)) is not _torch_key:
        return
    try:
        if not _builds_for(inner):
            return
        session = current()
        if session.config.compiled_dispatch != "auto":
            return
        from gemmzoo.native import background

        module = background.step(session)
    except Exception:  # never the caller's problem: its product goes on through Python
        return
    if module is not None:
        use_compiled(module)


def _builds_for(x: Any) -> bool:
    """Whether a product of torch tensor ``x`` starts the compiled dispatch's build: CUDA tensors
    only (a program on the CPU, a test suite, never builds by itself)."""
    return bool(x.is_cuda)


def _compiled_plan(a: Any, b: Any, backend: Any, accuracy: str, by: str) -> tuple[Any, Any] | None:
    """The plan of torch operands ``a`` and ``b`` (or TF32Array of them; made and kept, if new)
    with its form for the compiled dispatch (:func:`gemmzoo.contract.backend.torch_mm_form`), or ``None``
    where no plan is kept (an unhashable backend object)."""
    from gemmzoo.contract.backend import torch_mm_form

    cache = current().plan_cache
    key = _KEYS[type(a)](a, b, backend, accuracy, by)
    try:
        plan = cache.plans.get(key)
    except TypeError:
        return None
    if plan is not None:
        with contextlib.suppress(KeyError):
            cache.plans.move_to_end(key)
    else:
        plan = make_plan(a, b, backend, accuracy, by)
        keep_plan(cache, key, plan)
    return plan, torch_mm_form(plan)


def _is_plain_tensor_type(array_type: type) -> bool:
    """Whether ``array_type`` is ``torch.Tensor`` itself (torch is loaded: it made the array)."""
    import torch

    return array_type is torch.Tensor


def matmul(a: Any, b: Any, backend: Any = None, *, accuracy: str = "componentwise",
           by: str = "caller") -> Any:
    """``C = A·B`` for NumPy, CuPy or torch arrays of one type, device and dtype: 2-D, or batched
    (…×M×K and …×K×N, batch dimensions broadcast as ``torch.matmul`` does; see
    :func:`gemmzoo.dispatch.classes.batched_plan`).

    ``backend`` is a backend name, a :class:`~gemmzoo.Backend`, or ``None`` for the backend
    ``best_backend`` stores for this problem on this machine (without measuring: see
    :func:`gemmzoo.tuning.select.plan_decision`), with the caller's dtype (``float32`` means IEEE
    fp32; wrap both operands in :class:`~gemmzoo.TF32Array` for ``tf32``), device and layout.
    With nothing measured, a problem the shipped prior routes to the library's plain product is
    computed by the library's own call under the caller's precision switches (``torch.mm``, with
    whatever ``allow_tf32`` and reduced-precision reduction the caller set; ``numpy.matmul``):
    exactly what the replaced call computes.
    The result has the caller's array type, device and dtype; for float8_e4m3fn operands (torch
    ``float8_e4m3fn`` tensors, or NumPy arrays of ``ml_dtypes.float8_e4m3fn``) its dtype is
    bfloat16 (a torch tensor, or an ``ml_dtypes.bfloat16`` array). On torch tensors that require
    grad (with grad mode on) the result is differentiable (:mod:`gemmzoo.dispatch.autograd`).

    The first call for a problem makes a plan: every check, the choice of backend, the
    conversions and the backend's own :meth:`~gemmzoo.Backend.prepare`. Later calls with operands
    of the same problem call that plan directly; anything else gets a plan of its own, or the
    error that names what is wrong.

    ``accuracy="normwise"`` lets the choice fall on a backend of the normwise accuracy class
    (:mod:`gemmzoo.contract.accuracy`); a backend named in ``backend`` is used whatever its class.
    ``by="device"`` ranks the candidates by device time alone instead of caller time (the larger
    of device and host time per call): for programs that replay their products in CUDA graphs,
    where the host work of a call is not repeated.
    """
    route = _ROUTES.get(type(a))
    if route is not None:
        return route(a, b, backend, accuracy, by)
    return _dispatch(a, b, backend, accuracy, by)


def _dispatch(a: Any, b: Any, backend: Any, accuracy: str, by: str) -> Any:
    """``gemmzoo.matmul`` in Python: find (or make) the problem's plan and call it (the compiled
    dispatch calls it too, for the operands it hands back)."""
    try:
        # the current session's plans: a `with` block's, else the default session's (made on a
        # first call, in the except branch below)
        cache = (_get_session(None) or _default[0]).plan_cache
        key = _KEYS[type(a)](a, b, backend, accuracy, by)
        last_key, plan = cache.last
        if key != last_key:  # not the problem of the call before: find its plan
            plan = cache.plans[key]
            cache.plans.move_to_end(key)  # the least recently used plans are the ones forgotten
            cache.last = key, plan
    except Exception:  # a new problem, or operands gemmzoo cannot key: plan (or reject) them
        session = _get_session(None) or (_default[0] if _default else current())
        return _plan_and_call(a, b, backend, accuracy, by, session.plan_cache)
    try:
        return plan(a, b)
    except Exception:
        _reject(a, b, backend, accuracy, by)
        raise


def _reject(a: Any, b: Any, backend: Any, accuracy: str, by: str) -> None:
    """Raise the error that names what is wrong with operands a plan refused, if anything is
    (otherwise the plan's own error stands)."""
    try:
        make_plan(a, b, backend, accuracy, by)
    except GemmInputError as error:
        raise error from None
    except Exception:  # planning failed for another reason: the plan's own error says more
        pass


def _plan_and_call(a: Any, b: Any, backend: Any, accuracy: str, by: str, cache: PlanCache) -> Any:
    """Plan a new problem, keep the plan in ``cache`` (the plan cache current when the call
    began: if the answers were dropped since, nobody reads it any more), and call it."""
    if type(a) not in _KEYS:
        _learn_key(type(a))
    if type(a) is TF32Array and type(a.data) not in _KEYS:  # its key is the wrapped array's
        _learn_key(type(a.data))
    if not _ROUTES:  # the compiled dispatch is not in use: it may be due to be built, or built now
        _watch_build(a)
    plan = make_plan(a, b, backend, accuracy, by)
    try:
        keep_plan(cache, _KEYS[type(a)](a, b, backend, accuracy, by), plan)
    except Exception:  # an unhashable backend object: correct, only not cached
        pass
    return plan(a, b)


def keep_plan(cache: PlanCache, key: tuple[Any, ...], plan: Any) -> None:
    """Keep ``plan`` for ``key`` in ``cache`` as the problem met last and the most recently used,
    forgetting the least recently used plans past ``cache.size``."""
    plans = cache.plans
    plans[key] = plan
    with contextlib.suppress(KeyError):  # forgotten by another thread meanwhile
        plans.move_to_end(key)
    while len(plans) > cache.size:
        try:
            plans.popitem(last=False)
        except KeyError:  # emptied by another thread
            break
    cache.last = key, plan


def _layout(a: Any, b: Any, kind: str) -> str:
    """``"N"`` or ``"T"`` for A, then B: T when the operand is stored column by column."""
    def letter(x: Any) -> str:
        strides = x.stride() if kind == "torch" else x.strides
        return "T" if strides[0] < strides[1] else "N"

    return letter(a) + letter(b)


class _Problem(NamedTuple):
    """Operands ``gemmzoo.matmul`` accepts, unwrapped, and what its plan is decided on."""

    a: Any
    b: Any
    kind: str
    dtype: str
    tf32: bool
    shape: tuple[int, int, int]
    device: str


def _checked(a: Any, b: Any, by: str) -> _Problem:
    """The problem of operands ``a`` and ``b`` (TF32Array wrappers taken off), or the error that
    names what is wrong with them: :class:`~gemmzoo.GemmInputError`, or ``ValueError`` for an
    unknown ``by``."""
    if by not in RANK_BY:
        raise ValueError(f"gemmzoo.matmul: by must be one of {', '.join(RANK_BY)}; got {by!r}")
    tf32 = type(a) is TF32Array
    if tf32 or type(b) is TF32Array:
        if not (tf32 and type(b) is TF32Array):
            raise _input_error("wrap both operands in TF32Array, or neither", a, b)
        a, b = a.data, b.data
    kind = array_kind(type(a))
    if kind is None or array_kind(type(b)) != kind:
        raise _input_error(f"A is {type(a).__name__} and B is {type(b).__name__}; both must be NumPy, "
                           "CuPy or torch arrays of one library", a, b)
    dtype = dtype_of(a)
    if dtype is None or dtype_of(b) != dtype:
        raise _input_error(f"A is {a.dtype} and B is {b.dtype}; both must have one floating dtype of "
                           f"{', '.join(d for d in DTYPES if d != 'tf32')}", a, b)
    if tf32:
        if dtype != "float32":
            raise _input_error(f"TF32Array must hold float32 arrays, not {dtype}", a, b)
        dtype = "tf32"
    a_shape, b_shape = a.shape, b.shape
    if len(a_shape) != 2 or len(b_shape) != 2:
        raise _input_error("A and B must be 2-D", a, b)
    m, k = a_shape
    n = b_shape[1]
    if b_shape[0] != k:
        raise _input_error(f"inner dimensions differ (A has K={k}, B has K={b_shape[0]})", a, b)
    device = device_of(a, kind)
    if kind == "torch" and a.device != b.device:
        raise _input_error(f"A is on {a.device} and B on {b.device}", a, b)
    if kind == "cupy" and a.device.id != b.device.id:
        raise _input_error(f"A is on CUDA device {a.device.id} and B on {b.device.id}", a, b)
    return _Problem(a, b, kind, dtype, tf32, (m, n, k), device)


def make_plan(a: Any, b: Any, backend: Any = None, accuracy: str = "componentwise",
              by: str = "caller") -> Callable[[Any, Any], Any]:
    """The plan ``gemmzoo.matmul`` keeps for operands like ``a`` and ``b``: a function of (A, B).

    Raises :class:`~gemmzoo.GemmInputError` for operands ``gemmzoo.matmul`` cannot take, naming
    the shapes and what is wrong, and ``ValueError`` for an unknown ``by``.
    """
    if len(getattr(a, "shape", ())) > 2 or len(getattr(b, "shape", ())) > 2:  # the batched class
        from gemmzoo.dispatch.classes import batched_plan

        return batched_plan(a, b, backend, accuracy, by, make_plan)
    a, b, kind, dtype, tf32, (m, n, k), device = _checked(a, b, by)
    if kind == "torch" and (a.requires_grad or b.requires_grad):
        return _differentiable_plan(a, b, backend, accuracy, by, dtype, tf32)
    chosen, own = _resolve(backend, (m, n, k), dtype, device, _layout(a, b, kind), kind, accuracy, by)
    if own is not None:  # the caller's library's own product, called as it is (torch.mm checks B itself)
        return _direct(own, a, b, kind, backend, accuracy, by, tf32, True)
    target = native_kind(chosen, dtype) if chosen.device == device else None
    if target is not None:
        try:
            a_native, b_native = convert(a, kind, target), convert(b, kind, target)
        except Exception:  # no zero-copy route (negative strides, a dtype DLPack lacks): copy instead
            target = None
    if target is None:  # another device, or arrays gemmzoo cannot exchange: host copies both ways
        plan = _host_plan(chosen, a, b, kind, dtype, tf32)
        return _checking_b(plan, a, backend, accuracy, by, tf32) if kind == "torch" else plan
    wrap = TF32Array if tf32 else _same
    run = chosen.prepare(wrap(a_native), wrap(b_native))
    if target == kind:  # the caller's own arrays are the backend's: nothing between
        return _direct(run, a, b, kind, backend, accuracy, by, tf32)

    def plan(a: Any, b: Any) -> Any:
        if tf32:
            a, b = a.data, b.data
        c = run(wrap(convert(a, kind, target)), wrap(convert(b, kind, target)))
        c = convert(c.data if tf32 else c, target, kind)
        return TF32Array(c) if tf32 else c

    if kind == "torch" and target == "cupy" and min(m, n, k) > 0:  # views planned once, no DLPack per call
        from gemmzoo.arrays.torch_cupy import bridged_or

        plan = bridged_or(plan, run, wrap(a), wrap(b), tf32)
    return _checking_b(plan, a, backend, accuracy, by, tf32) if kind == "torch" else plan


def _direct(run: Callable[[Any, Any], Any], a: Any, b: Any, kind: str, backend: Any, accuracy: str,
            by: str, tf32: bool, checks_b: bool | None = None) -> Callable[[Any, Any], Any]:
    """The plan of ``run``, which computes on the caller's own arrays: ``run`` itself, behind a
    check of B for torch operands where ``run`` does not reject a mismatched B itself
    (``checks_b``: whether it does, where the caller knows; else as declared, see
    :func:`gemmzoo.contract.backend.self_checking`)."""
    if kind != "torch":
        return run
    # torch.mm checks B's dtype on real devices only: not on meta, nor for tensor subclasses
    # (FakeTensor) that answer it themselves
    plain = type(a) is type(b) and _is_plain_tensor_type(type(a)) and not a.is_meta
    if plain and (is_self_checking(run) if checks_b is None else checks_b):
        return run
    return _checking_b(run, a, backend, accuracy, by, tf32)


def _differentiable_plan(a: Any, b: Any, backend: Any, accuracy: str, by: str, dtype: str,
                        tf32: bool) -> Callable[[Any, Any], Any]:
    """The plan of torch operands of which one or both require grad (see :mod:`gemmzoo.dispatch.autograd`)."""
    if dtype == "float8_e4m3fn":
        raise _input_error("float8_e4m3fn operands that require grad are not supported (its product "
                           "is bfloat16); detach them", a, b)
    if backend is None and not tf32:
        native = _own_product_with_autograd(a, b, accuracy, by, dtype)
        if native is not None:
            return native
    from gemmzoo.dispatch.autograd import differentiable

    wrap = TF32Array if tf32 else _same
    forward = make_plan(wrap(a.detach()), wrap(b.detach()), backend, accuracy, by)
    return differentiable(forward, _backward_product, backend, accuracy, by, tf32)


def _own_product_with_autograd(a: Any, b: Any, accuracy: str, by: str, dtype: str) -> Any:
    """torch's own product on operands that require grad, where it is the call for the forward
    product and for each backward product (:func:`choice_for` of each), or ``None``: torch's
    autograd then runs its own backward, which computes those products with the same call, and
    no Python layer sits in the step. Each product is recorded as any other problem is."""
    from gemmzoo.dispatch.autograd import backward_problems

    device = device_of(a, "torch")
    (m, k), n = a.shape, b.shape[1]
    own = None
    for shape, layout in [((m, n, k), _layout(a, b, "torch")), *backward_problems(a, b)]:
        _chosen, own = _resolve(None, shape, dtype, device, layout, "torch", accuracy, by)
        if own is None:
            return None
    return _direct(own, a, b, "torch", None, accuracy, by, False, True)


def _backward_product(a: Any, b: Any, backend: Any, **options: Any) -> Any:
    """A product of a backward pass: ``gemmzoo.matmul`` as this module names it when it runs."""
    return matmul(a, b, backend, **options)


def _checking_b(plan: Callable[[Any, Any], Any], a: Any, backend: Any, accuracy: str, by: str,
                tf32: bool) -> Callable[[Any, Any], Any]:
    """``plan`` behind a check of B's dtype and device against A's, for torch operands (whose
    key holds A's only) and a plan that does not reject a mismatch itself."""
    dtype, device = a.dtype, a.device

    def checked(a: Any, b: Any) -> Any:
        inner = b.data if tf32 else b
        if inner.dtype is not dtype or inner.device != device:  # bad input: make_plan says why
            return make_plan(a, b, backend, accuracy, by)(a, b)
        return plan(a, b)

    return checked


def _same(x: Any) -> Any:
    return x


def _host_plan(chosen: Any, a: Any, b: Any, kind: str, dtype: str,
               tf32: bool) -> Callable[[Any, Any], Any]:
    run = chosen.prepare(chosen.from_numpy(to_host(a, kind), dtype),
                         chosen.from_numpy(to_host(b, kind), dtype))

    def plan(a: Any, b: Any) -> Any:
        if tf32:
            a, b = a.data, b.data
        c = chosen.to_numpy(run(chosen.from_numpy(to_host(a, kind), dtype),
                                chosen.from_numpy(to_host(b, kind), dtype)))
        c = _from_host(c, kind, a, dtype)
        return TF32Array(c) if tf32 else c

    return plan


def backend_for(a: Any, b: Any, *, accuracy: str = "componentwise", by: str = "caller") -> Any:
    """The backend ``gemmzoo.matmul(a, b)`` (no backend named) computes with for operands like
    ``a`` and ``b``: the choice its plan makes, without making the plan. Operands it would refuse
    raise :class:`~gemmzoo.GemmInputError`, as ``gemmzoo.matmul`` does. Where the call is the
    array library's own product (nothing measured: see :func:`choice_for`), the backend the
    shipped prior routed the problem to, whose product that is."""
    return choice_for(a, b, accuracy=accuracy, by=by).backend


def choice_for(a: Any, b: Any, *, accuracy: str = "componentwise", by: str = "caller") -> Any:
    """The :class:`~gemmzoo.tuning.select.Choice` behind ``gemmzoo.matmul(a, b)`` (no backend
    named) for operands like ``a`` and ``b``, with its source and note. Its ``source`` is
    ``"library"`` where the call is the caller's library's own product under the caller's
    precision switches (:attr:`gemmzoo.Backend.library_product`)."""
    x, y, kind, dtype, _tf32, shape, device = _checked(a, b, by)
    return plan_decision(shape, dtype, device, _layout(x, y, kind), kind, accuracy, by)


def _resolve(backend: Any, shape: tuple[int, int, int], dtype: str, device: str, layout: str,
             kind: str, accuracy: str = "componentwise", by: str = "caller") -> tuple[Any, Any]:
    """The backend for a problem, and the caller's library's own product where that is the call
    (see :func:`choice_for`; else ``None``)."""
    if backend is None:
        choice = plan_decision(shape, dtype, device, layout, kind, accuracy, by)
        # a chosen backend whose product is the caller's library's own (the prior's library route
        # or a measured winner): the library's call itself, under the caller's switches (as
        # accurate as the call replaced, and no launcher around it)
        own = choice.library_product == kind
        return choice.backend, own_product(kind, dtype) if own else None
    if isinstance(backend, str):
        from gemmzoo.tuning.state import current

        backend = current().registry.get(backend)
    reason = unavailable_reason(backend)
    if reason is not None:
        raise BackendUnavailableError(f"{backend.name}: unavailable: {reason}")
    if dtype not in backend.dtypes:
        m, n, k = shape
        raise GemmInputError(f"{backend.name}: gemmzoo.matmul of A {(m, k)}, B {(k, n)}: dtype {dtype} "
                             f"is not supported; supported: {', '.join(sorted(backend.dtypes))}")
    return backend, None
