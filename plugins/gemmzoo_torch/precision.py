"""cuBLAS precision switches for one dtype, set only while gemmzoo's own product launches.

torch's switches under ``torch.backends.cuda.matmul`` are process-wide, and a product reads them
when it is launched. Each dtype needs at most two of them to hold a value (fp32 accumulation for
the 16-bit types, IEEE or TF32 math for fp32); float64 needs none. :func:`runner` builds, once per
dtype, a function that checks those switches and launches ``torch.mm`` (the product
``torch.matmul`` calls for two matrices, without its dispatch on the number of dimensions) under
one process-wide lock: when the caller's settings already match nothing is written (torch's
defaults match for float32 and float64, not for the 16-bit types); otherwise the switches are
set, the product launched and the caller's values restored before the lock is let go. So
concurrent gemmzoo products of different dtypes in several threads never see each other's
settings. (Code that calls ``torch.matmul`` itself, outside gemmzoo, is not covered by the lock.)

The 16-bit types' reduced-precision switch only matters where cuBLAS picks a kernel that splits K
and adds the pieces in the output type; for most problems it picks the same kernel either way.
:func:`needless_switches` finds out, once per problem, by launching the product of random operands
of the problem's shapes and strides with the switch each way: where the bits agree, the problem's
launcher leaves that switch alone, and a small product costs about what ``torch.mm`` costs.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection
from typing import Any

from gemmzoo.contract.backend import Switched, declare_torch_mm

lock = threading.Lock()
"""Held while a product checks, sets, launches with and restores the switches."""

# (attribute of torch.backends.cuda.matmul, value gemmzoo needs) per dtype. The fp16 accumulation
# switch exists from torch 2.7 on; where it is missing, fp16 products accumulate in fp32 anyway.
_NEEDS: dict[str, tuple[tuple[str, bool], ...]] = {
    "float16": (("allow_fp16_reduced_precision_reduction", False), ("allow_fp16_accumulation", False)),
    "bfloat16": (("allow_bf16_reduced_precision_reduction", False),),
    "float32": (("allow_tf32", False),),
    "tf32": (("allow_tf32", True),),
    "float64": (),
}


# A switch: (read its raw value, write it, the value gemmzoo needs, whether the raw value is a pair).
_Switch = tuple[Callable[[], Any], Callable[..., Any], bool, bool]


def _switch(settings: Any, attribute: str, wanted: bool) -> _Switch | None:
    """The switch ``attribute`` of ``torch.backends.cuda.matmul``, or None where this torch lacks it.

    Read and written through torch's C accessors where
    :func:`~gemmzoo_torch.torch_internals.cublas_accessors` offers them (the public attribute's
    Python ``__getattr__``/``__setattr__`` cost about as much as the rest of a small product's host
    work), through the public attribute otherwise. Newer torch releases keep a pair for the 16-bit
    switches (reduced precision allowed, split-K allowed), whose first half is what the public
    attribute says.
    """
    from gemmzoo_torch.torch_internals import cublas_accessors

    try:
        getattr(settings, attribute)
    except AttributeError:
        return None
    accessors = cublas_accessors(attribute)
    if accessors is not None:
        get, put, pair = accessors
        return get, put, wanted, pair
    return (lambda: getattr(settings, attribute), lambda value: setattr(settings, attribute, value),
            wanted, False)


def _switches(dtype: str, without: Collection[str] = ()) -> tuple[_Switch, ...]:
    """The switches ``dtype`` needs held (those this torch has), less those named in ``without``."""
    import torch

    settings = torch.backends.cuda.matmul
    return tuple(found for attribute, wanted in _NEEDS[dtype] if attribute not in without
                 if (found := _switch(settings, attribute, wanted)) is not None)


def _launch_held(launch: Callable[[Any, Any], Any], a: Any, b: Any, switches: tuple[_Switch, ...]) -> Any:
    """``launch(a, b)`` with every switch at gemmzoo's value; the caller's values restored after.

    The caller holds :data:`lock`.
    """
    changed = []
    try:
        for get, put, wanted, pair in switches:
            raw = get()
            if (raw[0] if pair else raw) != wanted:
                changed.append((put, raw, pair))
                if pair:  # keep the second half (split-K allowed) as the caller had it
                    put(wanted, raw[1])
                else:
                    put(wanted)
        return launch(a, b)
    finally:
        for put, raw, pair in reversed(changed):
            if pair:
                put(*raw)
            else:
                put(raw)


def runner(dtype: str, without: Collection[str] = ()) -> Callable[[Any, Any], Any]:
    """``run(a, b)``: ``torch.mm(a, b)`` with ``dtype``'s switches held for the launch (torch rejects
    operands that are not two matrices of one dtype on one device), except the switches named in
    ``without``, which are left as the caller has them.

    ``tf32`` operands are :class:`gemmzoo.TF32Array` wrappers and the result is one too.
    """
    import torch

    from gemmzoo import TF32Array

    mm = torch.mm
    switches = _switches(dtype, without)

    def launch_tf32(a: Any, b: Any) -> Any:
        return TF32Array(mm(a.data, b.data))

    launch = launch_tf32 if dtype == "tf32" else mm
    if not switches:
        return declare_torch_mm(launch)

    if len(switches) > 2:
        def run_any(a: Any, b: Any) -> Any:
            with lock:
                return _launch_held(launch, a, b, switches)

        return run_any

    # One or two switches, the first set and restored around the launch in line: it is the one
    # a caller's defaults differ from (the 16-bit types' reduced-precision reduction, which torch
    # allows by default), so most launches of 16-bit products pass through here. float16's second
    # (fp16 accumulation) matches torch's default; where a caller changed it, the general path runs.
    acquire, release = lock.acquire, lock.release
    get1, put1, wanted1, pair1 = switches[0]
    second = switches[1] if len(switches) == 2 else None
    get2, _put2, wanted2, pair2 = second or switches[0]  # without a second these are never read

    def run(a: Any, b: Any) -> Any:
        acquire()
        try:
            if second is not None:
                raw = get2()
                if (raw[0] if pair2 else raw) != wanted2:
                    return _launch_held(launch, a, b, switches)
            raw = get1()
            if (raw[0] if pair1 else raw) == wanted1:
                return launch(a, b)
            if pair1:  # keep the second half (split-K allowed) as the caller had it
                put1(wanted1, raw[1])
            else:
                put1(wanted1)
            try:
                return launch(a, b)
            finally:
                if pair1:
                    put1(*raw)
                else:
                    put1(raw)
        finally:
            release()

    if second is None:  # the compiled dispatch can hold this one switch itself
        declare_torch_mm(run, Switched(lock, get1, put1, wanted1, pair1))
    return run


def held(dtype: str, launch: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    """``run(a, b)``: ``launch(a, b)`` — any product, such as ``torch.matmul``'s batched one — with
    ``dtype``'s switches held for the launch under :data:`lock`, as :func:`runner` holds them for
    ``torch.mm``; ``launch`` itself where ``dtype`` needs none."""
    switches = _switches(dtype)
    if not switches:
        return launch

    def run(a: Any, b: Any) -> Any:
        with lock:
            return _launch_held(launch, a, b, switches)

    return run


#: The switch that allows a 16-bit product to add split-K pieces in 16 bits, per dtype.
REDUCED_PRECISION = {
    "float16": "allow_fp16_reduced_precision_reduction",
    "bfloat16": "allow_bf16_reduced_precision_reduction",
}
#: Problems with an operand or a result of more elements than this are not probed: their
#: products take long enough that the switches' host cost does not matter, and the probe's
#: random operands would take memory.
PROBE_MAX_ELEMENTS = 2**24


def needless_switches(dtype: str, a: Any, b: Any) -> tuple[str, ...]:
    """The switches of ``dtype`` that :func:`runner` can leave alone for operands like ``a`` and
    ``b``: the reduced-precision switch where :func:`reduced_precision_matters` finds that it does
    not change their product, else none."""
    reduced = REDUCED_PRECISION.get(dtype)
    if reduced is None or not _probeable(a, b) or reduced_precision_matters(dtype, a, b):
        return ()
    return (reduced,)


def _extent(x: Any) -> int:
    """Elements of storage that ``x``'s shape and strides address (``x`` has no empty dimension)."""
    return 1 + sum((size - 1) * abs(stride) for size, stride in zip(x.shape, x.stride(), strict=True))


