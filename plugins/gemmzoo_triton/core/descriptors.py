"""TMA descriptors made per call, validated once per plan.

A plan launching a kernel that reads tensor descriptors makes new ones on every call, since the
operands' addresses change. Triton's ``TensorDescriptor`` checks its arguments each time it is
made (rank, alignment, strides, block shape), which costs about 1 µs of host time a descriptor,
several times per call. Within one plan only the base tensor changes: the shape, the strides, the
dtype and the block shape are the problem's. :func:`reusing` therefore makes the first descriptor
in full and later ones as copies of it over the new base. A later base is checked for the two
things that can differ between two tensors of one problem: its start address (16-byte aligned,
as TMA requires) and its row stride. A base that fails either check gets a descriptor made in
full, which validates it and raises where TMA cannot read it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Describe = Callable[[Any], Any]


def reusing(make: Describe) -> Describe:
    """``describe(base)``: ``make(base)`` for the first base and for any base that starts
    unaligned or has another row stride than the first; for the others, a copy of the first
    descriptor over ``base``. The bases are 2-D views of one dtype and shape."""
    new = object.__new__
    # (the descriptor's class, the first base's row stride, its fields), once the first is made;
    # one tuple, so that a thread never reads one part without the others
    template: list[tuple[type, int, dict[str, Any]] | None] = [None]

    def describe(base: Any) -> Any:
        kept = template[0]
        if kept is not None and base.stride(0) == kept[1] and not base.data_ptr() % 16:
            descriptor = new(kept[0])
            fields = descriptor.__dict__
            fields.update(kept[2])
            fields["base"] = base
            return descriptor
        descriptor = make(base)
        if kept is None and "base" in getattr(descriptor, "__dict__", ()):
            template[0] = (type(descriptor), base.stride(0), dict(descriptor.__dict__))
        return descriptor

    return describe
