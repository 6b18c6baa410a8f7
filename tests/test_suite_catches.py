"""Backends that are wrong in one way each: the conformance suite must fail every one of them."""

from __future__ import annotations

import numpy as np
import pytest

from gemmzoo import TF32Array
from gemmzoo.conformance import check_backend
from gemmzoo.contract.fp8 import BFLOAT16
from gemmzoo_numpy import NumpyBackend


def _fp16_accumulate(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    total = np.zeros((a.shape[0], b.shape[1]), dtype=np.float16)
    for k in range(a.shape[1]):
        total = (total + np.outer(a[:, k], b[k, :])).astype(np.float16)
    return total.astype(a.dtype)


def _ignore_strides(x: np.ndarray) -> np.ndarray:
    """Read a view's memory as if it were a contiguous row-major array from its first element."""
    if x.size == 0 or x.flags.c_contiguous:
        return x
    return np.lib.stride_tricks.as_strided(x, shape=x.shape, strides=(x.shape[1] * x.itemsize, x.itemsize))


class Fp16Accumulation(NumpyBackend):
    name = "wrong-fp16-accumulation"

    def matmul(self, a, b):
        self.check_operands(a, b)
        return _fp16_accumulate(a, b)


class DropsOneTerm(NumpyBackend):
    name = "wrong-drops-a-term"

    def matmul(self, a, b):
        self.check_operands(a, b)
        return np.matmul(a[:, 1:], b[1:, :])


class LeavesLastRowUnwritten(NumpyBackend):
    name = "wrong-unwritten-row"

    def matmul(self, a, b):
        self.check_operands(a, b)
        c = np.empty((a.shape[0], b.shape[1]), dtype=a.dtype)
        c[:-1] = np.matmul(a[:-1], b)
        return c


class WrongDtype(NumpyBackend):
    name = "wrong-dtype"

    def matmul(self, a, b):
        self.check_operands(a, b)
        return np.matmul(a.astype(np.float64), b.astype(np.float64))


class WrongShape(NumpyBackend):
    name = "wrong-shape"

    def matmul(self, a, b):
        self.check_operands(a, b)
        c = np.matmul(a, b)
        return np.ascontiguousarray(c.T) if a.shape[0] != b.shape[1] else c[:, :-1]


class MutatesInput(NumpyBackend):
    name = "wrong-mutates-input"

    def matmul(self, a, b):
        self.check_operands(a, b)
        c = np.matmul(a, b)
        a *= 2
        return c


class IgnoresStrides(NumpyBackend):
    name = "wrong-ignores-strides"

    def matmul(self, a, b):
        self.check_operands(a, b)
        return np.matmul(_ignore_strides(a), _ignore_strides(b))


class SwallowsNonFinite(NumpyBackend):
    name = "wrong-swallows-nan"

    def matmul(self, a, b):
        self.check_operands(a, b)
        return np.matmul(np.nan_to_num(a), np.nan_to_num(b))


class Nondeterministic(NumpyBackend):
    name = "wrong-nondeterministic"

    def __init__(self):
        self.rng = np.random.default_rng()

    def matmul(self, a, b):
        self.check_operands(a, b)
        c = np.matmul(a, b)
        # a last-bit wobble, well inside the error bound, that differs from call to call
        direction = (np.inf * self.rng.choice([-1, 1], size=c.shape)).astype(c.dtype)
        return np.nextafter(c, direction)


class GarbageWhenKIsZero(NumpyBackend):
    name = "wrong-empty-k"

    def matmul(self, a, b):
        self.check_operands(a, b)
        if a.shape[1] == 0:
            return np.ones((a.shape[0], b.shape[1]), dtype=a.dtype)
        return np.matmul(a, b)


class FailsOnZeroSize(NumpyBackend):
    name = "wrong-zero-size"

    def matmul(self, a, b):
        self.check_operands(a, b)
        if 0 in a.shape or 0 in b.shape:
            raise RuntimeError("cannot launch an empty grid")
        return np.matmul(a, b)


class Unvalidated(NumpyBackend):
    name = "wrong-unvalidated"

    def matmul(self, a, b):
        return np.matmul(a, b)  # numpy's own errors name neither the backend nor the operation


class AcceptsAnyDtype(NumpyBackend):
    name = "wrong-any-dtype"

    def from_numpy(self, x, dtype):
        return np.array(x, dtype=np.float32 if dtype not in self.dtypes else dtype)


class Tf32Math(NumpyBackend):
    """TF32 arithmetic: operands keep 10 mantissa bits (truncated), fp32 accumulation."""

    name = "tf32-math"
    dtypes = frozenset({"float32", "tf32"})

    @staticmethod
    def truncate(x: np.ndarray) -> np.ndarray:
        bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32) & np.uint32(0xFFFFE000)
        return bits.view(np.float32)

    def from_numpy(self, x, dtype):
        self.check_dtype(dtype, np.shape(x))
        data = np.array(x, dtype=np.float32)
        return TF32Array(data) if dtype == "tf32" else data

    def to_numpy(self, y):
        return np.array(y.data if isinstance(y, TF32Array) else y, copy=True)

    def matmul(self, a, b):
        self.check_operands(a, b)
        raw_a, raw_b = (x.data if isinstance(x, TF32Array) else x for x in (a, b))
        c = np.matmul(self.truncate(raw_a), self.truncate(raw_b))
        return TF32Array(c) if isinstance(a, TF32Array) else c


