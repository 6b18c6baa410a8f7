"""Problem classes: what one measured or checked product is, and its text form.

A problem is (class, sizes, dtype, layout, scaling):

- ``gemm``: one 2-D product C = A·B, A M×K, B K×N. Text ``MxNxK`` (``4096x4096x4096``).
- ``batched``: leading batch dimensions, broadcast as ``torch.matmul`` does; ``batch`` holds the
  batch dimensions of C. Text ``bmm:B1x...xMxNxK`` (the last three numbers are M, N, K:
  ``bmm:32x2048x2048x128``, ``bmm:4x8x1024x1024x64``).
- ``scaled``: FP8 E4M3 operands with scales, C in ``out_dtype`` (bfloat16 unless said);
  ``scaling`` is ``tensorwise`` (one scale each), ``rowwise`` (A per row, B per column: per-token
  × per-channel) or ``blockwise`` (A per 1×128 block of a row, B per 128×128 block: DeepSeek-V3's
  layout). Text ``scaled:rowwise:MxNxK``.
- ``grouped``: G products sharing N and K, group g multiplying rows ``offsets[g-1]:offsets[g]`` of
  A (total M×K) by its own B[g] (K×N), as ``torch._grouped_mm`` takes them and mixture-of-experts
  layers lay tokens out; ``groups`` holds each group's M. Text ``grouped:gG:NxK:m=M`` (G groups of
  M rows) or ``grouped:NxK:m=M1,M2,...`` (one M per group).

:func:`parse_problem` reads the text forms, :meth:`Problem.text` writes them, and plain
``MxNxK`` stays a ``gemm`` problem so every existing grid, file and command line keeps its meaning.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

#: The problem classes, in a fixed order; ``gemm`` is the default everywhere.
CLASSES: tuple[str, ...] = ("gemm", "batched", "scaled", "grouped")

#: The scale layouts of the ``scaled`` class.
SCALINGS: tuple[str, ...] = ("tensorwise", "rowwise", "blockwise")

#: The side of a scale block: A's blocks are 1×BLOCK, B's BLOCK×BLOCK (DeepSeek-V3).
BLOCK = 128

#: The output dtypes a scaled product may be asked for.
SCALED_OUT_DTYPES: tuple[str, ...] = ("bfloat16", "float16", "float32")

_CLASS_PREFIX = {"bmm": "batched", "batched": "batched", "scaled": "scaled", "grouped": "grouped"}


@dataclass(frozen=True)
class Problem:
    """One problem of a class (see the module docstring).

    ``m`` is the total rows of A (for ``grouped``, the sum of ``groups``); ``batch`` the batch
    dimensions of C (``batched``); ``scaling`` the scale layout (``scaled``); ``groups`` each
    group's M (``grouped``).
    """

    m: int
    n: int
    k: int
    kind: str = "gemm"
    dtype: str = "float32"
    layout: str = "NN"
    batch: tuple[int, ...] = ()
    scaling: str = ""
    groups: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        problem = self.problem()
        if problem is not None:
            raise ValueError(f"problem {self.text()!r}: {problem}")

    def problem(self) -> str | None:
        """What is inconsistent in this problem, or ``None``."""
        if self.kind not in CLASSES:
            return f"unknown class {self.kind!r}; known: {', '.join(CLASSES)}"
        if min(self.m, self.n, self.k) < 0:
            return "sizes must not be negative"
        if self.kind == "batched" and (not self.batch or min(self.batch) < 0):
            return "a batched problem needs batch dimensions of size >= 0"
        if self.kind != "batched" and self.batch:
            return "only batched problems have batch dimensions"
        if self.kind == "scaled" and self.scaling not in SCALINGS:
            return f"scaling must be one of {', '.join(SCALINGS)}, not {self.scaling!r}"
        if self.kind != "scaled" and self.scaling:
            return "only scaled problems have a scaling"
        if self.kind == "grouped":
            if not self.groups or min(self.groups) < 0:
                return "a grouped problem needs one M >= 0 per group"
            if sum(self.groups) != self.m:
                return f"the groups' M add up to {sum(self.groups)}, not M={self.m}"
        elif self.groups:
            return "only grouped problems have groups"
        return None

    @property
    def shape(self) -> tuple[int, int, int]:
        """``(M, N, K)`` (M is the total over groups for ``grouped``)."""
        return (self.m, self.n, self.k)

    @property
    def count(self) -> int:
        """How many 2-D products the problem holds (batch size, or groups)."""
        if self.kind == "batched":
            return math.prod(self.batch)
        if self.kind == "grouped":
            return len(self.groups)
        return 1

    @property
    def flops(self) -> int:
        """``2·M·N·K`` summed over the products."""
        per = 2 * self.m * self.n * self.k
        return per * self.count if self.kind == "batched" else per

    def offsets(self) -> tuple[int, ...]:
        """A grouped problem's cumulative end rows, as ``torch._grouped_mm`` takes them."""
        ends, total = [], 0
        for rows in self.groups:
            total += rows
            ends.append(total)
        return tuple(ends)

    def text(self) -> str:
        """The text form :func:`parse_problem` reads back (``MxNxK`` for ``gemm``)."""
        size = f"{self.m}x{self.n}x{self.k}"
        if self.kind == "batched":
            return "bmm:" + "x".join(str(b) for b in (*self.batch, self.m, self.n, self.k))
        if self.kind == "scaled":
            return f"scaled:{self.scaling}:{size}"
        if self.kind == "grouped":
            if self.groups and len(set(self.groups)) == 1:
                return f"grouped:g{len(self.groups)}:{self.n}x{self.k}:m={self.groups[0]}"
            return f"grouped:{self.n}x{self.k}:m=" + ",".join(str(g) for g in self.groups)
        return size

    def __str__(self) -> str:
        return self.text()


