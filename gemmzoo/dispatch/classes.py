"""The public entry points of the problem classes beyond ``gemm``: ``gemmzoo.scaled_mm``,
``gemmzoo.grouped_mm`` and the batched form of ``gemmzoo.matmul``.

Each takes NumPy, CuPy or torch arrays (the arguments of ``torch._scaled_mm``,
``torch._grouped_mm`` and ``torch.matmul``), checks them (an error names the operation, the
backend where one is named, and the shapes), computes through a backend that declares the class
(:attr:`gemmzoo.Backend.classes`) and returns the caller's array type on the caller's device.
Without ``backend=``, the stored best backend of the problem is taken when one was tuned,
otherwise the first available backend computing on the caller's own arrays (NumPy's, torch's)
that declares the class: with no tuning data the library's own call.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from gemmzoo.arrays.libraries import array_kind, convert, device_of, dtype_of, native_kind, to_host
from gemmzoo.contract.backend import TF32Array, shape_text
from gemmzoo.contract.dtypes import DTYPES
from gemmzoo.contract.dtypes import dtype_name as name_of_dtype
from gemmzoo.errors import BackendUnavailableError, GemmInputError
from gemmzoo.problems.class_math import batched_problem, declared_classes, offsets_problem, scaled_problem
from gemmzoo.problems.classes import SCALED_OUT_DTYPES
from gemmzoo.tuning import state as _state


def _error(operation: str, problem: str, backend: Any = None, **shapes: Any) -> GemmInputError:
    named = ", ".join(f"{label} {shape_text(getattr(s, 'shape', s))}" for label, s in shapes.items())
    who = f"{backend.name}: " if backend is not None and hasattr(backend, "name") else ""
    return GemmInputError(f"{who}gemmzoo.{operation} of {named}: {problem}")


def _library(operation: str, arrays: dict[str, Any]) -> str:
    """The one array library of ``arrays`` ("numpy", "torch", "cupy"), or the error saying why not."""
    kinds = {label: array_kind(type(x)) for label, x in arrays.items()}
    first = next(iter(kinds.values()))
    if first is None or any(k != first for k in kinds.values()):
        types = ", ".join(f"{label} is {type(x).__name__}" for label, x in arrays.items())
        raise _error(operation, f"{types}; all must be NumPy, CuPy or torch arrays of one library",
                     **arrays)
    return first


def _declaring(cls: str, dtype: str, device: str) -> list[Any]:
    """The selected backends that declare ``cls`` and ``dtype`` on ``device``, in the default
    order of :func:`gemmzoo.tuning.select.preference` (read from attributes alone: nothing is
    imported or probed)."""
    from gemmzoo.tuning.select import preference
    from gemmzoo.tuning.state import current

    found = []
    for backend in current().select():
        try:
            if backend.device != device or dtype not in backend.dtypes or not backend.selectable:
                continue
        except Exception:  # a backend whose members fail is unavailable, never chosen
            continue
        if cls in declared_classes(backend):
            found.append(backend)
    return sorted(found, key=lambda b: preference(b.name))


def _candidates(cls: str, dtype: str, device: str) -> list[Any]:
    """The available backends of :func:`_declaring` (each one's availability probed)."""
    return [b for b in _declaring(cls, dtype, device) if _state.unavailable_reason(b) is None]


def _usable(backend: Any, cls: str, dtype: str) -> bool:
    """Whether ``backend`` is available and passed ``cls``'s cases for ``dtype`` here (they run
    before its first use for that class: no backend computes a class it has not been checked on)."""
    from gemmzoo.tuning.tune import conformance_verdict

    if _state.unavailable_reason(backend) is not None:
        return False
    return bool(conformance_verdict(_state.store(), backend, dtype, cls=cls))


def choose(cls: str, dtype: str, device: str, kind: str, problem_text: str = "") -> Any:
    """The backend a class's entry point computes with when none is named: the stored best
    backend of ``problem_text`` (:func:`gemmzoo.tuning.class_store.stored_winner`) when one was
    tuned and is available, else, in the default order, the first available backend computing
    on ``kind``'s own arrays, else the first available one. Backends are probed one at a time in
    that order, so a NumPy caller never loads a framework it does not need."""
    declaring = _declaring(cls, dtype, device)
    if problem_text and declaring:
        stored = _stored_winner(problem_text, dtype, device)
        for backend in declaring:
            if backend.name == stored and _usable(backend, cls, dtype):
                return backend
    first = None
    for backend in declaring:  # the caller's own library first; the others only if it has none
        if native_kind(backend, dtype) == kind and _usable(backend, cls, dtype):
            return backend
    for backend in declaring:
        if native_kind(backend, dtype) != kind and _usable(backend, cls, dtype):
            first = backend
            break
    if first is None:
        raise BackendUnavailableError(
            f"gemmzoo: no available backend computes the {cls} class for {dtype} on {device} and "
            "passed that class's conformance cases here")
    return first


def best_class_backend(problem: str, dtype: str | None = None, device: str | None = None,
                       library: str = "torch") -> Any:
    """The backend ``gemmzoo.matmul`` (batched), ``gemmzoo.scaled_mm`` or ``gemmzoo.grouped_mm``
    computes a class problem with (its text form, :mod:`gemmzoo.problems.classes`), without measuring:
    the stored winner when ``gemmzoo tune`` measured it, else the first available candidate
    computing on ``library``'s arrays. ``device``: cuda where a candidate is there, else cpu."""
    from gemmzoo.problems.classes import parse_problem

    parsed = parse_problem(problem, dtype=dtype or "float32")
    devices = [device] if device else ["cuda", "cpu"]
    for where in devices[:-1]:
        if _candidates(parsed.kind, parsed.dtype, where):
            return choose(parsed.kind, parsed.dtype, where, library, parsed.text())
    return choose(parsed.kind, parsed.dtype, devices[-1], library, parsed.text())


def class_answer_source(problem: str, dtype: str | None, device: str | None,
                        backend: Any) -> tuple[Any, str]:
    """The parsed class problem and where ``best_class_backend``'s answer came from: the stored
    winner of a ``gemmzoo tune`` run, or the default order of the class's candidates."""
    from gemmzoo.problems.classes import parse_problem

    parsed = parse_problem(problem, dtype=dtype or "float32")
    stored = _stored_winner(parsed.text(), parsed.dtype, backend.device)
    if stored == backend.name:
        return parsed, "measured: the fastest stored for this problem (gemmzoo tune)"
    return parsed, ("default order: the first available candidate that passed the "
                    f"{parsed.kind} class's conformance cases (not measured here; gemmzoo tune "
                    "--shape TEXT measures it)")


def _stored_winner(problem_text: str, dtype: str, device: str) -> str | None:
    """The backend stored as fastest for a class problem, or ``None`` (none stored, or no store)."""
    from gemmzoo.tuning.class_store import stored_winner

    try:
        return stored_winner(problem_text, dtype, device)
    except Exception:  # an unreadable store answers nothing; the default order stands
        return None


def _named(backend: Any, cls: str, dtype: str, operation: str, shapes: dict[str, Any]) -> Any:
    if isinstance(backend, str):
        from gemmzoo.tuning.state import current

        backend = current().registry.get(backend)
    reason = _state.unavailable_reason(backend)
    if reason is not None:
        raise BackendUnavailableError(f"{backend.name}: unavailable: {reason}")
    if cls not in declared_classes(backend):
        raise _error(operation, f"the backend does not compute the {cls} class (it declares "
                     f"{', '.join(sorted(declared_classes(backend)))})", backend, **shapes)
    if dtype not in backend.dtypes:
        raise _error(operation, f"dtype {dtype} is not supported; supported: "
                     f"{', '.join(sorted(backend.dtypes))}", backend, **shapes)
    return backend


def _native_route(backend: Any, dtype: str, kind: str, device: str) -> str | None:
    """The library of ``backend``'s arrays when the caller's can be handed to it without a copy."""
    if backend.device != device:
        return None
    target = native_kind(backend, dtype)
    if target is None or (kind == "torch" and target == "numpy" and device != "cpu"):
        return None
    return target


def _host_result(h: np.ndarray, kind: str, like: Any, dtype: str) -> Any:
    """A host result ``h`` as an array of ``like``'s library and device, in gemmzoo dtype ``dtype``."""
    if kind == "numpy":
        from gemmzoo.contract.fp8 import BFLOAT16

        return h.astype(BFLOAT16 if dtype == "bfloat16" else np.dtype(dtype))
    if kind == "cupy":
        import cupy

        return cupy.asarray(h).astype(dtype)
    import torch

    return torch.from_numpy(np.ascontiguousarray(h)).to(device=like.device, dtype=getattr(torch, dtype))


def _host_side(x: Any, kind: str) -> np.ndarray:
    """``x`` on the host, keeping E4M3 (``to_host`` gives ml_dtypes E4M3 for torch fp8)."""
    return to_host(x, kind) if kind != "numpy" else np.asarray(x)


def _small_host(x: Any, kind: str, dtype: Any) -> np.ndarray:
    """A small argument (a scale, offsets) as a NumPy array of ``dtype``."""
    if kind == "numpy" or array_kind(type(x)) is None:
        return np.asarray(x, dtype=dtype)
    return np.asarray(to_host(x, kind), dtype=dtype)


# scaled_mm ---------------------------------------------------------------------------------


def scaled_mm(a: Any, b: Any, scale_a: Any, scale_b: Any, *, out_dtype: Any = "bfloat16",
              backend: Any = None) -> Any:
    """``(A·scale_a)(B·scale_b)`` for float8_e4m3fn A (M×K) and B (K×N), as ``torch._scaled_mm``.

    ``scale_a`` and ``scale_b`` are float32: one element each (tensorwise), ``(M, 1)`` and
    ``(1, N)`` (rowwise: per token × per channel), or ``(M, ceil(K/128))`` and
    ``(ceil(K/128), ceil(N/128))`` (blockwise: 1×128 blocks of A, 128×128 blocks of B, in B's K×N
    orientation, as DeepSeek-V3 lays them out). Each scale multiplies the values of its row or
    block. Operands are torch ``float8_e4m3fn`` tensors (B may be column-major, as
    ``torch._scaled_mm`` wants it) or NumPy arrays of ``ml_dtypes.float8_e4m3fn``; scales arrays
    of the same library, NumPy arrays or Python floats. The result has ``out_dtype``
    (``"bfloat16"``, ``"float16"`` or ``"float32"``, or the torch dtype) in the caller's library.
    """
    shapes = {"A": a, "B": b, "scale_a": np.shape(scale_a) if array_kind(type(scale_a)) is None
              else scale_a, "scale_b": np.shape(scale_b) if array_kind(type(scale_b)) is None else scale_b}
    kind = _library("scaled_mm", {"A": a, "B": b})
    try:
        out = name_of_dtype(out_dtype)
    except ValueError:
        out = str(out_dtype)
    if out not in SCALED_OUT_DTYPES:
        raise _error("scaled_mm", f"out_dtype must be one of {', '.join(SCALED_OUT_DTYPES)}, not {out!r}",
                     **shapes)
    if dtype_of(a) != "float8_e4m3fn" or dtype_of(b) != "float8_e4m3fn":
        raise _error("scaled_mm", f"A is {a.dtype} and B is {b.dtype}; both must be float8_e4m3fn",
                     **shapes)
    scaling, problem = scaled_problem(a.shape, b.shape, np.shape(scale_a) if array_kind(type(scale_a))
                                      is None else tuple(scale_a.shape),
                                      np.shape(scale_b) if array_kind(type(scale_b)) is None
                                      else tuple(scale_b.shape))
    if scaling is None:
        raise _error("scaled_mm", problem, **shapes)
    device = device_of(a, kind)
    if kind == "torch" and a.device != b.device:
        raise _error("scaled_mm", f"A is on {a.device} and B on {b.device}", **shapes)
    (m, k), n = a.shape, b.shape[1]
    if backend is None:
        chosen = choose("scaled", "float8_e4m3fn", device, kind, f"scaled:{scaling}:{m}x{n}x{k}")
    else:
        chosen = _named(backend, "scaled", "float8_e4m3fn", "scaled_mm", shapes)
    target = _native_route(chosen, "float8_e4m3fn", kind, device)

    def scale(x: Any) -> Any:
        if target is not None and array_kind(type(x)) == kind:
            return convert(x, kind, target)
        host = _small_host(x, kind, np.float32)
        return host.reshape(()) if scaling == "tensorwise" and host.size == 1 and host.ndim else host

    if target is not None:
        try:
            native_a, native_b = convert(a, kind, target), convert(b, kind, target)
        except Exception:  # no zero-copy route for fp8 between these libraries: host copies instead
            target = None
    sa, sb = scale(scale_a), scale(scale_b)
    if target is not None:
        return convert(chosen.scaled_mm(native_a, native_b, sa, sb, out), target, kind)
    native_a = chosen.from_numpy(_fp8_values(_host_side(a, kind)), "float8_e4m3fn")
    native_b = chosen.from_numpy(_fp8_values(_host_side(b, kind)), "float8_e4m3fn")
    c = chosen.to_numpy(chosen.scaled_mm(native_a, native_b, sa, sb, out))
    return _host_result(c, kind, a, out)


def _fp8_values(x: np.ndarray) -> np.ndarray:
    """E4M3 values as float32 (exact), which ``from_numpy(x, "float8_e4m3fn")`` rounds to themselves."""
    from gemmzoo.contract.fp8 import e4m3_to_float32, is_e4m3

    return e4m3_to_float32(x) if is_e4m3(x) else x.astype(np.float32)


# grouped_mm --------------------------------------------------------------------------------


def grouped_mm(a: Any, b: Any, offsets: Any, *, backend: Any = None) -> Any:
    """G products sharing N and K, as ``torch._grouped_mm(a, b, offs)`` with A 2-D and B 3-D.

    A is total M×K, B is G×K×N of A's dtype, ``offsets`` the G cumulative end rows of the groups
    (int32; a tensor on A's device, a NumPy array or a sequence of ints): rows
    ``offsets[g-1]:offsets[g]`` of C are those rows of A times ``B[g]``; groups may be empty.
    Rows past the last offset are unspecified, as in torch. The result is total M×N in A's dtype
    (bfloat16 for float8_e4m3fn), in the caller's library. Offsets on the host are checked
    (non-decreasing, within A); offsets on a device are not read back (that would stall the
    caller), only their shape and dtype are checked.
    """
    offs_shape = tuple(np.shape(offsets)) if array_kind(type(offsets)) is None else tuple(offsets.shape)
    shapes = {"A": a, "B": b, "offsets": offs_shape}
    kind = _library("grouped_mm", {"A": a, "B": b})
    dtype = dtype_of(a)
    if dtype is None or dtype_of(b) != dtype:
        raise _error("grouped_mm", f"A is {a.dtype} and B is {b.dtype}; both must have one floating "
                     f"dtype of {', '.join(d for d in DTYPES if d != 'tf32')}", **shapes)
    if len(a.shape) != 2 or len(b.shape) != 3:
        raise _error("grouped_mm", "A must be 2-D (total M×K) and B 3-D (G×K×N)", **shapes)
    if a.shape[1] != b.shape[1]:
        raise _error("grouped_mm", f"inner dimensions differ (A has K={a.shape[1]}, B has K={b.shape[1]})",
                     **shapes)
    if len(offs_shape) != 1 or offs_shape[0] != b.shape[0]:
        raise _error("grouped_mm", f"offsets must be 1-D with one end row per group ({b.shape[0]})",
                     **shapes)
    device = device_of(a, kind)
    offsets_native = array_kind(type(offsets)) == kind and device != "cpu"
    if offsets_native:
        if "int32" not in str(offsets.dtype):
            raise _error("grouped_mm", f"offsets must be int32, not {offsets.dtype}", **shapes)
    else:
        host = _small_host(offsets, kind, None)
        if host.size and not np.issubdtype(host.dtype, np.integer):
            raise _error("grouped_mm", f"offsets must be integers, not {host.dtype}", **shapes)
        problem = offsets_problem(host.tolist(), b.shape[0], a.shape[0])
        if problem is not None:
            raise _error("grouped_mm", problem, **shapes)
    if backend is None:
        groups = _groups_text(offsets, offsets_native, kind)
        text = f"grouped:{b.shape[2]}x{a.shape[1]}:m={groups}" if groups else ""
        chosen = choose("grouped", dtype, device, kind, text)
    else:
        chosen = _named(backend, "grouped", dtype, "grouped_mm", shapes)
    target = _native_route(chosen, dtype, kind, device)
    if target is not None and dtype == "float8_e4m3fn" and target != kind:
        target = None  # fp8 has no zero-copy route between libraries: host copies instead
    if target is not None:
        offs = convert(offsets, kind, target) if array_kind(type(offsets)) == kind \
            else _small_host(offsets, kind, np.int32)
        c = chosen.grouped_mm(convert(a, kind, target), convert(b, kind, target), offs)
        return convert(c, target, kind)
    host_a, host_b = _host_side(a, kind), _host_side(b, kind)
    if dtype == "float8_e4m3fn":
        host_a, host_b = _fp8_values(host_a), _fp8_values(host_b)
    c = chosen.to_numpy(chosen.grouped_mm(chosen.from_numpy(host_a, dtype), chosen.from_numpy(host_b, dtype),
                                          _small_host(offsets, kind, np.int32)))
    return _host_result(c, kind, a, "bfloat16" if dtype in ("float8_e4m3fn", "bfloat16") else dtype)


def _groups_text(offsets: Any, on_device: bool, kind: str) -> str:
    """The groups' M as the tuning store names them, or ``""`` when the offsets live on a device."""
    if on_device:
        return ""
    ends = _small_host(offsets, kind, np.int64).tolist()
    rows = [end - start for start, end in zip([0, *ends[:-1]], ends, strict=True)]
    return ",".join(str(r) for r in rows)


# batched matmul ----------------------------------------------------------------------------


def batched_plan(a: Any, b: Any, backend: Any, accuracy: str, by: str,
                 make_plan: Callable[..., Callable[[Any, Any], Any]]) -> Callable[[Any, Any], Any]:
    """The plan of ``gemmzoo.matmul`` for operands of more than two dimensions (…×M×K and
    …×K×N, batch dimensions broadcast as ``torch.matmul``): with no backend named and nothing
    measured faster, the caller's library's own batched product (:func:`_own_batched_product`);
    else a backend's ``bmm`` where it declares the batched class and computes on the caller's
    arrays, else one 2-D plan (``make_plan``: :func:`gemmzoo.dispatch.matmul.make_plan`, which
    hands its batched operands here) called on each matrix of the broadcast batch. torch operands
    that require grad and are not served by torch's own product take the last route, whose 2-D
    products are differentiable."""
    if type(a) is TF32Array or type(b) is TF32Array:
        raise _error("matmul", "batched TF32Array operands are not supported; pass 2-D ones", A=a, B=b)
    kind = _library("matmul", {"A": a, "B": b})
    dtype = dtype_of(a)
    if dtype is None or dtype_of(b) != dtype:
        raise _error("matmul", f"A is {a.dtype} and B is {b.dtype}; both must have one floating dtype of "
                     f"{', '.join(d for d in DTYPES if d != 'tf32')}", A=a, B=b)
    batch, problem = batched_problem(tuple(a.shape), tuple(b.shape))
    if batch is None:
        raise _error("matmul", problem, A=a, B=b)
    device = device_of(a, kind)
    if kind == "torch" and a.device != b.device:
        raise _error("matmul", f"A is on {a.device} and B on {b.device}", A=a, B=b)
    grad = kind == "torch" and (a.requires_grad or b.requires_grad)
    m, k, n = a.shape[-2], a.shape[-1], b.shape[-1]
    text = "bmm:" + "x".join(str(d) for d in (*batch, m, n, k))
    if backend is None:
        own = _own_batched_product(kind, dtype, device, text)
        if own is not None:
            return own
    chosen = None
    if backend is not None:
        named = _named_plain(backend)
        if "batched" in declared_classes(named) and dtype in named.dtypes:
            chosen = named
    elif not grad:
        try:
            chosen = choose("batched", dtype, device, kind, text)
        except BackendUnavailableError:
            chosen = None
    target = _native_route(chosen, dtype, kind, device) if chosen is not None and not grad else None
    if target is not None:
        run = chosen.bmm

        def native_plan(a: Any, b: Any) -> Any:
            return convert(run(convert(a, kind, target), convert(b, kind, target)), target, kind)

        return native_plan
    return _looped_plan(a, b, batch, backend, accuracy, by, kind, make_plan)


def _own_batched_product(kind: str, dtype: str, device: str, text: str) -> Any:
    """The caller's library's own batched product (``torch.matmul``, ``numpy.matmul``), called as
    it is, under the caller's precision switches and (for torch) autograd, where nothing is
    stored for the problem or what is stored is that library's own product; else ``None``. As
    for 2-D products (:func:`gemmzoo.dispatch.matmul.make_plan`), the call gemmzoo.matmul replaces
    is what it computes until a measurement says another backend is faster."""
    from gemmzoo.arrays.libraries import has_own_product

    if not has_own_product(kind, dtype):
        return None
    stored = _stored_winner(text, dtype, device)
    if stored is not None:
        from gemmzoo.contract.backend import declared
        from gemmzoo.tuning.state import current

        try:
            winner = current().registry.get(stored)
        except Exception:  # a winner no longer registered: the default order decides, as before
            return None
        if declared(winner, "library_product") != kind:
            return None
    if kind == "numpy":
        return np.matmul
    import torch

    return torch.matmul


def _named_plain(backend: Any) -> Any:
    if isinstance(backend, str):
        from gemmzoo.tuning.state import current

        return current().registry.get(backend)
    return backend


def _looped_plan(a: Any, b: Any, batch: tuple[int, ...], backend: Any, accuracy: str, by: str,
                 kind: str, make_plan: Callable[..., Callable[[Any, Any], Any]]) -> Callable[[Any, Any], Any]:
    m, n = a.shape[-2], b.shape[-1]
    count = int(np.prod(batch)) if batch else 1
    if count == 0:
        inner = None
    else:
        first_a, first_b = _flat(a, batch, kind)[0], _flat(b, batch, kind)[0]
        inner = make_plan(first_a, first_b, backend, accuracy, by)

    def plan(a: Any, b: Any) -> Any:
        if inner is None:
            return _empty_result(a, batch, m, n, kind)
        flat_a, flat_b = _flat(a, batch, kind), _flat(b, batch, kind)
        products = [inner(flat_a[i], flat_b[i]) for i in range(count)]
        return _stack(products, kind).reshape(*batch, m, n)

    return plan


def _flat(x: Any, batch: tuple[int, ...], kind: str) -> Any:
    """``x`` broadcast to the batch and flattened to one batch dimension (a view where it can be)."""
    rows, cols = x.shape[-2], x.shape[-1]
    if kind == "torch":
        return x.expand(*batch, rows, cols).reshape(-1, rows, cols)
    if kind == "cupy":
        import cupy

        return cupy.broadcast_to(x, (*batch, rows, cols)).reshape(-1, rows, cols)
    return np.broadcast_to(x, (*batch, rows, cols)).reshape(-1, rows, cols)


def _stack(products: list[Any], kind: str) -> Any:
    if kind == "torch":
        import torch

        return torch.stack(products)
    if kind == "cupy":
        import cupy

        return cupy.stack(products)
    return np.stack(products)


def _empty_result(a: Any, batch: tuple[int, ...], m: int, n: int, kind: str) -> Any:
    fp8 = dtype_of(a) == "float8_e4m3fn"
    if kind == "torch":
        import torch

        return torch.zeros((*batch, m, n), dtype=torch.bfloat16 if fp8 else a.dtype, device=a.device)
    if kind == "cupy":
        import cupy

        return cupy.zeros((*batch, m, n), dtype=a.dtype)
    from gemmzoo.contract.fp8 import BFLOAT16

    return np.zeros((*batch, m, n), dtype=BFLOAT16 if fp8 else a.dtype)
