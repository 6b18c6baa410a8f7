"""The inputs of a measurement: random normal operands for a grid point, in a backend's arrays."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gemmzoo.measure.host_work import BLOCK, blocks, each_block
from gemmzoo.problems.grids import GridPoint


@dataclass
class Problem:
    """Native inputs for one grid point on one backend, and the host copies they were made from
    (as the backend holds them, read back with ``to_numpy`` when first asked for: a timing that
    checks no result never pays for copying large operands back)."""

    backend: Any
    point: GridPoint
    a: Any
    b: Any
    _a_host: np.ndarray | None = None
    _b_host: np.ndarray | None = None
    _a64: np.ndarray | None = None
    _b64: np.ndarray | None = None
    #: :meth:`freivalds`'s answers by seed, shared by copies of this problem for other backends.
    _freivalds: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = field(default_factory=dict, repr=False)

    @property
    def a_host(self) -> np.ndarray:
        """A as the backend holds it, on the host."""
        if self._a_host is None:
            self._a_host = self.backend.to_numpy(self.a)
        return self._a_host

    @property
    def b_host(self) -> np.ndarray:
        """B as the backend holds it, on the host."""
        if self._b_host is None:
            self._b_host = self.backend.to_numpy(self.b)
        return self._b_host

    @property
    def a64(self) -> np.ndarray:
        """:attr:`a_host` in float64, made once (Freivalds' check of each timed result reads it)."""
        if self._a64 is None:
            self._a64 = np.asarray(self.a_host, dtype=np.float64)
        return self._a64

    @property
    def b64(self) -> np.ndarray:
        """:attr:`b_host` in float64, made once."""
        if self._b64 is None:
            self._b64 = np.asarray(self.b_host, dtype=np.float64)
        return self._b64

    def freivalds(self, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """For Freivalds' check of a result: a random ``x`` (N values from ``seed``), ``A·(B·x)``
        and ``|A|·(|B|·|x|)`` in float64, from the operands' values (the same for every backend
        given them), made once per seed."""
        if seed not in self._freivalds:
            x = np.random.default_rng(seed).standard_normal(self.point.n)
            with np.errstate(invalid="ignore", over="ignore"):
                expected = self.a64 @ (self.b64 @ x)
                scale = np.abs(self.a64) @ (np.abs(self.b64) @ np.abs(x))
            self._freivalds[seed] = (x, expected, scale)
        return self._freivalds[seed]


def _operand(backend: Any, x: np.ndarray, dtype: str, transposed: bool) -> Any:
    if transposed:  # stored as its transpose: a column-major view, as BLAS's "T"
        return backend.from_numpy(np.ascontiguousarray(x.T), dtype).T
    return backend.from_numpy(x, dtype)


#: Operands of more elements than this (A and B together) are drawn block by block in parallel.
PARALLEL_DRAW_ELEMENTS = 1 << 23


def _drawn(m: int, n: int, k: int, seed: int, layout: str, dtype: type) -> tuple[np.ndarray, np.ndarray]:
    """Random normal A (M×K) and B (K×N) of ``dtype``, each drawn in the order ``layout`` stores it:
    an operand marked T is the transpose of a C-ordered array. Large operands are drawn in blocks
    in parallel threads, each block from its own stream of ``seed`` (:func:`_parallel_normal`)."""
    a_shape = (k, m) if layout[0] == "T" else (m, k)
    b_shape = (n, k) if layout[1] == "T" else (k, n)
    if m * k + k * n > PARALLEL_DRAW_ELEMENTS:
        a_seed, b_seed = np.random.SeedSequence(seed).spawn(2)
        a, b = _parallel_normal(a_shape, a_seed, dtype), _parallel_normal(b_shape, b_seed, dtype)
    else:
        rng = np.random.default_rng(seed)
        a, b = rng.standard_normal(a_shape, dtype), rng.standard_normal(b_shape, dtype)
    return (a.T if layout[0] == "T" else a), (b.T if layout[1] == "T" else b)


def _parallel_normal(shape: tuple[int, int], seed: np.random.SeedSequence, dtype: type) -> np.ndarray:
    """A C-ordered random normal array: block i of :func:`gemmzoo.measure.host_work.blocks` drawn from the
    i-th child of ``seed``, in parallel threads (the values do not depend on how many)."""
    out = np.empty(shape, dtype)
    flat = out.reshape(-1)
    children = seed.spawn(len(blocks(flat.size)))

    def draw(part: slice) -> None:
        child = children[part.start // BLOCK]
        np.random.default_rng(child).standard_normal(out=flat[part], dtype=dtype)

    each_block(flat.size, draw)
    return out


@functools.lru_cache(maxsize=1)
def host_operands(m: int, n: int, k: int, seed: int, layout: str = "NN",
                  precision: str = "float64") -> tuple[np.ndarray, np.ndarray]:
    """Random normal A (M×K) and B (K×N) in ``precision`` (``"float64"`` or ``"float32"``),
    read-only, each drawn in the order ``layout`` stores it (an operand marked T is the transpose
    of a C-ordered array), so that laying them out for a backend copies nothing: transposing a
    large operand took longer than drawing it. The last pair is kept: the backends measured one
    after another on a point get the same values without drawing them again."""
    a, b = _drawn(m, n, k, seed, layout, np.dtype(precision).type)
    a.setflags(write=False)
    b.setflags(write=False)
    return a, b


@functools.lru_cache(maxsize=1)
def e4m3_operands(m: int, n: int, k: int, seed: int, layout: str = "NN") -> tuple[np.ndarray, np.ndarray]:
    """Random normal A and B rounded to E4M3 (:func:`gemmzoo.contract.fp8.to_e4m3`) and held in float32,
    in the storage order of :func:`host_operands`, read-only. Drawn in float32 (three mantissa
    bits survive the rounding) and rounded once for all the backends measured on an fp8 point,
    whose ``from_numpy`` then rounds exact float32 values: one fast rounding, not a large
    operand's careful float64 one per backend."""
    from gemmzoo.contract.fp8 import e4m3_to_float32, to_e4m3

    def rounded(x: np.ndarray) -> np.ndarray:
        stored = to_e4m3(x.T).T if not x.flags.c_contiguous else to_e4m3(x)
        values = e4m3_to_float32(stored)
        values.setflags(write=False)
        return values

    a, b = _drawn(m, n, k, seed, layout, np.float32)
    return rounded(a), rounded(b)


def make_problem(backend: Any, point: GridPoint, seed: int = 0) -> Problem:
    """Random normal operands for ``point`` on ``backend``, laid out as ``point.layout`` says,
    handed to its ``from_numpy`` in float64 for a float64 point, in float32 (half the host work
    and transfer of float64, nothing lost for dtypes of float32's precision or less) for the
    others, and for float8_e4m3fn already rounded to it (:func:`e4m3_operands`)."""
    shape = point.m, point.n, point.k
    if point.dtype == "float8_e4m3fn":
        a_values, b_values = e4m3_operands(*shape, seed, point.layout)
    else:
        precision = "float64" if point.dtype == "float64" else "float32"
        a_values, b_values = host_operands(*shape, seed, point.layout, precision)
    a = _operand(backend, a_values, point.dtype, point.layout[0] == "T")
    b = _operand(backend, b_values, point.dtype, point.layout[1] == "T")
    return Problem(backend, point, a, b)


#: Host bytes of A and B (float64) up to which :func:`operand_copies` makes copies.
COPIES_UP_TO_BYTES = 64 << 20


def operand_copies(problem: Problem, count: int) -> list[tuple[Any, Any]]:
    """``count`` more native (A, B) pairs holding the problem's values, each in new allocations,
    in the problem's layout; none for operands over :data:`COPIES_UP_TO_BYTES`. A CPU GEMM's time
    depends on where its operands sit (their address modulo the cache line and page), which one
    allocation fixes for a whole run and the next run draws anew: timing over several
    allocations puts that variation inside one run's noise instead of between runs."""
    point = problem.point
    if problem.a is None or problem.b is None:  # nothing to copy from
        return []
    if (point.m * point.k + point.k * point.n) * 8 > COPIES_UP_TO_BYTES:
        return []
    backend = problem.backend
    return [(_operand(backend, problem.a_host, point.dtype, point.layout[0] == "T"),
             _operand(backend, problem.b_host, point.dtype, point.layout[1] == "T"))
            for _ in range(count)]


def planned(backend: Any, a: Any, b: Any) -> Callable[[Any, Any], Any]:
    """What ``gemmzoo.matmul`` calls for operands like ``a`` and ``b``: the backend's plan
    (:meth:`gemmzoo.Backend.prepare`), or its ``matmul`` for an object without one."""
    prepare = getattr(backend, "prepare", None)
    return prepare(a, b) if prepare is not None else backend.matmul
