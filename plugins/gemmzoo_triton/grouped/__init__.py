"""``triton-grouped``: a router (:mod:`.plan`) over four kernels: the tutorial's pointer kernel
(:mod:`.pointer_kernel`), the TMA kernel (:mod:`.tma_kernel`), and on Hopper the warp-specialized
Gluon kernel for fp16 and bf16 (:mod:`.gluon_kernel`, with :mod:`.split_wave`) and the Gluon tf32
kernel (:mod:`.tf32_kernel`)."""
