"""gemmzoo's conformance suite on this plugin's backend.

gemmzoo ships the tests; importing them here is all a plugin needs. ``--gemmzoo-backend numpy-blocked``
(set in pyproject.toml's addopts) limits them to this plugin's backend.
"""

from gemmzoo.testing import test_bad_input_is_a_clear_error, test_conformance

__all__ = ["test_bad_input_is_a_clear_error", "test_conformance"]