class Fp8Bf16Accumulation(NumpyBackend):
    """float8_e4m3fn with the sum over K kept in bfloat16 after every term."""

    name = "wrong-fp8-bf16-accumulation"

    def matmul(self, a, b):
        self.check_operands(a, b)
        total = np.zeros((a.shape[0], b.shape[1]), dtype=BFLOAT16)
        wide_a, wide_b = a.astype(np.float32), b.astype(np.float32)
        for k in range(a.shape[1]):
            total = (total.astype(np.float32) + np.outer(wide_a[:, k], wide_b[k, :])).astype(BFLOAT16)
        return total


class Fp8FastAccumulation(NumpyBackend):
    """float8_e4m3fn with the running sum cut to 14 significant bits after every addition: the
    kind of accumulator Hopper's fp8 tensor cores use when partial sums are not promoted."""

    name = "wrong-fp8-fast-accumulation"

    def matmul(self, a, b):
        self.check_operands(a, b)
        total = np.zeros((a.shape[0], b.shape[1]))
        wide_a, wide_b = a.astype(np.float64), b.astype(np.float64)
        for k in range(a.shape[1]):
            mantissa, exponent = np.frexp(total + np.outer(wide_a[:, k], wide_b[k, :]))
            total = np.ldexp(np.trunc(mantissa * 2.0**14) / 2.0**14, exponent)
        return total.astype(np.float32).astype(BFLOAT16)


class Fp8ResultInOperandDtype(NumpyBackend):
    name = "wrong-fp8-result-dtype"

    def matmul(self, a, b):
        c = super().matmul(a, b)
        return c.astype(a.dtype) if c.dtype == BFLOAT16 else c


WRONG_FP8 = [
    (Fp8Bf16Accumulation, "float8_e4m3fn-random"),
    (Fp8FastAccumulation, "float8_e4m3fn-random"),
    (Fp8ResultInOperandDtype, "float8_e4m3fn-random"),
]


@pytest.mark.parametrize(("backend_class", "expected"), WRONG_FP8, ids=[cls.name for cls, _ in WRONG_FP8])
def test_suite_fails_a_wrong_fp8_backend(backend_class, expected):
    report = check_backend(backend_class(), dtypes=["float8_e4m3fn"])
    assert not report.passed
    failed = [r.check for r in report.failures]
    assert any(expected in check for check in failed), failed


WRONG = [
    (Fp16Accumulation, "random"),
    (DropsOneTerm, "random"),
    (LeavesLastRowUnwritten, "random"),
    (WrongDtype, "random"),
    (WrongShape, "random"),
    (MutatesInput, "random"),
    (IgnoresStrides, "random-37x43x53"),
    (SwallowsNonFinite, "nonfinite"),
    (Nondeterministic, "repeat"),
    (GarbageWhenKIsZero, "random-5x7x0"),
    (FailsOnZeroSize, "x0"),
    (Unvalidated, "bad-input"),
    (AcceptsAnyDtype, "bad-input"),
]


@pytest.mark.parametrize(("backend_class", "expected"), WRONG, ids=[cls.name for cls, _ in WRONG])
def test_suite_fails_a_wrong_backend(backend_class, expected):
    report = check_backend(backend_class(), dtypes=["float32"])
    assert not report.passed
    failed = [r.check for r in report.failures]
    assert any(expected in check for check in failed), failed


def test_unwritten_elements_are_found_even_where_values_would_match():
    """NaN-primed memory: a result buffer reused from an identical earlier call still fails."""
    report = check_backend(LeavesLastRowUnwritten(), dtypes=["float32"])
    repeat = [r for r in report.results if "-repeat-" in r.check]
    assert repeat and not repeat[0].passed


def test_tf32_math_passes_the_tf32_bound_and_fails_the_float32_one():
    report = check_backend(Tf32Math(), dtypes=["tf32"])
    assert report.passed, [(r.check, r.detail) for r in report.failures]

    class Tf32AsFloat32(Tf32Math):
        name = "wrong-tf32-as-float32"

    wrong = check_backend(Tf32AsFloat32(), dtypes=["float32"])
    assert not wrong.passed
    assert any("-random-" in r.check for r in wrong.failures)


def test_correct_backend_passes_every_check():
    report = check_backend(NumpyBackend())
    assert report.passed and len(report.results) > 50
    assert all(r.passed for r in report.results)
