"""torch's private cuBLAS switch accessors, the only place the torch plugin touches them.

``torch.backends.cuda.matmul.<switch>`` reads and writes through a Python ``__getattr__`` /
``__setattr__`` whose cost is a sizeable share of a small product's host work; the C accessors
behind it, ``torch._C._get_cublas_<switch>`` and ``_set_cublas_<switch>``, do the same for much
less. They are not public: :func:`cublas_accessors` offers them only for a torch whose major
version these were checked with (:data:`TESTED_MAJORS`), where both exist and writing back the
value just read leaves it unchanged. Otherwise callers use the public attribute.
``tests/test_adapters.py`` fails when a torch release moves them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

#: Major versions of torch whose private cuBLAS accessors were checked (2.4 to 2.13).
TESTED_MAJORS = (2,)


def unsupported_reason() -> str | None:
    """Why the private accessors are not used with this torch (``None``: they may be)."""
    import torch

    major = torch.__version__.split(".", 1)[0]
    if not major.isdigit() or int(major) not in TESTED_MAJORS:
        return f"torch {torch.__version__}: gemmzoo's cuBLAS switch accessors were not checked with it"
    return None


def cublas_accessors(switch: str) -> tuple[Callable[[], Any], Callable[..., Any], bool] | None:
    """``(get, put, pair)`` for cuBLAS switch ``switch``, or ``None`` where the private accessors
    cannot be relied on here. ``pair``: the raw value is a tuple (newer torch keeps the 16-bit
    switches as (reduced precision allowed, split-K allowed)), written back with ``put(*raw)``."""
    if unsupported_reason() is not None:
        return None
    import torch

    get = getattr(torch._C, f"_get_cublas_{switch}", None)
    put = getattr(torch._C, f"_set_cublas_{switch}", None)
    if get is None or put is None:
        return None
    try:
        raw = get()
        pair = isinstance(raw, tuple)
        if pair:
            put(*raw)
        else:
            put(raw)
        if get() == raw:
            return get, put, pair
    except Exception:  # accessors whose signatures changed: the caller uses the public attribute
        pass
    return None


def grouped_mm_op() -> Callable[..., Any] | None:
    """``torch._grouped_mm`` (A 2-D, B 3-D, ``offs=`` cumulative int32 end rows) where the
    installed torch has it (2.8 and later), else ``None``: callers then loop over the groups."""
    import torch

    return getattr(torch, "_grouped_mm", None)


def scaled_grouped_mm_op() -> Callable[..., Any] | None:
    """``torch._scaled_grouped_mm`` where the installed torch has it, else ``None``."""
    import torch

    return getattr(torch, "_scaled_grouped_mm", None)


def scaled_mm_op() -> Callable[..., Any] | None:
    """``torch._scaled_mm`` where the installed torch has it (2.1 and later), else ``None``."""
    import torch

    return getattr(torch, "_scaled_mm", None)
