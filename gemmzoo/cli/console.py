"""The rich consoles the commands print to."""

from __future__ import annotations

from rich.console import Console

console = Console(highlight=False)
errors = Console(stderr=True, highlight=False)
