"""How far a backend's C may be from the float64 reference.

For every element, with R the float64 product of exactly the values the backend received,
``|A||B|`` the product of the absolute values, and the dtype's facts from
:mod:`gemmzoo.contract.dtypes`::

    acc   = (2·u_op + u_blk + 4·sqrt(K)·u_acc)·(|A||B|)ij + K·u_acc·|Rij|
    bound = u_out·|Rij| + (1 + u_out)·acc + s

``u_out`` is the unit roundoff of the stored result (the final rounding), ``u_op`` the relative
error the math units add to each operand (TF32's 10-bit mantissa; 0 elsewhere), ``u_blk`` the
error they may make summing a block of products before it joins the accumulator, relative to the
block's sum of |products| (float8_e4m3fn's tensor cores: 2**-12; 0 elsewhere), so that over all
blocks it is at most ``u_blk·(|A||B|)ij`` whatever K is, ``u_acc`` the
roundoff of the accumulation (fp32 for every 16-bit and fp32 mode, fp64 for float64), and ``s``
the smallest subnormal of the result type.

The accumulation error of a sum of K terms is ``Σ δ_k·s_k`` over its partial sums ``s_k``, each
``|δ_k| <= u_acc``. Split every term into the mean ``Rij/K`` and what is left. The partial sums of
what is left wander with random signs, and their rounding errors do too: for them the
probabilistic bound of Higham and Mary (2019), ``sqrt(K)·u_acc`` per unit of ``|A||B|`` (here
``4·sqrt(K)``, with room to spare), holds. The partial sums of the mean grow steadily to
``Rij``, and round-to-nearest does not give them errors of random sign: once a partial sum is
large against the terms it takes in, every one of them is rounded the same way (in the
extreme, lost). So that part is bounded deterministically: in any summation order the partial
sums of the mean add up to at most ``K·|Rij|/2``, and ``K·u_acc·|Rij|`` leaves a factor of 2 for
room. For data of random sign ``|Rij|`` is about ``sqrt(K)`` times smaller than ``(|A||B|)ij``
and the term changes little; for terms of one sign ``|Rij| = (|A||B|)ij`` and the bound becomes
the classical deterministic one, ``K·u_acc·(|A||B|)ij``, which a plain fp32 loop over K meets and
the ``sqrt(K)`` bound alone does not (see docs/plugins.md, "Long sums of one sign"). A bound that
grew with K for every element would let fp16 accumulation or a dropped term of the K sum pass
at long K on data of random sign; this one does not.

When every integer in the problem is exactly representable (small-integer inputs whose sums stay
within the result's ``exact_integers``), the bound is zero: the result must be exact.

That is the bound of the ``componentwise`` accuracy class (:mod:`gemmzoo.contract.accuracy`). The
``normwise`` class replaces ``(|A||B|)ij`` by one figure for the whole matrix,
``NORMWISE_FACTOR · max_i ‖A(i,:)‖₂ · max_j ‖B(:,j)‖₂`` (of the finite values): by Cauchy–Schwarz
at least ``(|A||B|)ij`` for every element, so a componentwise backend meets it too. The factor
leaves room for an algorithm that sums a few products of combined blocks per element (one level
of Strassen adds up to four).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from gemmzoo.conformance.rows import by_rows
from gemmzoo.contract.accuracy import NORMWISE
from gemmzoo.contract.dtypes import dtype_info

NORMWISE_FACTOR = 4.0


def _finite_abs(x: np.ndarray) -> np.ndarray:
    return np.abs(np.nan_to_num(x.astype(np.float64), nan=0.0, posinf=0.0, neginf=0.0))


def reference(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The float64 product ``A·B`` and the product of absolute values ``|A|·|B|``; non-finite
    entries count as 0 in the latter, which scales the bound of the finite elements only."""
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        return a64 @ b64, _finite_abs(a64) @ _finite_abs(b64)


def error_bound(dtype: str, k: int, reference: np.ndarray, magnitude: np.ndarray) -> np.ndarray:
    """The per-element bound on ``|C - reference|`` for ``dtype`` and inner dimension ``k``."""
    info = dtype_info(dtype)
    root_k = math.sqrt(max(k, 1))
    per_magnitude = 2 * info.operand_roundoff + info.block_sum_roundoff
    per_magnitude += 4 * root_k * info.accumulate_roundoff
    size = np.abs(reference)
    drift = max(k, 1) * info.accumulate_roundoff  # the partial sums of the terms' mean
    accumulation = per_magnitude * magnitude + drift * size
    rounding = info.unit_roundoff * size
    return rounding + (1 + info.unit_roundoff) * accumulation + info.smallest_subnormal