def _probeable(a: Any, b: Any) -> bool:
    """Plain 2-D CUDA tensors of a problem small enough to probe (and not empty), outside a CUDA
    graph capture (the probe compares its products on the host, which a capture forbids)."""
    import torch

    if type(a) is not torch.Tensor or type(b) is not torch.Tensor or a.ndim != 2 or b.ndim != 2:
        return False
    if not (a.is_cuda and b.is_cuda) or a.numel() == 0 or b.numel() == 0:
        return False
    if torch.cuda.is_current_stream_capturing():
        return False
    rows, columns = a.shape[0], b.shape[1]
    return max(_extent(a), _extent(b), rows * columns) <= PROBE_MAX_ELEMENTS


#: Bytes of address alignment a probe operand shares with the operand it stands for (cuBLAS
#: chooses kernels by the alignment of A, B and C too).
PROBE_ALIGNMENT = 256


def _random_like(x: Any, generator: Any) -> Any:
    """Standard-normal values in ``x``'s shape, strides, dtype and device, at an address of the same
    alignment (from ``generator``, so the caller's random state is not touched)."""
    import torch

    offset = (x.data_ptr() % PROBE_ALIGNMENT) // x.element_size()
    base = torch.randn(offset + _extent(x), generator=generator, dtype=x.dtype, device=x.device)
    return base.as_strided(x.shape, x.stride(), offset)


def reduced_precision_matters(dtype: str, a: Any, b: Any) -> bool:
    """Whether the reduced-precision switch of ``dtype`` (float16 or bfloat16) changes the product
    of operands like ``a`` and ``b`` on their device.

    cuBLAS picks its kernel from the shapes, layouts and settings, not from the values: random
    operands of the same shapes and strides are multiplied with the switch off and on (the other
    switches at gemmzoo's values), and the switch matters unless the two products agree bit for
    bit. A product that cannot be launched in a setting counts as agreeing only when it cannot be
    launched in the other either. Where torch keeps a pair of values, the second (split-K allowed)
    is true for the probe: torch refuses reduced precision without split-K, so with split-K
    refused the first value changes nothing.
    """
    import torch

    attribute = REDUCED_PRECISION[dtype]
    probed = _switch(torch.backends.cuda.matmul, attribute, False)
    if probed is None:  # this torch has no such switch: nothing to hold
        return False
    get, put, _wanted, pair = probed
    others = _switches(dtype, without=(attribute,))
    generator = torch.Generator(device=a.device)
    generator.manual_seed(0)
    x, y = _random_like(a, generator), _random_like(b, generator)
    mm = torch.mm

    def product(allowed: bool) -> Any:
        if pair:
            put(allowed, True)
        else:
            put(allowed)
        try:
            return _launch_held(mm, x, y, others)
        except RuntimeError:  # a setting this BLAS library refuses: no product
            return None

    with lock:
        raw = get()
        try:
            off, on = product(False), product(True)
            return (off is None) != (on is None) or (off is not None and not torch.equal(off, on))
        finally:
            if pair:
                put(*raw)
            else:
                put(raw)
