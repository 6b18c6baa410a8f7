"""Random problems for the conformance suite, in no list of gemmzoo's own.

The suite's shapes are fixed, and a backend's routes (split-K, decode blocks, TMA, copies into
aligned buffers, padding) switch on sizes and strides: a wrong route can pass every fixed shape.
:func:`random_cases` draws problems from a seeded generator in five profiles taken in turn —
square-ish, decode (M ≤ 64), long K, tall or wide, near powers of two and multiples of 64 — with
every operand layout and value kind of the suite and the dtypes asked for. A case's values come
from its id (:attr:`Case.seed`), so a failure reproduces from the id alone.
"""

from __future__ import annotations

import math
import random

from gemmzoo.conformance.cases import OPERAND_LAYOUTS, Case

PROFILES = ("square", "decode", "long_k", "tall_wide", "near_pow2")
#: Value kinds, random ones weighted up; "nonfinite" only where the suite's planted places fit.
KINDS = ("random", "random", "random", "scaled", "cancel", "integers", "repeat", "nonfinite")
LAYOUTS = tuple(a + b for a in OPERAND_LAYOUTS for b in OPERAND_LAYOUTS)
#: Largest operand, in elements: the host draws the values in float64.
MAX_OPERAND = 1 << 25
#: Default bound on M·N·K: small enough for CPU backends and Triton's interpreter; pass a larger
#: one (1e10 is a few seconds a case on a data-centre GPU) to reach large-problem routes.
DEFAULT_MAX_WORK = 1e8
_ATTEMPTS = 100


def _log_uniform(rng: random.Random, low: int, high: int) -> int:
    return round(math.exp(rng.uniform(math.log(low), math.log(high))))


def _near_pow2(rng: random.Random, low: int, high: int) -> int:
    base = rng.choice([1 << p for p in range(low.bit_length(), high.bit_length())] +
                      [64 * rng.randint(max(1, low // 64), max(1, high // 64))])
    return max(1, base + rng.choice((-8, -3, -1, 0, 0, 1, 2, 7, 8)))


def _profile_shape(rng: random.Random, profile: str) -> tuple[int, int, int]:
    if profile == "square":
        side = _log_uniform(rng, 1, 6000)
        m, n, k = (max(1, side + rng.randint(-side // 8, side // 8)) for _ in range(3))
        return m, n, k
    if profile == "decode":
        m = rng.choice((1, 2, 7, 8, 16, 31, 33, 64))
        return m, _log_uniform(rng, 512, 20000), _log_uniform(rng, 512, 20000)
    if profile == "long_k":
        return _log_uniform(rng, 1, 600), _log_uniform(rng, 1, 600), _log_uniform(rng, 8000, 70000)
    if profile == "tall_wide":
        m, n, k = _log_uniform(rng, 2000, 30000), _log_uniform(rng, 1, 300), _log_uniform(rng, 16, 5000)
        return (n, m, k) if rng.random() < 0.5 else (m, n, k)
    return _near_pow2(rng, 16, 8192), _near_pow2(rng, 16, 8192), _near_pow2(rng, 16, 8192)


def _fits(m: int, n: int, k: int, max_work: float) -> bool:
    return m * n * k <= max_work and m * k <= MAX_OPERAND and k * n <= MAX_OPERAND


def draw_shape(rng: random.Random, profile: str, max_work: float) -> tuple[int, int, int]:
    """(M, N, K) of ``profile`` with M·N·K at most ``max_work`` and operands of at most
    :data:`MAX_OPERAND` elements: drawn again while over, and after a hundred draws the last one
    with its largest dimension halved until it fits."""
    for _ in range(_ATTEMPTS):
        m, n, k = _profile_shape(rng, profile)
        if _fits(m, n, k, max_work):
            return m, n, k
    dims = [m, n, k]
    while not _fits(*dims, max_work) and max(dims) > 1:
        largest = dims.index(max(dims))
        dims[largest] = max(1, dims[largest] // 2)
    return dims[0], dims[1], dims[2]


def random_cases(dtypes: list[str], count: int, seed: int = 0,
                 max_work: float = DEFAULT_MAX_WORK) -> list[Case]:
    """``count`` cases over ``dtypes`` (each case one of them), the same for a given seed, dtypes
    and bound."""
    rng = random.Random(seed)
    cases = []
    for index in range(count):
        m, n, k = draw_shape(rng, PROFILES[index % len(PROFILES)], max_work)
        kind = rng.choice(KINDS)
        if kind == "nonfinite" and (m < 8 or n < 9 or k < 6):  # the suite plants up to A[7, 4], B[5, 8]
            kind = "random"
        cases.append(Case(kind, m, n, k, rng.choice(dtypes), rng.choice(LAYOUTS)))
    return cases
