"""Test helper: a registered backend, or a skip that says why it cannot run on this machine."""

from __future__ import annotations

from typing import Any

import pytest

import gemmzoo


def available(name: str) -> Any:
    """The backend called ``name``; skips the calling test when it is unavailable here."""
    backend = gemmzoo.get_backend(name)
    reason = backend.unavailable_reason()
    if reason is not None:
        pytest.skip(f"{name} unavailable: {reason}")
    return backend
