"""Conformance cases of the problem classes beyond ``gemm`` (:mod:`gemmzoo.problems.classes`).

Every class is judged from the same derived bounds as a 2-D product
(:mod:`gemmzoo.conformance.bounds`): a batched product matrix by matrix of the broadcast batch, a
grouped one group by group, and a scaled one against the float64 product of the dequantized
operands (E4M3 values times their scales, :func:`gemmzoo.conformance.bounds.scaled_error_bound`).
The cases cover broadcast batches (a batch of one against many, a 2-D operand against a batch,
an empty batch), every scale layout (tensorwise, rowwise, blockwise with K and N not multiples of
128, square shapes where a scale read along the wrong axis still fits), every output dtype, B
stored column by column (as ``torch._scaled_mm`` wants it), and groups that are empty, one row,
or all there is. Every element of C a class defines is checked, and the operands must be left
unchanged.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Any

import numpy as np

from gemmzoo.conformance.bounds import error_bound, scaled_error_bound
from gemmzoo.conformance.judge import CheckFailedError, compare_elements
from gemmzoo.contract.backend import dtype_name
from gemmzoo.contract.dtypes import host_dtype, result_dtype
from gemmzoo.problems.class_math import declared_classes, dequantized, group_bounds
from gemmzoo.problems.classes import scale_shapes

#: Batched cases: (label, A's shape, B's shape).
BATCHED_SHAPES: tuple[tuple[str, tuple[int, ...], tuple[int, ...]], ...] = (
    ("same", (3, 17, 24), (3, 24, 20)),
    ("broadcast", (2, 1, 9, 16), (3, 16, 11)),
    ("b-2d", (4, 8, 12), (12, 10)),
    ("a-2d", (7, 5), (2, 5, 6)),
    ("empty", (0, 4, 5), (5, 3)),
)

#: Scaled cases: (scaling, M, N, K, out dtype, B's layout). Square shapes and square grids of
#: blocks keep a scale read along the wrong axis the right size, so only its values can tell.
SCALED_SHAPES: tuple[tuple[str, int, int, int, str, str], ...] = (
    ("tensorwise", 40, 56, 72, "bfloat16", "N"),
    ("rowwise", 33, 47, 64, "bfloat16", "N"),
    ("rowwise", 48, 48, 96, "float16", "T"),
    ("rowwise", 31, 31, 40, "float32", "N"),
    ("blockwise", 70, 260, 300, "bfloat16", "N"),
    ("blockwise", 256, 256, 256, "bfloat16", "T"),
    ("blockwise", 1, 130, 129, "float32", "N"),
)

#: Grouped cases: (label, N, K, each group's M).
GROUPED_SHAPES: tuple[tuple[str, int, int, tuple[int, ...]], ...] = (
    ("ragged", 24, 32, (5, 0, 1, 17, 9)),
    ("one-row", 16, 40, (1, 1, 1)),
    ("one-group", 20, 18, (23,)),
    ("empty-first-last", 12, 16, (0, 6, 0)),
    # K and N multiples of 16, so the grouped library kernels (torch._grouped_mm,
    # torch._scaled_grouped_mm) take them: groups of whole tiles, then ragged ones
    ("aligned", 32, 64, (16, 0, 48, 16)),
    ("aligned-ragged", 32, 64, (5, 0, 27, 9)),
)


@dataclass(frozen=True)
class ClassCase:
    """One case of a class: ``kind`` is the class, ``label`` the variant, ``dtype`` the operands'."""

    kind: str
    label: str
    dtype: str
    params: tuple[Any, ...]

    @property
    def id(self) -> str:
        """A readable, unique id such as ``scaled-rowwise-33x47x64-bfloat16-N``."""
        if self.kind == "batched":
            _, a, b = self.params
            return f"batched-{self.dtype}-{self.label}-{'x'.join(map(str, a))}@{'x'.join(map(str, b))}"
        if self.kind == "scaled":
            scaling, m, n, k, out, layout = self.params
            return f"scaled-{scaling}-{m}x{n}x{k}-{out}-{layout}"
        _, n, k, groups = self.params
        return f"grouped-{self.dtype}-{self.label}-{n}x{k}-m={','.join(map(str, groups))}"

    @property
    def seed(self) -> int:
        """A seed derived from the id, so a failure reproduces."""
        return zlib.crc32(self.id.encode())


