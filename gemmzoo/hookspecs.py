"""The hooks a gemmzoo plugin can implement.

A plugin is a module (or any object) named by an entry point in the ``gemmzoo`` group. It
implements hooks by decorating functions with :data:`gemmzoo.hookimpl`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pluggy

hookspec = pluggy.HookspecMarker("gemmzoo")
hookimpl = pluggy.HookimplMarker("gemmzoo")


@hookspec
def gemmzoo_register_backends(register: Callable[[Any], None]) -> None:
    """Call ``register(backend)`` once per :class:`gemmzoo.Backend` instance this plugin provides.

    Building an instance must be cheap: import torch, cupy or triton only when the backend is
    asked whether it is available or is used.
    """


@hookspec
def gemmzoo_register_grids(register: Callable[..., None]) -> None:
    """Call ``register(name, shapes, description="")`` once per shape grid this plugin provides.

    ``shapes`` is a list of ``(M, N, K)``; the grid then works with ``gemmzoo bench --grid NAME``
    and ``pytest --pyargs gemmzoo.benchmarks --gemmzoo-grid NAME``. A built-in grid of the same name wins.
    """
