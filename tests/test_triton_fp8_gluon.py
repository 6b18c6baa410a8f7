"""triton-fp8's Gluon kernel (Hopper only): its configs, its build for sm_90a without a GPU, and,
on a Hopper GPU, its results against torch._scaled_mm and the conformance suite."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator

import pytest

pytest.importorskip("triton")
pytest.importorskip("triton.experimental.gluon.language.nvidia.hopper")

from gemmzoo_triton import fp8_gluon_kernel
from gemmzoo_triton.fp8_gluon_kernel import DEFAULT_CONFIG, MIN_STAGES, config_for

H100_SHARED = 232448  # bytes a block may opt in to on the H100 (227 KiB)


def test_config_takes_as_many_slots_as_shared_memory_holds():
    assert config_for(H100_SHARED) == DEFAULT_CONFIG
    assert DEFAULT_CONFIG.shared_bytes() <= H100_SHARED
    smaller = config_for(200 * 1024)
    assert smaller is not None and MIN_STAGES <= smaller.stages < DEFAULT_CONFIG.stages
    assert smaller.shared_bytes() <= 200 * 1024
    assert config_for(smaller.shared_bytes() - 1).stages == smaller.stages - 1
    assert config_for(100 * 1024) is None


def test_grid_is_one_program_per_sm_and_at_most_one_per_tile():
    assert fp8_gluon_kernel.grid(4096, 4096, 132) == (132,)
    assert fp8_gluon_kernel.grid(256, 384, 132) == (6,)
    assert fp8_gluon_kernel.grid(129, 129, 132) == (4,)


@contextlib.contextmanager
def _hopper_target() -> Iterator[None]:
    """Triton's compiler aimed at sm_90a with no GPU: a driver that names the target and
    nothing else (compiling needs no device; launching is never asked for)."""
    from triton.backends.compiler import GPUTarget
    from triton.runtime import driver

    class HopperWithoutGpu:
        def get_current_target(self) -> GPUTarget:
            return GPUTarget("cuda", 90, 32)

        def get_current_device(self) -> int:
            return 0

        def get_current_stream(self, device: int | None = None) -> int:
            return 0

    previous = driver._active
    driver.set_active(HopperWithoutGpu())
    try:
        yield
    finally:
        driver._active = previous


@pytest.mark.parametrize("m, n, k", [(4096, 4096, 4096), (1000, 1040, 2064)])
def test_kernel_builds_for_hopper_warp_specialized(m, n, k):
    torch = pytest.importorskip("torch")
    x = torch.empty(m, k, dtype=torch.float8_e4m3fn)
    y = torch.empty(n, k, dtype=torch.float8_e4m3fn).T  # column-major, as the backend passes B
    c = torch.empty(m, n, dtype=torch.bfloat16)
    with _hopper_target():
        descriptors = fp8_gluon_kernel.descriptors(x, y, c)
        compiled = fp8_gluon_kernel.fp8_gluon_kernel.warmup(
            *descriptors, m, n, k, DEFAULT_CONFIG.stages, DEFAULT_CONFIG.group_m,
            num_warps=DEFAULT_CONFIG.num_warps, grid=(132,))
    ptx = compiled.asm["ptx"]
    # the loading warp gives its registers to the MMA warps: the kernel is warp-specialized
    assert re.search(r"setmaxnreg\.dec\.sync\.aligned\.u32\s+24", ptx)
    assert re.search(r"setmaxnreg\.inc\.sync\.aligned\.u32\s+2[0-9][0-9]", ptx)
    # fp8 MMAs of 64x128 per warpgroup, started async, one group left in flight while adding
    assert "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3" in ptx
    assert "wgmma.wait_group.sync.aligned 1" in ptx
    assert compiled.metadata.shared <= DEFAULT_CONFIG.shared_bytes() <= H100_SHARED


def _hopper() -> bool:
    torch = pytest.importorskip("torch")
    return torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)


@pytest.mark.gpu
@pytest.mark.parametrize("m, n, k, b_row_major", [
    (4096, 4096, 4096, False), (1000, 1040, 2064, False), (129, 4112, 400, True),
    (300, 272, 16, False), (2112, 2080, 2064, True),
])
def test_results_are_scaled_mm_bitwise_on_hopper(m, n, k, b_row_major):
    if not _hopper():
        pytest.skip("needs a GPU of capability 9.0")
    import torch

    from gemmzoo_triton import TritonFp8Backend
    from gemmzoo_triton.fp8_backend import gluon_fp8_config

    g = torch.Generator(device="cuda").manual_seed(m + n + k)
    a = torch.randn(m, k, device="cuda", generator=g).to(torch.float8_e4m3fn)
    b_t = torch.randn(n, k, device="cuda", generator=g).to(torch.float8_e4m3fn)
    b = b_t.T.contiguous() if b_row_major else b_t.T
    assert gluon_fp8_config(a, b_t.T) is not None
    one = torch.ones((), device="cuda")
    expected = torch._scaled_mm(a, b_t.T, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
    backend = TritonFp8Backend()
    first, second = backend.matmul(a, b), backend.matmul(a, b)
    assert first.dtype == torch.bfloat16 and first.shape == (m, n)
    assert torch.equal(first, expected)  # same numerics: every element, bit for bit
    assert torch.equal(first, second)


@pytest.mark.gpu
def test_conforms_on_hopper_through_the_gluon_kernel():
    if not _hopper():
        pytest.skip("needs a GPU of capability 9.0")
    from gemmzoo.conformance import Case, check_backend, run_case
    from gemmzoo_triton import TritonFp8Backend

    backend = TritonFp8Backend()
    report = check_backend(backend, dtypes=["float8_e4m3fn"])
    assert report.results and report.passed, [r.detail for r in report.failures][:3]
    for layout in ("NN", "NT", "TN", "TT"):  # past the TMA threshold, tails in M, N and K
        result = run_case(backend, Case("random", 2112, 2080, 2064, "float8_e4m3fn", layout))
        assert result.passed, result.detail
