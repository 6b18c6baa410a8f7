"""triton-splitk and triton-decode beyond the shared suite: forced splits and both reductions,
every layout of B, bitwise repeatability, and the split heuristic's choices."""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest
from backends_here import available

import gemmzoo
from gemmzoo.conformance import error_bound
from gemmzoo_triton.splitk import plan

SKINNY = ("triton-splitk", "triton-decode")


def operand(backend, values: np.ndarray, dtype: str, layout: str):
    """``values`` on the backend: plain (N), through a transposed copy (T), or a strided slice (S)."""
    if layout == "T":
        return backend.from_numpy(np.ascontiguousarray(values.T), dtype).T
    if layout == "S":
        padded = np.full((2 * values.shape[0], 3 * values.shape[1]), np.nan)
        padded[::2, 1::3] = values
        return backend.from_numpy(padded, dtype)[::2, 1::3]
    return backend.from_numpy(values, dtype)


def assert_close(backend, a, b, c, dtype: str) -> None:
    """Every element of C within the suite's error bound of the float64 product of A and B."""
    a64, b64 = backend.to_numpy(a).astype(np.float64), backend.to_numpy(b).astype(np.float64)
    ref = a64 @ b64
    bound = error_bound(dtype, a64.shape[1], ref, np.abs(a64) @ np.abs(b64))
    got = backend.to_numpy(c).astype(np.float64)
    assert got.shape == ref.shape
    error = np.abs(got - ref)
    assert np.all(error <= bound), f"{int((error > bound).sum())} of {got.size} elements outside the bound"


@pytest.mark.parametrize("name", SKINNY)
@pytest.mark.parametrize("layout", ["NN", "NT", "TN", "SS"])
@pytest.mark.parametrize("shape", [(1, 40, 130), (5, 17, 200), (20, 33, 70), (70, 24, 150)])
def test_product_matches_float64_reference(name, layout, shape):
    backend = available(name)
    m, n, k = shape
    rng = np.random.default_rng(m * 1000 + n * 10 + k)
    for dtype in sorted(backend.dtypes):
        a = operand(backend, rng.standard_normal((m, k)), dtype, layout[0])
        b = operand(backend, rng.standard_normal((k, n)), dtype, layout[1])
        run = backend.prepare(a, b)
        assert_close(backend, a, b, run(a, b), dtype)
        assert_close(backend, a, b, backend.matmul(a, b), dtype)


@pytest.mark.parametrize("dtype", ["float16", "float32"])
@pytest.mark.parametrize("reduce", [1, 2])
@pytest.mark.parametrize("decode", [True, False])
def test_forced_splits_agree_bitwise_and_match_the_reference(reduce, decode, dtype):
    backend = available("triton-splitk")
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(17 + reduce)
    m, n, k = (3, 50, 1333) if decode else (40, 36, 333)
    a = backend.from_numpy(rng.standard_normal((m, k)), dtype)
    b = backend.from_numpy(np.ascontiguousarray(rng.standard_normal((n, k))), dtype).T
    elt, precision = (4, "ieee") if dtype == "float32" else (2, "tf32")
    base = (plan.decode_blocks if decode else plan.tile_blocks)(m, n, elt, precision == "ieee")
    for splits in (2, 5):
        config = plan.with_splits(base, m, n, k, splits, reduce)
        assert 1 < config.splits <= splits and config.reduce == reduce
        run = plan.bind(a, b, precision, config)
        first = run(a, b)
        assert_close(backend, a, b, first, dtype)
        # the serial reduction's counters must be back at zero, or the next call's last program
        # would never see its ticket come up and C would stay unwritten
        for _ in range(2):
            assert torch.equal(run(a, b), first)


@pytest.mark.parametrize("reduce", [1, 2])
def test_a_kept_workspace_serves_each_calls_own_operands(reduce):
    """The partial tiles and counters stay with the plan from call to call: three calls on new
    values each match their own reference, and C, new each call, keeps an earlier call's result."""
    backend = available("triton-splitk")
    torch = pytest.importorskip("torch")
    m, n, k = 20, 36, 300
    config = plan.with_splits(plan.tile_blocks(m, n, 2, False), m, n, k, 3, reduce)
    assert config.splits == 3 and config.reduce == reduce
    rng = np.random.default_rng(40 + reduce)
    calls = [(backend.from_numpy(rng.standard_normal((m, k)), "float16"),
              backend.from_numpy(rng.standard_normal((k, n)), "float16")) for _ in range(3)]
    run = plan.bind(*calls[0], "tf32", config)
    results = [run(a, b) for a, b in calls]
    kept = [c.clone() for c in results]
    for (a, b), c in zip(calls, results, strict=True):
        assert_close(backend, a, b, c, "float16")
    run(*calls[0])
    assert all(torch.equal(c, copy) for c, copy in zip(results, kept, strict=True))