_NUMBERS = re.compile(r"^\d+(x\d+)*$")


def _sizes(text: str, whole: str) -> list[int]:
    if not _NUMBERS.match(text):
        raise ValueError(f"bad problem {whole!r}: expected sizes like 128x256x64, got {text!r}")
    return [int(t) for t in text.split("x")]


def parse_problem(text: str, dtype: str = "float32", layout: str = "NN") -> Problem:
    """The :class:`Problem` of a text form (see the module docstring); ``ValueError`` naming the
    text and the forms it may take otherwise. ``scaled`` problems are float8_e4m3fn whatever
    ``dtype`` says."""
    whole = text
    text = text.strip().lower()
    prefix, colon, rest = text.partition(":")
    if not colon:
        sizes = _sizes(text, whole)
        if len(sizes) != 3:
            raise ValueError(f"bad problem {whole!r}: a gemm is MxNxK (three sizes)")
        return Problem(*sizes, dtype=dtype, layout=layout)
    kind = _CLASS_PREFIX.get(prefix)
    if kind is None:
        raise ValueError(f"bad problem {whole!r}: unknown class {prefix!r}; forms: MxNxK, "
                         "bmm:BxMxNxK, scaled:SCALING:MxNxK, grouped:gG:NxK:m=M, grouped:NxK:m=M1,M2,...")
    if kind == "batched":
        sizes = _sizes(rest, whole)
        if len(sizes) < 4:
            raise ValueError(f"bad problem {whole!r}: a batched problem is B1x...xMxNxK (four sizes or more)")
        return Problem(*sizes[-3:], kind="batched", dtype=dtype, layout=layout, batch=tuple(sizes[:-3]))
    if kind == "scaled":
        scaling, _, size = rest.partition(":")
        sizes = _sizes(size, whole)
        if len(sizes) != 3 or scaling not in SCALINGS:
            raise ValueError(f"bad problem {whole!r}: a scaled problem is scaled:SCALING:MxNxK with "
                             f"SCALING one of {', '.join(SCALINGS)}")
        return Problem(*sizes, kind="scaled", dtype="float8_e4m3fn", layout=layout, scaling=scaling)
    parts = rest.split(":")
    count = None
    if parts and re.fullmatch(r"g\d+", parts[0]):
        count = int(parts.pop(0)[1:])
    if len(parts) != 2 or not parts[1].startswith("m="):
        raise ValueError(f"bad problem {whole!r}: a grouped problem is grouped:gG:NxK:m=M or "
                         "grouped:NxK:m=M1,M2,...")
    sizes = _sizes(parts[0], whole)
    if len(sizes) != 2:
        raise ValueError(f"bad problem {whole!r}: a grouped problem's sizes are NxK")
    try:
        rows = [int(t) for t in parts[1][2:].split(",")]
    except ValueError:
        raise ValueError(f"bad problem {whole!r}: m= takes whole numbers separated by commas") from None
    if count is not None:
        if len(rows) == 1:
            rows = rows * count
        elif len(rows) != count:
            raise ValueError(f"bad problem {whole!r}: g{count} but {len(rows)} values of m")
    n, k = sizes
    return Problem(sum(rows), n, k, kind="grouped", dtype=dtype, layout=layout, groups=tuple(rows))


def scale_shapes(scaling: str, m: int, n: int, k: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The shapes of ``scale_a`` and ``scale_b`` for a scaled product of A (M×K) and B (K×N).

    ``tensorwise``: ``()`` and ``()`` (a 1-element array of any shape is taken too);
    ``rowwise``: ``(M, 1)`` and ``(1, N)``; ``blockwise``: ``(M, ceil(K/128))`` (one per 1×128
    block of a row of A) and ``(ceil(K/128), ceil(N/128))`` (one per 128×128 block of B, in B's
    K×N orientation).
    """
    if scaling == "tensorwise":
        return (), ()
    if scaling == "rowwise":
        return (m, 1), (1, n)
    if scaling == "blockwise":
        kb, nb = -(-k // BLOCK), -(-n // BLOCK)
        return (m, kb), (kb, nb)
    raise ValueError(f"scaling must be one of {', '.join(SCALINGS)}, not {scaling!r}")


def scaling_of(scale_a_shape: tuple[int, ...], scale_b_shape: tuple[int, ...],
               m: int, n: int, k: int) -> str | None:
    """Which scaling the scale shapes are for A (M×K) and B (K×N), or ``None`` when they fit none
    (tensorwise takes one element each, of any shape)."""
    if math.prod(scale_a_shape) == 1 and math.prod(scale_b_shape) == 1:
        return "tensorwise"  # where rowwise or blockwise shapes have one element too, the same product
    for scaling in ("rowwise", "blockwise"):
        if (tuple(scale_a_shape), tuple(scale_b_shape)) == scale_shapes(scaling, m, n, k):
            return scaling
    return None
