"""Long sums of one sign: the conformance bound holds for a plain fp32 loop over K, and the suite
still fails fp16 accumulation (docs/plugins.md, "Long sums of one sign")."""

from __future__ import annotations

import math

import numpy as np
import pytest

from gemmzoo.conformance import check_backend, conformance_cases
from gemmzoo.conformance.bounds import error_bound, reference
from gemmzoo.conformance.judge import judge_result
from gemmzoo.conformance.long_sums import same_sign_operands
from gemmzoo_numpy import NumpyBackend

U32 = 2.0**-24


def _chain(a: np.ndarray, b: np.ndarray, accumulate: type = np.float32) -> np.ndarray:
    """C = A·B summed one term after the other, k ascending, rounding to ``accumulate`` each step."""
    total = np.zeros((a.shape[0], b.shape[1]), dtype=accumulate)
    for k in range(a.shape[1]):
        total = (total + np.outer(a[:, k], b[k, :]).astype(accumulate)).astype(accumulate)
    return total.astype(a.dtype)


class ChainSum(NumpyBackend):
    """A correct fp32 GEMM with the plainest summation order: one accumulator per element."""

    name = "chain-sum"

    def matmul(self, a, b):
        self.check_operands(a, b)
        if a.dtype != np.float32:
            return np.matmul(a, b)
        return _chain(a, b)


class Fp16ChainSum(NumpyBackend):
    """The same loop with an fp16 accumulator: wrong for float16 operands (fp32 accumulation is
    the contract)."""

    name = "fp16-chain-sum"

    def matmul(self, a, b):
        self.check_operands(a, b)
        return _chain(a, b, np.float16) if a.dtype == np.float16 else np.matmul(a, b)


def _sqrt_only_bound(k: int, ref: np.ndarray, magnitude: np.ndarray) -> np.ndarray:
    """The float32 bound without the term for the partial sums of the terms' mean."""
    return U32 * np.abs(ref) + (1 + U32) * 4 * math.sqrt(k) * U32 * magnitude + 2.0**-149


def _relative_errors(c: np.ndarray, a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    ref, magnitude = reference(a, b)
    error = np.abs(c.astype(np.float64) - ref)
    k = a.shape[1]
    return (float((error / error_bound("float32", k, ref, magnitude)).max()),
            float((error / _sqrt_only_bound(k, ref, magnitude)).max()))


@pytest.mark.parametrize("shape", [(7, 5, 4099), (1, 5, 4099)])
def test_the_same_sign_case_needs_the_mean_term(shape):
    """The case is what it claims: a plain fp32 loop over K is outside a sqrt(K)-only bound on it
    (several times), and inside the suite's bound with room."""
    a, b = same_sign_operands(*shape, "float32", np.random.default_rng(3))
    a, b = a.astype(np.float32), b.astype(np.float32)
    within, sqrt_only = _relative_errors(_chain(a, b), a, b)
    assert sqrt_only > 2.0
    assert within < 0.5


def test_same_sign_operands_are_one_sign_with_one_large_first_term():
    a, b = same_sign_operands(4, 3, 50, "float32", np.random.default_rng(0))
    assert (a >= 0).all() and (b >= 0).all()
    assert (a[:, 0] >= 1).all() and (b[0, :] >= 1).all()
    assert a[:, 1:].max() < math.sqrt(U32) and b[1:, :].max() < math.sqrt(U32)


def test_a_plain_fp32_loop_conforms():
    report = check_backend(ChainSum(), ["float32"])
    assert report.passed, [f"{f.check}: {f.detail}" for f in report.failures]
    ran = {r.check for r in report.results}
    assert {c.id for c in conformance_cases("float32") if c.kind == "same-sign"} <= ran


def test_fp16_accumulation_still_fails():
    report = check_backend(Fp16ChainSum(), ["float16"])
    assert not report.passed
    assert any("random" in f.check and "outside the error bound" in f.detail for f in report.failures)


@pytest.mark.parametrize("name", ["numpy", "torch-cpu"])
def test_bundled_cpu_backends_meet_the_bound_on_a_long_uniform_sum(name):
    """1×K·K×1 of uniform [0, 1) float32, K = 3·10⁶: torch-cpu sums it in one chain (several times
    outside a sqrt(K)-only bound); both bundled CPU backends are inside the suite's bound."""
    if name == "torch-cpu":
        pytest.importorskip("torch")
    import gemmzoo

    backend = gemmzoo.get_backend(name)
    rng = np.random.default_rng(7)
    k = 3_000_000
    a_host = rng.random((1, k), dtype=np.float32)
    b_host = rng.random((k, 1), dtype=np.float32)
    a, b = backend.from_numpy(a_host, "float32"), backend.from_numpy(b_host, "float32")
    verdict = judge_result(backend, "float32", a, backend.matmul(a, b), a_host, b_host)
    assert verdict.error_ratio <= 1.0
