"""gemmzoo in pytest: the plugin, pytest-benchmark fixtures and xdist support."""
