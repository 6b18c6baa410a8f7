"""What every Triton kernel family shares: where the backends run (:mod:`.env`), the backend base
(:mod:`.backend`), Hopper facts (:mod:`.hopper`), the bound launch (:mod:`.launch`) and the only
use of Triton's internals (:mod:`.triton_internals`), autotuning (:mod:`.autotune`), the tile order
(:mod:`.tile_order`), the Gluon kernels' pieces (:mod:`.gluon_parts`) and aligned copies
(:mod:`.padding`, :mod:`.aligned`, :mod:`.copy_kernel`). Nothing here imports a kernel family."""
