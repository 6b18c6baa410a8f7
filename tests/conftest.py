"""Test configuration: GPU-marked tests skip, with the reason, where no CUDA GPU is visible."""

from __future__ import annotations

import pytest


def _cuda_missing_reason() -> str | None:
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    return None if torch.cuda.is_available() else "no CUDA GPU visible to torch"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    gpu_items = [item for item in items if item.get_closest_marker("gpu")]
    reason = _cuda_missing_reason() if gpu_items else None
    if reason:
        for item in gpu_items:
            item.add_marker(pytest.mark.skip(reason=f"needs a CUDA GPU: {reason}"))
