"""cuBLAS precision switches for one dtype, set only while gemmzoo's own product launches.

torch's switches under ``torch.backends.cuda.matmul`` are process-wide, and a product reads them
when it is launched. Each dtype needs at most two of them to hold a value (fp32 accumulation for
the 16-bit types, IEEE or TF32 math for fp32); float64 needs none. :func:`runner` builds, once per
dtype, a function that checks those switches and launches ``torch.matmul`` under one process-wide
lock: when the caller's settings already match (the usual case) nothing is written; otherwise the
switches are set, the product launched and the caller's values restored before the lock is let
go. So concurrent gemmzoo products of different dtypes in several threads never see each other's
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


def _reader(settings: Any, attribute: str) -> Callable[[], bool] | None:
    """A function that reads one switch as a bool, or None where this torch lacks the switch.

    Reading ``torch.backends.cuda.matmul.<name>`` goes through a Python ``__getattr__`` that costs
    about as much as the rest of a small product's host work; torch's own C accessor behind it
    (``torch._C._get_cublas_<name>``) answers in a tenth of the time. It is not public, so it is
    used only when present and the public attribute is the fallback. Newer torch releases return
    a pair for the 16-bit switches (reduced precision allowed, split-K allowed): the first says
    what the public attribute says.
    """
    import torch

    try:
        getattr(settings, attribute)
    except AttributeError:
        return None
    fast = getattr(torch._C, f"_get_cublas_{attribute}", None)
    if fast is None:
        return lambda: bool(getattr(settings, attribute))
    try:
        probe = fast()
    except Exception:  # an accessor whose signature changed: use the public attribute
        return lambda: bool(getattr(settings, attribute))
    if isinstance(probe, tuple):
        return lambda: bool(fast()[0])
    return fast


def runner(dtype: str) -> Callable[[Any, Any], Any]:
    """``run(a, b)``: ``torch.matmul(a, b)`` with ``dtype``'s switches held for the launch.

    ``tf32`` operands are :class:`gemmzoo.TF32Array` wrappers and the result is one too.
    """
    import torch

    from gemmzoo import TF32Array

    settings = torch.backends.cuda.matmul
    matmul = torch.matmul
    needs = []
    for attribute, wanted in _NEEDS[dtype]:
        read = _reader(settings, attribute)
        if read is not None:
            needs.append((attribute, wanted, read))

    def launch_tf32(a: Any, b: Any) -> Any:
        return TF32Array(matmul(a.data, b.data))

    launch = launch_tf32 if dtype == "tf32" else matmul

    if not needs:
        return launch

    def set_launch_restore(a: Any, b: Any) -> Any:
        saved = [(attribute, getattr(settings, attribute)) for attribute, _wanted, _read in needs]
        try:
            for attribute, wanted, _read in needs:
                setattr(settings, attribute, wanted)
            return launch(a, b)
        finally:
            for attribute, value in saved:
                setattr(settings, attribute, value)

    if len(needs) == 1:
        ((_attribute, wanted, read),) = needs

        def run(a: Any, b: Any) -> Any:
            with lock:
                if read() == wanted:
                    return launch(a, b)
                return set_launch_restore(a, b)

        return run

    checks = tuple((read, wanted) for _attribute, wanted, read in needs)

    def run_checked(a: Any, b: Any) -> Any:
        with lock:
            for read, wanted in checks:
                if read() != wanted:
                    return set_launch_restore(a, b)
            return launch(a, b)

    return run_checked