def class_cases(backend: Any, dtypes: set[str] | None = None) -> list[ClassCase]:
    """The class cases of the classes ``backend`` declares, for its dtypes (or those of
    ``dtypes``) that a class takes: every dtype but tf32 for batched and grouped, and
    float8_e4m3fn for scaled."""
    classes = declared_classes(backend)
    wanted = [d for d in sorted(backend.dtypes) if d != "tf32" and (dtypes is None or d in dtypes)]
    cases: list[ClassCase] = []
    if "batched" in classes:
        cases += [ClassCase("batched", label, d, (label, a, b))
                  for d in wanted for label, a, b in BATCHED_SHAPES]
    if "scaled" in classes and "float8_e4m3fn" in wanted:
        cases += [ClassCase("scaled", p[0], "float8_e4m3fn", p) for p in SCALED_SHAPES]
    if "grouped" in classes:
        cases += [ClassCase("grouped", p[0], d, p) for d in wanted for p in GROUPED_SHAPES]
    return cases


def _values(rng: np.random.Generator, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    spread = 4.0 if dtype == "float8_e4m3fn" else 1.0  # E4M3 holds 2**-9..448: use its range
    return rng.standard_normal(shape) * spread


def _check_type(backend: Any, operand: Any, c: Any, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    if type(c) is not type(operand):
        raise CheckFailedError(f"C is a {type(c).__name__}, the operands are {type(operand).__name__}")
    if tuple(c.shape) != shape:
        raise CheckFailedError(f"C has shape {tuple(c.shape)}, expected {shape}")
    if dtype_name(c) != dtype:
        raise CheckFailedError(f"C has dtype {dtype_name(c)}, expected {dtype}")
    host = backend.to_numpy(c)
    expected = host_dtype(dtype)
    if not isinstance(host, np.ndarray) or host.dtype != expected or host.shape != shape:
        got = f"{host.dtype} {host.shape}" if isinstance(host, np.ndarray) else type(host).__name__
        raise CheckFailedError(f"to_numpy(C) gave {got}, expected {expected} {shape}")
    return host


def _unchanged(backend: Any, operands: dict[str, tuple[Any, np.ndarray]]) -> None:
    for label, (native, before) in operands.items():
        if not np.array_equal(backend.to_numpy(native), before, equal_nan=True):
            raise CheckFailedError(f"{label} was changed")


def _native_c_dtype(backend: Any, x: Any, dtype: str) -> str:
    """C's dtype name for operands of ``dtype``: theirs, or bfloat16 for float8_e4m3fn."""
    return dtype_name(x) if result_dtype(dtype) == dtype else result_dtype(dtype)


def _run_batched(backend: Any, case: ClassCase, rng: np.random.Generator) -> str:
    _, a_shape, b_shape = case.params
    a = backend.from_numpy(_values(rng, a_shape, case.dtype), case.dtype)
    b = backend.from_numpy(_values(rng, b_shape, case.dtype), case.dtype)
    a_host, b_host = backend.to_numpy(a), backend.to_numpy(b)
    c = backend.bmm(a, b)
    backend.synchronize()
    a64, b64 = a_host.astype(np.float64), b_host.astype(np.float64)
    ref, magnitude = np.matmul(a64, b64), np.matmul(np.abs(a64), np.abs(b64))
    c_host = _check_type(backend, a, c, ref.shape, _native_c_dtype(backend, a, case.dtype))
    _unchanged(backend, {"A": (a, a_host), "B": (b, b_host)})
    bound = error_bound(case.dtype, a_shape[-1], ref, magnitude)
    ratio, _ = compare_elements(c_host.reshape(-1, ref.shape[-1]), ref.reshape(-1, ref.shape[-1]),
                                bound.reshape(-1, ref.shape[-1]))
    return f"max error {ratio:.3g} of the bound over {int(np.prod(ref.shape[:-2]))} matrices"


def _scales(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Scales that are not powers of two (so dequantizing rounds), spanning 2**-3..2**3."""
    return (2.0 ** rng.uniform(-3, 3, size=shape)).astype(np.float32)


def _run_scaled(backend: Any, case: ClassCase, rng: np.random.Generator) -> str:
    scaling, m, n, k, out, layout = case.params
    a = backend.from_numpy(_values(rng, (m, k), "float8_e4m3fn"), "float8_e4m3fn")
    b_values = _values(rng, (k, n), "float8_e4m3fn")
    if layout == "T":  # B stored column by column, as torch._scaled_mm wants it
        b = backend.from_numpy(np.ascontiguousarray(b_values.T), "float8_e4m3fn").T
    else:
        b = backend.from_numpy(b_values, "float8_e4m3fn")
    sa_shape, sb_shape = scale_shapes(scaling, m, n, k)
    sa, sb = _scales(rng, sa_shape), _scales(rng, sb_shape)
    a_host, b_host = backend.to_numpy(a), backend.to_numpy(b)
    c = backend.scaled_mm(a, b, sa.copy(), sb.copy(), out)
    backend.synchronize()
    deq_a = dequantized(a_host, sa, scaling, "A")
    deq_b = dequantized(b_host, sb, scaling, "B")
    ref, magnitude = deq_a @ deq_b, np.abs(deq_a) @ np.abs(deq_b)
    c_host = _check_type(backend, a, c, (m, n), out)
    _unchanged(backend, {"A": (a, a_host), "B": (b, b_host)})
    ratio, _ = compare_elements(c_host, ref, scaled_error_bound(out, k, ref, magnitude))
    return f"max error {ratio:.3g} of the bound"


def _run_grouped(backend: Any, case: ClassCase, rng: np.random.Generator) -> str:
    _, n, k, groups = case.params
    total = sum(groups)
    a = backend.from_numpy(_values(rng, (total, k), case.dtype), case.dtype)
    b = backend.from_numpy(_values(rng, (len(groups), k, n), case.dtype), case.dtype)
    ends = np.cumsum(np.asarray(groups, dtype=np.int64)).astype(np.int32)
    a_host, b_host = backend.to_numpy(a), backend.to_numpy(b)
    c = backend.grouped_mm(a, b, ends.copy())
    backend.synchronize()
    c_host = _check_type(backend, a, c, (total, n), _native_c_dtype(backend, a, case.dtype))
    _unchanged(backend, {"A": (a, a_host), "B": (b, b_host)})
    worst = 0.0
    for g, (start, stop) in enumerate(group_bounds(ends.tolist())):
        a64, b64 = a_host[start:stop].astype(np.float64), b_host[g].astype(np.float64)
        ref, magnitude = a64 @ b64, np.abs(a64) @ np.abs(b64)
        try:
            ratio, _ = compare_elements(c_host[start:stop], ref, error_bound(case.dtype, k, ref, magnitude))
        except CheckFailedError as failure:
            raise CheckFailedError(f"group {g} (rows {start}:{stop}): {failure}") from None
        worst = max(worst, ratio)
    return f"max error {worst:.3g} of the bound over {len(groups)} groups"


_RUNNERS = {"batched": _run_batched, "scaled": _run_scaled, "grouped": _run_grouped}


def run_class_case(backend: Any, case: ClassCase) -> str:
    """Run one class case; returns the verdict's detail or raises :class:`CheckFailedError`
    (other exceptions are the backend's)."""
    rng = np.random.default_rng(case.seed)
    with np.errstate(invalid="ignore", over="ignore"):
        return _RUNNERS[case.kind](backend, case, rng)

