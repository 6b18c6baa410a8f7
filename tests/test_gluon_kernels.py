"""The Gluon kernels (Hopper only): their configs, their build for sm_90a without a GPU, and, on
a Hopper GPU, triton-grouped's results through its Gluon kernel."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("triton")
pytest.importorskip("gemmzoo_triton.core.gluon_parts")  # Triton 3.6 or later, with Gluon

from gemmzoo_triton.core import gluon_parts
from gemmzoo_triton.fp8 import gluon_kernel as fp8_gluon_kernel
from gemmzoo_triton.grouped import gluon_kernel as grouped_gluon_kernel
from gemmzoo_triton.grouped import tf32_kernel as grouped_tf32_kernel

H100_SHARED = 232448  # bytes a block may opt in to on the H100 (227 KiB)
H100_SMS = 132


def test_fp8_config_takes_as_many_slots_as_shared_memory_holds():
    config_for, default = fp8_gluon_kernel.config_for, fp8_gluon_kernel.DEFAULT_CONFIG
    assert config_for(H100_SHARED) == default
    assert default.shared_bytes() <= H100_SHARED
    smaller = config_for(200 * 1024)
    assert smaller is not None and fp8_gluon_kernel.MIN_STAGES <= smaller.stages < default.stages
    assert smaller.shared_bytes() <= 200 * 1024
    assert config_for(smaller.shared_bytes() - 1).stages == smaller.stages - 1
    assert config_for(100 * 1024) is None


def test_a_triton_before_3_6_gets_no_gluon_kernels(monkeypatch):
    import importlib

    import triton

    monkeypatch.setattr(triton, "__version__", "3.5.1")
    monkeypatch.delitem(sys.modules, "gemmzoo_triton.core.gluon_parts")
    # the backends import the kernels inside try/except ImportError and keep their tl kernels
    with pytest.raises(ImportError, match=r"Triton 3\.6 or later; this is 3\.5\.1"):
        importlib.import_module("gemmzoo_triton.core.gluon_parts")


def test_grids_are_one_program_per_sm_and_at_most_one_per_tile():
    fp8, wide = fp8_gluon_kernel.DEFAULT_CONFIG, grouped_gluon_kernel.WIDE
    assert gluon_parts.grid(4096, 4096, H100_SMS, fp8) == (H100_SMS,)
    assert gluon_parts.grid(256, 384, H100_SMS, fp8) == (6,)
    assert gluon_parts.grid(129, 129, H100_SMS, fp8) == (4,)
    assert gluon_parts.grid(4096, 4096, H100_SMS, wide) == (H100_SMS,)
    assert gluon_parts.grid(300, 600, H100_SMS, wide) == (9,)


def test_grouped_schedule_weighs_idle_sms_against_tile_speed_and_hand_overs():
    pick, schedule = grouped_gluon_kernel.pick_schedule, grouped_gluon_kernel.Schedule
    wide, square = grouped_gluon_kernel.WIDE, grouped_gluon_kernel.SQUARE
    # 4096^2: 512 wide tiles are 3.9 waves: the wide tile, whole
    assert pick(4096, 4096, 4096, H100_SMS, H100_SHARED) == schedule(wide, H100_SMS)
    # 3072^2: 288 wide tiles are 2.2 waves (three rounds); 576 square ones are 4 waves and 48
    # tiles, which split in two fill 96 of the SMs the fifth wave would leave idle
    assert pick(3072, 3072, 3072, H100_SMS, H100_SHARED) == schedule(square, H100_SMS, 48, 2)
    # 8192^2: 1024 wide tiles are 7.8 waves; square tiles cannot make up their rate
    assert pick(8192, 8192, 8192, H100_SMS, H100_SHARED) == schedule(wide, H100_SMS)
    # 512^2 x 16384: 16 square tiles, each split between several programs (long K)
    chosen = pick(512, 512, 16384, H100_SMS, H100_SHARED)
    assert chosen.config == square and chosen.sk_tiles == 16 and 2 < chosen.split <= H100_SMS // 16
    # 2176^2: two whole waves of square tiles and 25 tiles: too few whole waves to split after
    assert not pick(2176, 2176, 2176, H100_SMS, H100_SHARED).splits
    # too few K steps to split: whole tiles
    assert not pick(2176, 2176, 256, H100_SMS, H100_SHARED).splits
    # M or N under one tile, or too little shared memory for either tile: no Gluon kernel
    assert pick(64, 4096, 4096, H100_SMS, H100_SHARED) is None
    assert pick(4096, 4096, 4096, H100_SMS, 160 * 1024) is None
    assert wide.shared_bytes() <= H100_SHARED and square.shared_bytes() <= H100_SHARED


def test_c_too_small_for_the_gpu_gets_narrow_tiles_where_they_fit_one_wave():
    pick, schedule = grouped_gluon_kernel.pick_schedule, grouped_gluon_kernel.Schedule
    narrow = grouped_gluon_kernel.NARROW
    assert narrow.shared_bytes() <= H100_SHARED
    # 1024^2 x 2048: 64 square tiles leave half the SMs idle (or split in two, with hand-overs);
    # 128 narrow ones fill 128 of 132
    assert pick(1024, 1024, 2048, H100_SMS, H100_SHARED) == schedule(narrow, 128)
    assert pick(512, 1024, 4096, H100_SMS, H100_SHARED) == schedule(narrow, 64)
    # 1152^2: 162 narrow tiles would be two waves; 81 square ones stay whole
    assert pick(1152, 1152, 1152, H100_SMS, H100_SHARED).config == grouped_gluon_kernel.SQUARE
    # 512^2 x 16384: 32 narrow tiles of 256 K steps each lose to square tiles split along K
    assert pick(512, 512, 16384, H100_SMS, H100_SHARED).splits
    # 2048^3: 128 wide tiles are one wave already
    assert pick(2048, 2048, 2048, H100_SMS, H100_SHARED).config == grouped_gluon_kernel.WIDE
    # a GPU with fewer SMs: 128 narrow tiles are two waves there
    assert pick(1024, 1024, 2048, 100, H100_SHARED).config != narrow


@pytest.fixture(scope="module")
def built() -> dict[str, Any]:
    """What the compiler made of each kernel variant, built in a process of its own (see
    tests/gluon_build.py)."""
    script = Path(__file__).with_name("gluon_build.py")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def _warp_specialized(facts: dict[str, Any]) -> bool:
    # the loading warp gives its registers up (to 24), the MMA warps take more
    regs = {(way, int(count)) for way, count in facts["setmaxnreg"]}
    return ("dec", 24) in regs and any(way == "inc" and count >= 200 for way, count in regs)


@pytest.mark.parametrize("variant", ["fp8 4096x4096x4096", "fp8 1000x1040x2064"])
def test_fp8_kernel_builds_for_hopper_warp_specialized(built, variant):
    facts = built[variant]
    assert _warp_specialized(facts)
    # fp8 MMAs of 64x128 per warpgroup, started async, one group left in flight while adding
    assert facts["mma"] == [["m64n128k32", "e4m3"]]
    assert facts["wait_groups"] == ["0", "1"]
    assert facts["shared"] <= fp8_gluon_kernel.DEFAULT_CONFIG.shared_bytes() <= H100_SHARED


@pytest.mark.parametrize("variant", ["fp8 scaled tensorwise bfloat16", "fp8 scaled rowwise bfloat16",
                                     "fp8 scaled blockwise bfloat16", "fp8 scaled blockwise float32"])
def test_fp8_scaled_kernel_builds_for_hopper_without_serialised_mmas(built, variant):
    """triton-fp8's scaled Gluon kernel: the fp8 kernel's shape, block-wise A's scales loaded by TMA,
    and (where Triton's ptxas can be run here) no spills and no MMAs serialised by ptxas, block-wise
    scales in the K loop included."""
    facts = built[variant]
    assert _warp_specialized(facts)
    assert facts["mma"] == [["m64n128k32", "e4m3"]]
    assert facts["wait_groups"] == ["0", "1"]
    assert facts["stages"] >= fp8_gluon_kernel.MIN_STAGES
    assert facts["shared"] <= H100_SHARED
    if "blockwise" in variant:  # A's scales come by TMA with each slot: one bulk copy more
        assert facts["tma_loads"] == built["fp8 scaled rowwise bfloat16"]["tma_loads"] + 1
    if facts["ptxas"]["ran"]:
        assert facts["ptxas"]["spill_bytes"] == 0 and not facts["ptxas"]["serialised"]


@pytest.mark.parametrize("variant, mma", [
    ("grouped tma bfloat16 default", ["m64n256k16", "bf16"]),
    ("grouped tma bfloat16 narrow", ["m64n128k16", "bf16"]),
    ("grouped tma float8_e4m3fn default", ["m64n128k32", "e4m3"]),
    ("grouped tma float8_e4m3fn narrow", ["m64n128k32", "e4m3"]),
])
def test_grouped_class_tma_kernel_builds_for_hopper(built, variant, mma):
    """The grouped class's Hopper kernel compiles (the interpreter does not find what the compiler
    refuses), reads through TMA, pipelined (a load of A and of B per stage in flight), and runs
    warpgroup MMAs; the 16-bit configs spill nothing."""
    facts = built[variant]
    assert facts["mma"] == [mma]
    assert facts["tma_loads"] >= 4
    if facts["ptxas"]["ran"] and "bfloat16" in variant:
        assert facts["ptxas"]["spill_bytes"] == 0


@pytest.mark.parametrize("scaling", ["rowwise", "blockwise"])
def test_scaled_tma_kernel_builds_for_hopper_in_every_config(built, scaling):
    for config, facts in built[f"scaled tma {scaling}"].items():
        assert facts["mma"] == [["m64n128k32", "e4m3"]], config
        assert facts["tma_loads"] >= 4 and facts["shared"] <= H100_SHARED, config


# whole tiles raise no flags; split ones raise a head's with release and poll the heads' with
# acquire, at GPU scope
HAND_OVER = ["gpu.acquire.add", "gpu.release.exch"]


@pytest.mark.parametrize("variant, mma, config, atomics", [
    ("float16 NN 256", ["m64n256k16", "f16"], "WIDE", []),
    ("float16 NT 256", ["m64n256k16", "f16"], "WIDE", []),
    ("float16 TN 256", ["m64n256k16", "f16"], "WIDE", []),
    ("float16 TT 256", ["m64n256k16", "f16"], "WIDE", []),
    ("bfloat16 NN 128", ["m64n128k16", "bf16"], "SQUARE", []),
    ("float16 TN 64", ["m64n64k16", "f16"], "NARROW", []),
    ("float16 NN 128 split", ["m64n128k16", "f16"], "SQUARE", HAND_OVER),
    ("float16 TT 128 split", ["m64n128k16", "f16"], "SQUARE", HAND_OVER),
])
def test_grouped_kernel_builds_for_hopper_in_every_layout(built, variant, mma, config, atomics):
    facts = built[variant]
    assert _warp_specialized(facts)
    assert facts["mma"] == [mma]
    assert facts["wait_groups"] == ["0", "1"]
    assert facts["atomics"] == atomics
    assert facts["shared"] <= getattr(grouped_gluon_kernel, config).shared_bytes() <= H100_SHARED


@pytest.mark.parametrize("variant", ["tf32 NN", "tf32 NT"])
def test_tf32_kernel_builds_for_hopper_with_two_register_sets(built, variant):
    facts = built[variant]
    assert _warp_specialized(facts)
    # tf32 MMAs of 64x256 per warpgroup (C's tile transposed), one group left in flight
    assert facts["mma"] == [["m64n256k8", "tf32"]]
    assert facts["wait_groups"] == ["0", "1"]
    assert facts["shared"] <= grouped_tf32_kernel.CONFIG.shared_bytes() <= H100_SHARED
    # two K steps of four k8 MMAs each, whose left operands (from registers) share no register:
    # the next step's tile is never loaded into registers an MMA in flight reads
    assert facts["mma_instructions"] == 8
    registers = [name for operand in facts["left_operands"] for name in operand.split(",")]
    assert len(registers) == 32 and len(set(registers)) == 32


def _hopper() -> bool:
    torch = pytest.importorskip("torch")
    return torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_triton_grouped_conforms_through_the_gluon_kernel(dtype):
    if not _hopper():
        pytest.skip("needs a GPU of capability 9.0")
    import torch

    import gemmzoo
    from gemmzoo.conformance import Case, run_case
    from gemmzoo_triton.grouped import plan as grouped_plan

    backend = type(gemmzoo.get_backend("triton-grouped"))()  # plans of its own, made here
    # 2112x2080x2064: the tma route in place; 2049x2051x2053: the aligned route (copies, C a view)
    for m, n, k in ((2112, 2080, 2064), (2049, 2051, 2053)):
        for layout in ("NN", "NT", "TN", "TT"):
            result = run_case(backend, Case("random", m, n, k, dtype, layout))
            assert result.passed, result.detail
    x = torch.empty(2112, 2064, device="cuda", dtype=getattr(torch, dtype))
    y = torch.empty(2064, 2080, device="cuda", dtype=getattr(torch, dtype))
    c = torch.empty(2112, 2080, device="cuda", dtype=getattr(torch, dtype))
    assert grouped_plan.route(x, y, "tf32") == "tma"
    assert grouped_plan.gluon_run(x, y, c, None) is not None
    assert run_case(backend, Case("repeat", 2112, 2080, 2064, dtype)).passed


def _split(schedule: Any) -> bool:
    return schedule.splits


def _narrow(schedule: Any) -> bool:
    return schedule.config == grouped_gluon_kernel.NARROW


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("shapes, reached", [
    # 3072^3: the 48 tiles after four whole waves split in two; 640x512x32768: 20 tiles, each
    # split between several programs (long K)
    (((3072, 3072, 3072), (640, 512, 32768)), _split),
    # 1024^2 x 2048: 128 narrow tiles; 1000x1000x2040: the last row and column of them partly
    # outside C
    (((1024, 1024, 2048), (1000, 1000, 2040)), _narrow),
], ids=["split tiles", "narrow tiles"])
def test_triton_grouped_conforms_on_each_kind_of_gluon_schedule(dtype, shapes, reached):
    if not _hopper():
        pytest.skip("needs a GPU of capability 9.0")
    import torch

    import gemmzoo
    from gemmzoo.conformance import Case, run_case
    from gemmzoo_triton.grouped import plan as grouped_plan

    backend = type(gemmzoo.get_backend("triton-grouped"))()
    on_gpu = torch.empty(1, device="cuda")
    for m, n, k in shapes:
        assert reached(grouped_plan.gluon_schedule(on_gpu, m, n, k))
        for layout in ("NN", "NT", "TN", "TT"):
            result = run_case(backend, Case("random", m, n, k, dtype, layout))
            assert result.passed, result.detail
        assert run_case(backend, Case("repeat", m, n, k, dtype)).passed


@pytest.mark.gpu
def test_triton_grouped_conforms_in_tf32_through_the_gluon_tf32_kernel():
    if not _hopper():
        pytest.skip("needs a GPU of capability 9.0")
    import torch

    import gemmzoo
    from gemmzoo.conformance import Case, run_case
    from gemmzoo_triton.grouped import plan as grouped_plan

    backend = type(gemmzoo.get_backend("triton-grouped"))()
    on_gpu = torch.empty(1, device="cuda")
    assert grouped_plan.tf32_gluon_takes(on_gpu, None)
    # 2112x2080x2064: 65 K steps (an odd count: the last pair's second step loads zeros), C's
    # last tiles partly outside; 2049x2051x2053: A and B copied (rows not aligned), C a view
    for m, n, k in ((2112, 2080, 2064), (2049, 2051, 2053)):
        for layout in ("NN", "NT", "TN", "TT"):
            result = run_case(backend, Case("random", m, n, k, "tf32", layout))
            assert result.passed, result.detail
    assert run_case(backend, Case("repeat", 2112, 2080, 2064, "tf32")).passed
