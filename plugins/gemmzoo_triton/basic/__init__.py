"""``triton-naive`` and ``triton-tiled``: the readable kernels the tuned ones are measured against."""
