"""float8_e4m3fn on the host: the one rounding every bundled backend's ``from_numpy`` uses.

OCP FP8 E4M3 ("fn": finite and NaN, no infinities) has 3 mantissa bits, exponents -6..8 and a
largest finite value of 448; its smallest subnormal is 2**-9. :func:`to_e4m3` rounds a float array
to it the same way for every bundled backend:

- values within range round to the nearest E4M3 value, ties to even (subnormals included; values
  under half the smallest subnormal become a signed zero);
- finite values beyond ±448 **saturate** to ±448, as the ``satfinite`` conversions of CUDA's fp8
  instructions and torch's cast do: scaled fp8 pipelines clip what falls outside the range;
- ±Inf and NaN become NaN: E4M3 has no infinity, and a value that already overflowed is not a
  number this format can hold. A NaN keeps its sign bit (``-NaN`` is the byte 0xFF).

The conformance suite does not require this choice of a third-party backend: it accepts either
±448 or NaN for a finite value out of range (see :mod:`gemmzoo.conformance.runner`), and judges
the product against whatever values ``to_numpy`` says the backend holds.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from gemmzoo.measure.host_work import each_block

#: The NumPy dtype of E4M3 arrays (from ml_dtypes).
E4M3 = np.dtype(ml_dtypes.float8_e4m3fn)

#: The NumPy dtype of bfloat16 arrays (from ml_dtypes): C of an fp8 product on the host.
BFLOAT16 = np.dtype(ml_dtypes.bfloat16)

#: The largest finite E4M3 value.
E4M3_MAX = 448.0


#: Elements rounded at a time by :func:`to_e4m3`: a chunk's temporaries stay in the CPU's caches,
#: where those of a whole large operand (a dozen arrays of its size) made rounding it several times
#: slower. Blocks of chunks are rounded in parallel threads (:mod:`gemmzoo.measure.host_work`).
CHUNK = 1 << 16


def rounding_input(x: np.ndarray) -> np.ndarray:
    """``x`` as E4M3 rounding reads it, C-ordered: float32 kept as float32 (rounded from it
    directly: one rounding, so no care for a double one is needed), any other dtype as float64."""
    single = isinstance(x, np.ndarray) and x.dtype == np.float32
    return np.asarray(x, dtype=np.float32 if single else np.float64, order="C")


def to_e4m3(x: np.ndarray) -> np.ndarray:
    """``x`` rounded to E4M3 (a new C-ordered array of :data:`E4M3`), saturating as the module
    says, from :func:`rounding_input`'s float32 or float64."""
    values = rounding_input(x)
    if values.size <= CHUNK:
        return _rounded(values)
    flat = values.reshape(-1)
    out = np.empty(flat.shape, E4M3)

    def round_block(part: slice) -> None:
        for start in range(part.start, part.stop, CHUNK):
            stop = min(start + CHUNK, part.stop)
            out[start:stop] = _rounded(flat[start:stop])

    each_block(flat.size, round_block)
    return out.reshape(values.shape)


#: float32 of each of the 256 E4M3 bytes.
_FLOAT32_OF_BYTE = np.arange(256, dtype=np.uint8).view(E4M3).astype(np.float32)


def e4m3_to_float32(x: np.ndarray) -> np.ndarray:
    """An :data:`E4M3` array's values in float32 (exactly), in ``x``'s memory order: a table
    lookup per byte, several times faster than ml_dtypes' cast."""
    codes = x.view(np.uint8)
    if not (codes.flags.c_contiguous or codes.flags.f_contiguous):
        codes = np.ascontiguousarray(codes)
    order = "F" if codes.flags.f_contiguous and not codes.flags.c_contiguous else "C"
    out = np.empty(codes.shape, np.float32, order=order)
    flat_codes, flat_out = codes.reshape(-1, order=order), out.reshape(-1, order=order)

    def convert(part: slice) -> None:
        np.take(_FLOAT32_OF_BYTE, flat_codes[part], out=flat_out[part])

    each_block(flat_codes.size, convert)
    return out


def _rounded(values: np.ndarray) -> np.ndarray:
    """float64 or float32 ``values`` rounded to E4M3 (see :func:`to_e4m3`)."""
    with np.errstate(invalid="ignore"):
        clipped = np.where(np.isinf(values), np.nan, np.clip(values, -E4M3_MAX, E4M3_MAX))
    clipped = np.copysign(clipped, values)  # keeps the sign of -NaN and of values that round to 0
    if clipped.dtype == np.float32:  # ml_dtypes rounds float32 to nearest, ties to even
        return clipped.astype(E4M3)
    return _round_to_odd_float32(clipped).astype(E4M3)


def _round_to_odd_float32(values: np.ndarray) -> np.ndarray:
    """``values`` (float64) in float32, rounded to odd.

    ml_dtypes converts float64 to E4M3 through float32, and two round-to-nearest steps can land on
    the wrong side of a tie (1.0625 + 2**-40 would become 1, not 1.125). Rounding the first step to
    odd (truncate, then set the last bit when anything was cut off) keeps the inexactness visible,
    and with 24 bits against E4M3's 4 the second rounding is then correct.
    """
    single = values.astype(np.float32)
    finite = np.isfinite(values)
    inexact = finite & (single.astype(np.float64) != values)
    rounded_up = finite & (np.abs(single.astype(np.float64)) > np.abs(values))
    truncated = np.where(rounded_up, np.nextafter(single, np.float32(0)), single).astype(np.float32)
    bits = truncated.view(np.uint32) | inexact.astype(np.uint32)
    return bits.view(np.float32)


def e4m3_bytes(x: np.ndarray) -> np.ndarray:
    """:func:`to_e4m3` of ``x`` as its raw bytes (uint8), for libraries that take fp8 as bits."""
    return to_e4m3(x).view(np.uint8)


def is_e4m3(x: object) -> bool:
    """Whether ``x`` is a NumPy array of :data:`E4M3`."""
    return isinstance(x, np.ndarray) and x.dtype == E4M3
