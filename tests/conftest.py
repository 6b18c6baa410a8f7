"""Test-wide setup: Triton's interpreter on machines without a CUDA GPU, the ``gpu`` marker, and an
empty tuning cache for the modules that ask for one (``pytest.mark.usefixtures("empty_cache")``)."""

from __future__ import annotations

import functools
import os
from collections.abc import Iterator
from pathlib import Path

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


@pytest.fixture
def wide_tables(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tables printed 200 columns wide. rich reads COLUMNS once when a console is made, and the
    CLI's consoles are made at import, which may come before any test sets it: set both."""
    from gemmzoo.cli import console

    monkeypatch.setenv("COLUMNS", "200")
    for shown in (console.console, console.errors):
        monkeypatch.setattr(shown, "width", 200)


@pytest.fixture
def empty_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, wide_tables: None) -> Iterator[Path]:
    """An empty tuning cache directory (yielded), no backend selection or tuning switch from the
    environment, wide tables, and gemmzoo's in-memory answers and plans reset before and after."""
    from gemmzoo.tuning import state

    cache = tmp_path / "cache"
    monkeypatch.setenv("GEMMZOO_CACHE_DIR", str(cache))
    monkeypatch.delenv("GEMMZOO_BACKENDS", raising=False)
    monkeypatch.delenv("GEMMZOO_TUNE", raising=False)
    state.reset()
    yield cache
    state.reset()
