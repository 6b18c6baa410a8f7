"""Exceptions and warnings gemmzoo raises."""

from __future__ import annotations


class GemmError(Exception):
    """Base class of gemmzoo's own errors."""


class GemmInputError(GemmError, ValueError):
    """Bad input to a backend: wrong rank, mismatched shapes or dtypes, an unsupported dtype."""


class BackendUnavailableError(GemmError, RuntimeError):
    """A backend was used where it cannot run (missing package, no GPU, ...)."""


class UnknownBackendError(GemmError, KeyError):
    """A backend name that no plugin registered."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class PluginError(GemmError):
    """A plugin failed to load or register, and GEMMZOO_STRICT_PLUGINS asks for an error.

    ``traceback`` is the text of the plugin's exception's traceback when it raised one.
    """

    def __init__(self, message: str, *, traceback: str | None = None) -> None:
        super().__init__(message)
        self.traceback = traceback


class PluginWarning(UserWarning):
    """A plugin failed to load or register; the other plugins keep working."""
