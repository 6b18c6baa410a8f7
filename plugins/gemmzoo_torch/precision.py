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
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

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

    Reading or writing ``torch.backends.cuda.matmul.<name>`` goes through a Python
    ``__getattr__``/``__setattr__`` that together cost about as much as the rest of a small
    product's host work; torch's own C accessors behind them (``torch._C._get_cublas_<name>`` and
    ``_set_cublas_<name>``) take a tenth of the time. They are not public, so they are used only
    when present and when writing back the value just read works; otherwise the public attribute
    is used. Newer torch releases keep a pair for the 16-bit switches (reduced precision allowed,
    split-K allowed), whose first half is what the public attribute says.
    """
    import torch

    try:
        getattr(settings, attribute)
    except AttributeError:
        return None
    get = getattr(torch._C, f"_get_cublas_{attribute}", None)
    put = getattr(torch._C, f"_set_cublas_{attribute}", None)
    if get is not None and put is not None:
        try:
            raw = get()
            pair = isinstance(raw, tuple)
            if pair:
                put(*raw)
            else:
                put(raw)
            if get() == raw:
                return get, put, wanted, pair
        except Exception:  # accessors whose signatures changed: use the public attribute
            pass
    return (lambda: getattr(settings, attribute), lambda value: setattr(settings, attribute, value),
            wanted, False)


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


def runner(dtype: str) -> Callable[[Any, Any], Any]:
    """``run(a, b)``: ``torch.mm(a, b)`` with ``dtype``'s switches held for the launch (torch rejects
    operands that are not two matrices of one dtype on one device).

    ``tf32`` operands are :class:`gemmzoo.TF32Array` wrappers and the result is one too.
    """
    import torch

    from gemmzoo import TF32Array

    settings = torch.backends.cuda.matmul
    mm = torch.mm
    switches = tuple(found for attribute, wanted in _NEEDS[dtype]
                     if (found := _switch(settings, attribute, wanted)) is not None)

    def launch_tf32(a: Any, b: Any) -> Any:
        return TF32Array(mm(a.data, b.data))

    launch = launch_tf32 if dtype == "tf32" else mm
    if not switches:
        return launch

    acquire, release = lock.acquire, lock.release
    if len(switches) == 1:
        ((get, _put, wanted, pair),) = switches

        def run(a: Any, b: Any) -> Any:
            acquire()
            try:
                raw = get()
                if (raw[0] if pair else raw) == wanted:
                    return launch(a, b)
                return _launch_held(launch, a, b, switches)
            finally:
                release()

        return run
    if len(switches) == 2:
        # float16: the caller usually allows reduced precision (torch's default) and not fp16
        # accumulation, so the first switch is set and restored around most launches.
        (get1, put1, wanted1, pair1), (get2, _put2, wanted2, pair2) = switches

        def run(a: Any, b: Any) -> Any:
            acquire()
            try:
                raw = get2()
                if (raw[0] if pair2 else raw) != wanted2:
                    return _launch_held(launch, a, b, switches)
                raw = get1()
                if (raw[0] if pair1 else raw) == wanted1:
                    return launch(a, b)
                if pair1:
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

        return run

    def run(a: Any, b: Any) -> Any:
        with lock:
            return _launch_held(launch, a, b, switches)

    return run