@pytest.mark.parametrize("layout", ["NN", "TN", "NT", "TT"])
@pytest.mark.parametrize(("splits", "reduce"), [(1, 0), (3, 1), (4, 2)])
def test_tma_kernel_matches_the_reference_with_tails_in_every_dimension(layout, splits, reduce):
    backend = available("triton-splitk")
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(len(layout) + 10 * splits + reduce + (layout == "TT"))
    m, n, k = 24, 40, 200  # tiles cut at M, N and K; rows of 48, 80 and 400 bytes
    a = operand(backend, rng.standard_normal((m, k)), "float16", layout[0])
    b = operand(backend, rng.standard_normal((k, n)), "float16", layout[1])
    assert plan.tma_operand(a) and plan.tma_operand(b)
    config = plan.with_splits(plan.SplitConfig(16, 32, 32, 2, 4, tma=True), m, n, k, splits, reduce)
    assert config.splits == splits and config.tma
    run = plan.bind(a, b, "tf32", config)
    first = run(a, b)
    assert_close(backend, a, b, first, "float16")
    assert torch.equal(run(a, b), first)


def test_tma_plan_falls_back_to_pointers_for_operands_no_descriptor_covers():
    backend = available("triton-splitk")
    rng = np.random.default_rng(5)
    a = operand(backend, rng.standard_normal((5, 36)), "float16", "N")  # rows of 72 bytes
    b = operand(backend, rng.standard_normal((36, 24)), "float16", "N")
    assert not plan.tma_operand(a)
    config = plan.with_splits(plan.SplitConfig(16, 16, 16, 2, 4, tma=True), 5, 24, 36, 2, 1)
    assert_close(backend, a, b, plan.bind(a, b, "tf32", config)(a, b), "float16")


def test_decode_runs_the_splitk_plan_above_64_rows():
    decode, splitk = gemmzoo.get_backend("triton-decode"), gemmzoo.get_backend("triton-splitk")
    torch = pytest.importorskip("torch")
    x = torch.empty((1, 1), dtype=torch.float16)
    assert decode.config(65, 4096, 4096, x, "tf32") == splitk.config(65, 4096, 4096, x, "tf32")
    assert decode.config(64, 4096, 4096, x, "tf32") != splitk.config(64, 4096, 4096, x, "tf32")


def programs(config: plan.SplitConfig, m: int, n: int) -> int:
    return math.ceil(m / config.block_m) * math.ceil(n / config.block_n) * config.splits


@pytest.mark.parametrize("shape", [(1, 4096, 4096), (16, 14336, 4096), (64, 4096, 14336), (8, 11008, 4096)])
def test_decode_choice_reads_b_once_over_most_sms_and_splits_k_evenly(shape):
    m, n, k = shape
    config = plan.choose(m, n, k, 2, False, 132, decode=True)
    assert config.block_m >= m  # one block of rows: each column block of B is read once
    assert programs(config, m, n) >= 66
    assert config.k_per_split % config.block_k == 0
    assert (config.splits - 1) * config.k_per_split < k <= config.splits * config.k_per_split


@pytest.mark.parametrize("size", [16, 128, 512])
@pytest.mark.parametrize("k", [16384, 65536])
def test_long_k_choice_splits_k_to_fill_the_gpu(size, k):
    config = plan.choose(size, size, k, 2, False, 132, decode=False)
    assert config.splits > 1 and config.reduce in (1, 2)
    assert programs(config, size, size) >= 32
    assert config.k_per_split >= plan.MIN_STEPS * config.block_k


@pytest.mark.parametrize("size", [256, 512, 768])
def test_long_k_with_descriptors_takes_tma_tiles_of_64x128_or_more(size):
    config = plan.choose(size, size, 65536, 2, False, 132, decode=False, tma=True)
    assert config.tma and config.block_m * config.block_n >= 64 * 128 and config.splits > 1
    count = programs(config, size, size)
    assert count / (132 * math.ceil(count / 132)) >= 0.9  # whole waves of the SMs, or nearly
    assert not plan.choose(size, size, 65536, 2, False, 132, decode=False).tma


def test_small_tiles_and_decode_stay_on_pointer_loads():
    assert not plan.choose(64, 64, 16384, 2, False, 132, decode=False, tma=True).tma
    assert not plan.choose(16, 4096, 4096, 2, False, 132, decode=True, tma=True).tma
    assert not plan.choose(512, 512, 65536, 4, True, 132, decode=False, tma=True).tma  # IEEE fp32


def test_large_square_problem_does_not_split():
    config = plan.choose(4096, 4096, 4096, 2, False, 132, decode=False)
    assert config.splits == 1 and config.reduce == 0


def test_workspace_stays_within_32_bit_offsets():
    config = plan.with_splits(plan.tile_blocks(30000, 30000, 2, False), 30000, 30000, 1 << 20, 64, 1)
    assert config.splits == 2 and config.splits * 30000 * 30000 <= plan.MAX_WORKSPACE


def test_import_and_construction_load_neither_torch_nor_triton():
    code = (
        "import sys\n"
        "from gemmzoo_triton import TritonDecodeBackend, TritonSplitKBackend\n"
        "from gemmzoo_triton.splitk import plan as splitk_plan\n"
        "backends = [TritonSplitKBackend(), TritonDecodeBackend()]\n"
        "splitk_plan.choose(16, 4096, 4096, 2, False, 132, True)\n"
        "print([b.name for b in backends])\n"
        "print(sorted(m for m in ('torch', 'triton') if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    assert lines == ["['triton-splitk', 'triton-decode']", "[]"], lines
