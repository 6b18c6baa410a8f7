"""triton-fp8: the conformance suite under Triton's interpreter here, on an fp8 GPU there."""

from __future__ import annotations

import numpy as np
import pytest

import gemmzoo
from gemmzoo.conformance import check_backend

pytest.importorskip("triton")
torch = pytest.importorskip("torch")


def _backend():
    backend = gemmzoo.get_backend("triton-fp8")
    reason = backend.unavailable_reason()
    if reason is not None:
        pytest.skip(f"triton-fp8 unavailable: {reason}")
    return backend


def test_declares_fp8_only():
    assert gemmzoo.get_backend("triton-fp8").dtypes == frozenset({"float8_e4m3fn"})


def test_conforms():
    report = check_backend(_backend())
    assert report.passed, [(r.check, r.detail) for r in report.failures]


def test_nan_of_a_propagates_along_its_row_and_b_along_its_column():
    backend = _backend()
    rng = np.random.default_rng(9)
    a_values, b_values = rng.standard_normal((20, 40)), rng.standard_normal((40, 24))
    a_values[4, 7] = np.nan
    b_values[11, 9] = np.nan
    c = backend.to_numpy(backend.matmul(backend.from_numpy(a_values, "float8_e4m3fn"),
                                        backend.from_numpy(b_values, "float8_e4m3fn")))
    expected = np.zeros(c.shape, dtype=bool)
    expected[4, :] = True
    expected[:, 9] = True
    np.testing.assert_array_equal(np.isnan(c), expected)


def test_a_bfloat16_result_on_the_operands_device():
    backend = _backend()
    a = backend.from_numpy(np.ones((3, 5)), "float8_e4m3fn")
    c = backend.matmul(a, backend.from_numpy(np.full((5, 2), 0.5), "float8_e4m3fn"))
    assert c.dtype == torch.bfloat16 and c.device == a.device
    assert backend.to_numpy(c).tolist() == [[2.5, 2.5]] * 3


@pytest.mark.interpreter
@pytest.mark.parametrize(("split_m", "split_n", "programs", "flatten", "promote"), [
    (1, 1, 9, True, 0),  # one program per tile
    (1, 2, 3, True, 0),  # persistent: 3 programs walk 9 tiles (two halves of N each), flattened loops
    (2, 1, 4, False, 0),  # two halves of M
    (1, 1, 5, False, 32),  # max_num_imprecise_acc's form of promotion
])
def test_tma_kernel_indexing_under_the_interpreter(split_m, split_n, programs, flatten, promote):
    """The Hopper kernel's tile order, descriptors, halves of N, persistent loop and edges, run by
    Triton's interpreter on the CPU.

    The interpreter truncates fp32 to bfloat16 (the backend never sends this kernel there), so C may
    be one bfloat16 unit below the exact sum in magnitude: the tolerance is that, not more. C starts
    as NaN, so an element no program wrote fails.
    """
    import triton
    from triton.tools.tensor_descriptor import TensorDescriptor

    from gemmzoo_triton.fp8.tma_kernel import fp8_tma_matmul_kernel

    m, n, k, block = 70, 88, 80, 32  # edges in M and N, a K tail of half a tile
    generator = torch.Generator().manual_seed(4 + split_m + split_n + programs)
    a = torch.randn((m, k), generator=generator).to(torch.float8_e4m3fn)
    b = torch.randn((n, k), generator=generator).to(torch.float8_e4m3fn).t()  # column-major
    c = torch.full((m, n), float("nan"), dtype=torch.bfloat16)

    def descriptor(view, rows, cols):
        return TensorDescriptor(view, list(view.shape), list(view.stride()), [rows, cols])

    tiles = triton.cdiv(m, block) * triton.cdiv(n, block)
    fp8_tma_matmul_kernel.fn[(min(programs, tiles),)](
        descriptor(a, block // split_m, block), descriptor(b.T, block // split_n, block),
        descriptor(c, block // split_m, block // split_n), m, n, k,
        PROMOTE=promote, BLOCK_SIZE_M=block, BLOCK_SIZE_N=block, BLOCK_SIZE_K=block, GROUP_SIZE_M=2,
        SPLIT_M=split_m, SPLIT_N=split_n, FLATTEN=flatten, PROGRAMS_PER_SM=1,
    )
    exact = a.double() @ b.double()
    unit = 2.0 ** (torch.floor(torch.log2(exact.abs().clamp(min=2.0**-100))) - 7)  # one bf16 ulp
    assert torch.all((c.double() - exact).abs() <= unit + 1e-6)


def test_operands_are_made_k_major_with_their_values():
    from gemmzoo_triton.fp8.backend import k_major, tma_fp8_eligible

    generator = torch.Generator().manual_seed(6)
    a = torch.randn((48, 32), generator=generator).to(torch.float8_e4m3fn)
    b = torch.randn((32, 40), generator=generator).to(torch.float8_e4m3fn)
    x, y = k_major(a.t().contiguous().t(), b)  # A column-major, B row-major: both copied
    assert x.stride(1) == 1 and y.stride(0) == 1
    assert torch.equal(x.view(torch.uint8), a.view(torch.uint8))
    assert torch.equal(y.float(), b.float())
    x2, y2 = k_major(x, y)  # already K-major: left alone
    assert x2 is x and y2 is y
    c = torch.empty((48, 40), dtype=torch.bfloat16)
    assert not tma_fp8_eligible(x, y, c)  # a CPU tensor, and far under the size TMA pays off at


def test_tma_grid_and_block_shapes_follow_the_config():
    """Two programs per SM at most one per tile, one per tile with PROGRAMS_PER_SM 0; descriptors
    get the halves' block shapes."""
    import os

    if os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("imports the kernel module, which the interpreter run covers")
    from types import SimpleNamespace

    from gemmzoo_triton.fp8.tma_kernel import HOPPER_FP8_TMA_CONFIGS, grid_for, set_block_shapes

    meta = {"BLOCK_SIZE_M": 128, "BLOCK_SIZE_N": 128, "PROGRAMS_PER_SM": 2}
    assert grid_for(4096, 4096, 132)(meta) == (264,)  # 1024 tiles
    assert grid_for(1000, 300, 132)(meta) == (8 * 3,)  # fewer tiles than programs
    assert grid_for(4096, 4096, 132)({**meta, "PROGRAMS_PER_SM": 0}) == (1024,)
    for config in HOPPER_FP8_TMA_CONFIGS:
        nargs = {**config.all_kwargs(), **{d: SimpleNamespace(block_shape=None) for d in
                                           ("a_desc", "b_desc", "c_desc")}}
        set_block_shapes(nargs)
        bm, bn, bk = (config.kwargs[f"BLOCK_SIZE_{d}"] for d in "MNK")
        part_m, part_n = bm // config.kwargs["SPLIT_M"], bn // config.kwargs["SPLIT_N"]
        assert nargs["a_desc"].block_shape == [part_m, bk]
        assert nargs["b_desc"].block_shape == [part_n, bk]
        assert nargs["c_desc"].block_shape == [part_m, part_n]
        assert bk == 128  # the promotion interval: one K tile, as cuBLAS
