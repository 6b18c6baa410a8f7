"""triton-grouped's TMA path: which problems take it, and its two kernels against float64.

The kernels run where the other Triton tests run: under the interpreter on CPU tensors (its
host-side tensor descriptors work there), or on a CUDA GPU with TMA (Hopper on).
"""

from __future__ import annotations

import pytest

from gemmzoo_triton import common

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

LAYOUTS = ("NN", "TN", "NT", "TT")  # A then B: N as stored, T a column-major view of a stored transpose


def operand(rows: int, cols: int, transposed: bool, dtype: torch.dtype, device: str = "cpu", seed: int = 0):
    """A random normal rows x cols tensor, row-major, or column-major when ``transposed``."""
    values = torch.randn(rows, cols, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    stored = values.T.contiguous().T if transposed else values
    return stored.to(device=device, dtype=dtype)


# Eligibility ------------------------------------------------------------------------------------


@pytest.fixture
def tma_gpu(monkeypatch):
    """Pretend every device is a GPU with TMA, so that the layout and dtype rules decide alone."""
    monkeypatch.setattr(common, "tma_device", lambda device: True)


def eligible(m: int, n: int, k: int, dtype=torch.float16, layout="NN", precision="tf32") -> bool:
    x, y = operand(m, k, layout[0] == "T", dtype), operand(k, n, layout[1] == "T", dtype)
    return common.tma_eligible(x, y, torch.empty(m, n, dtype=dtype), precision)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_row_and_column_major_16_bit_operands_are_eligible(tma_gpu, layout, dtype):
    assert eligible(64, 128, 256, dtype, layout)
    assert eligible(1000, 1000, 1000, dtype, layout)  # rows of 2000 bytes: a multiple of 16


def test_float32_is_eligible_as_tf32_only(tma_gpu):
    assert eligible(64, 128, 256, torch.float32, precision="tf32")
    assert not eligible(64, 128, 256, torch.float32, precision="ieee")
    assert not eligible(64, 128, 256, torch.float64, precision="ieee")


def test_rows_not_16_byte_aligned_are_not_eligible(tma_gpu):
    assert not eligible(4097, 4097, 4097)
    assert not eligible(64, 128, 36)  # A's rows: 72 bytes
    assert not eligible(36, 128, 64, layout="TN")  # rows of A's transpose: 72 bytes
    assert eligible(64, 128, 36, torch.float32)  # 144 bytes
    # C's rows alone: B, column-major, has rows of 128 bytes, C of 72
    assert not eligible(64, 36, 64, layout="NT")
    assert eligible(64, 40, 64, layout="NT")


def test_views_neither_row_nor_column_major_are_not_eligible(tma_gpu):
    b = torch.randn(64, 128, dtype=torch.float16)
    c = torch.empty(64, 64, dtype=torch.float16)
    every_other_column = torch.randn(64, 128, dtype=torch.float16)[:, ::2]
    assert not common.tma_eligible(every_other_column, b[:, :64], c, "tf32")
    assert common.tma_eligible(b[:, :64], b[:, :64], c, "tf32")  # a slice with aligned rows is fine


def test_misaligned_start_is_not_eligible(tma_gpu):
    storage = torch.randn(64 * 64 + 1, dtype=torch.float16)
    shifted = storage[1:].view(64, 64)  # starts 2 bytes into a 16-byte aligned allocation
    aligned = storage[:-1].view(64, 64)
    c = torch.empty(64, 64, dtype=torch.float16)
    assert common.tma_eligible(aligned, aligned, c, "tf32")
    assert not common.tma_eligible(shifted, aligned, c, "tf32")
    assert not common.tma_eligible(aligned, shifted, c, "tf32")


def test_cpu_tensors_and_the_interpreter_never_take_the_tma_path(monkeypatch):
    assert not eligible(64, 128, 256)  # CPU tensors
    monkeypatch.setattr(common, "interpreter_mode", lambda: True)
    assert not common.tma_device(torch.device("cuda", 0))  # decided without asking CUDA
