"""``triton-fp8``: float8_e4m3fn products with promoted partial sums, on a pointer kernel, a TMA
kernel or, on Hopper, a warp-specialized Gluon kernel."""
