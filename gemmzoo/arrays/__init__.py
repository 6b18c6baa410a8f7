"""One adapter per array library gemmzoo takes: keys, conversions, the torch-CuPy bridge."""
