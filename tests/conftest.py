"""Test-wide setup: Triton's interpreter on machines without a CUDA GPU, and the ``gpu`` marker."""

from __future__ import annotations

import functools
import os

import pytest


@functools.cache
def cuda_available() -> bool:
    """Whether torch sees a CUDA GPU (False without torch)."""
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def pytest_configure(config: pytest.Config) -> None:
    # Without a GPU, run the Triton backends' kernels on the CPU under Triton's interpreter, so
    # the conformance suite covers them in CI. This must happen before the kernels are defined:
    # triton.jit reads TRITON_INTERPRET when it decorates a kernel. An explicit setting wins.
    if not cuda_available():
        os.environ.setdefault("TRITON_INTERPRET", "1")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if cuda_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU; torch sees none here")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
