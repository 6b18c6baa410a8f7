"""The conformance suite over every registered, available backend (``--gemmzoo-backend`` narrows it)."""

from gemmzoo.testing import test_bad_input_is_a_clear_error, test_conformance

__all__ = ["test_bad_input_is_a_clear_error", "test_conformance"]