HostOperand = np.ndarray | Callable[[], np.ndarray]
"""An operand's host values, or a function that copies them to the host when first needed."""


def host_values(x: HostOperand) -> np.ndarray:
    """The values of a :data:`HostOperand`."""
    return x() if callable(x) else x


def must_be_exact(dtype: str, a: np.ndarray, b: HostOperand, magnitude: np.ndarray) -> bool:
    """Whether the product of these operands is exactly representable, so C must be exact (B's
    values are read only when A's are all integers)."""
    info = dtype_info(dtype)
    # B's values only for an integral A: they may have to be copied back from a device
    if not (_integral(a) and _integral(host_values(b))):
        return False
    largest = float(magnitude.max(initial=0.0))
    accumulator_exact = 2.0**24 if info.accumulate_roundoff >= 2.0**-24 else 2.0**53
    return largest <= min(info.exact_integers, accumulator_exact)


def _integral(x: np.ndarray) -> bool:
    """Whether every value of ``x`` is an integer (a matrix's in row blocks, side by side)."""
    if x.ndim != 2:
        return bool(np.all(x == np.round(x)))
    return all(by_rows(lambda rows: bool(np.all(x[rows] == np.round(x[rows]))), *x.shape))


def normwise_magnitude(a: np.ndarray, b: np.ndarray) -> float:
    """``max_i ‖A(i,:)‖₂ · max_j ‖B(:,j)‖₂`` over the finite values: the normwise class's scale."""
    rows = float(np.sqrt(np.square(_finite_abs(a)).sum(axis=1)).max(initial=0.0))
    cols = float(np.sqrt(np.square(_finite_abs(b)).sum(axis=0)).max(initial=0.0))
    return rows * cols


def class_bound(accuracy: str, dtype: str, a: np.ndarray, b: HostOperand, ref: np.ndarray,
                magnitude: np.ndarray) -> np.ndarray:
    """The per-element bound on ``|C - ref|`` for a backend of accuracy class ``accuracy``, from
    the host operands ``a`` and ``b`` and :func:`reference`'s ``ref`` and ``magnitude``. Where
    ``b`` is a function, B's values are copied only for an integral A or the normwise class."""
    return bound_rule(accuracy, dtype, a, b, magnitude)(ref, magnitude)


def bound_rule(accuracy: str, dtype: str, a: np.ndarray, b: HostOperand,
               magnitude: np.ndarray) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    """:func:`class_bound` as a function of any block of elements' ``(ref, magnitude)``: what
    concerns the whole problem (exact or not, the normwise scale) decided once, here."""
    if must_be_exact(dtype, a, b, magnitude):
        return lambda ref, _magnitude: np.zeros_like(ref)
    k = a.shape[1]
    if accuracy == NORMWISE:
        scale = NORMWISE_FACTOR * normwise_magnitude(a, host_values(b))
        return lambda ref, block: error_bound(dtype, k, ref, np.full_like(block, scale))
    return lambda ref, block: error_bound(dtype, k, ref, block)


def scaled_error_bound(out_dtype: str, k: int, reference: np.ndarray, magnitude: np.ndarray) -> np.ndarray:
    """The per-element bound of a scaled FP8 product (the ``scaled`` class) whose C is stored in
    ``out_dtype``, against ``reference``, the float64 product of the dequantized operands (E4M3
    values times their scales), and ``magnitude``, the product of their absolute values.

    It is :func:`error_bound`'s with the accumulation of float8_e4m3fn (fp32, with the fp8 MMA's
    block allowance) and the final rounding of ``out_dtype``, plus ``4·u_fp32`` per unit of
    magnitude for the scales: applied to the operands before the products (a dequantizing
    reference rounds each operand and each product once in fp32), or to partial sums in the
    accumulator loop (block-wise) or the epilogue (row-wise), each a rounding or two of fp32.
    """
    fp8, out = dtype_info("float8_e4m3fn"), dtype_info(out_dtype)
    root_k = math.sqrt(max(k, 1))
    per_magnitude = 4 * fp8.accumulate_roundoff + fp8.block_sum_roundoff
    per_magnitude += 4 * root_k * fp8.accumulate_roundoff
    size = np.abs(reference)
    accumulation = per_magnitude * magnitude + max(k, 1) * fp8.accumulate_roundoff * size
    return out.unit_roundoff * size + (1 + out.unit_roundoff) * accumulation + out.smallest_subnormal
