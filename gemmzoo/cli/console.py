"""The rich consoles the commands print to."""

from __future__ import annotations

from rich.console import Console

console = Console(highlight=False)
errors = Console(stderr=True, highlight=False)
for _shown in (console, errors):
    _shown.soft_wrap = not _shown.is_terminal  # piped or redirected: a message is one line, never wrapped


def messages(fmt: str) -> Console:
    """Where a command's progress and status lines go: standard output under a table, standard
    error when standard output carries data (``--format plain|json|csv``)."""
    return console if fmt == "table" else errors
