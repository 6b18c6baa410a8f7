"""The float64 reference of a GPU result, computed on the GPU.

``gemmzoo bench``, ``gemmzoo tune`` and the pytest benchmarks judge every result before timing it
(:func:`gemmzoo.conformance.judge.judge_result`, the conformance suite's judge), against the
float64 products ``R = A·B`` and ``|A|·|B|`` of exactly the values the backend received. On the
host those two products are O(M·N·K) float64 work: for large shapes about as long as the timing
itself on a 16-core host, and several GPU workers on one host compete for its cores. Here both run
on the GPU that holds the operands (cuBLAS DGEMM: tens of TFLOPS on a data-centre GPU, a few
milliseconds for 4096³) and only ``R`` and ``|A|·|B|`` come back, O(M·N); the judge then compares
every element on the host exactly as for any other backend.

Why a float64 product rather than a randomized projection (Freivalds: compare ``C·x`` with
``A·(B·x)``, O(n²)): the conformance bound is per element, ``|C_ij - R_ij| <= bound_ij``. A
projection only bounds each row's weighted sum, ``|((C - R)·x)_i| <= (bound·|x|)_i``, whose
tolerance is the sum of N elements' bounds: one element a few times outside its own bound hides
in it, and the NaN/Inf pattern the judge checks has no projected counterpart. The float64 product
on the GPU keeps the bound's meaning exactly, at a cost the GPU pays in milliseconds.

The operands are taken as the backend holds them, converted to float64 on the device (CuPy arrays
reach torch by DLPack, without a copy), through torch, else CuPy. :func:`device_reference` returns
``None`` when neither can take the arrays, or when the float64 temporaries would not fit in half
the free GPU memory; the caller then computes the reference on the host.
"""

from __future__ import annotations

from typing import Any

import numpy as np

#: Device memory the reference may use, as a share of what is free: A and B in float64, their
#: absolute values, and the two M×N float64 products.
MEMORY_SHARE = 0.5


def _torch_view(x: Any) -> Any | None:
    """``x`` as a CUDA torch tensor (no copy), or ``None`` when torch cannot see it."""
    try:
        import torch
    except ImportError:
        return None
    if isinstance(x, torch.Tensor):
        return x if x.is_cuda else None
    if not torch.cuda.is_available():
        return None
    try:
        found = torch.from_dlpack(x)
    except Exception:  # an array type or dtype DLPack cannot carry
        return None
    return found if found.is_cuda else None


def _fits(m: int, n: int, k: int, free_bytes: int) -> bool:
    return 8 * (2 * (m * k + k * n) + 2 * m * n) <= MEMORY_SHARE * free_bytes


def torch_reference(a: Any, b: Any) -> tuple[np.ndarray, np.ndarray]:
    """``(A·B, |A|·|B|)`` in float64 on the host, computed with torch where the tensors are (any
    device torch runs on); non-finite entries count as 0 in the second, as on the host."""
    import torch

    with torch.no_grad():
        a64, b64 = a.to(torch.float64), b.to(torch.float64)
        product = (a64 @ b64).cpu().numpy()
        magnitude = (torch.nan_to_num(a64, nan=0.0, posinf=0.0, neginf=0.0).abs_()
                     @ torch.nan_to_num(b64, nan=0.0, posinf=0.0, neginf=0.0).abs_())
        return product, magnitude.cpu().numpy()


def cupy_reference(a: Any, b: Any) -> tuple[np.ndarray, np.ndarray]:
    """As :func:`torch_reference`, with CuPy on the current device."""
    import cupy

    a64, b64 = a.astype(cupy.float64), b.astype(cupy.float64)
    product = cupy.asnumpy(a64 @ b64)
    magnitude = cupy.abs(cupy.nan_to_num(a64, nan=0.0, posinf=0.0, neginf=0.0)) @ \
        cupy.abs(cupy.nan_to_num(b64, nan=0.0, posinf=0.0, neginf=0.0))
    return product, cupy.asnumpy(magnitude)


def device_reference(a: Any, b: Any) -> tuple[np.ndarray, np.ndarray] | None:
    """``(A·B, |A|·|B|)`` in float64 (host arrays) for the native CUDA operands A and B, computed
    on their GPU; ``None`` when that cannot be done there (see the module docstring)."""
    try:
        m, k = a.shape
        n = b.shape[1]
        views = [_torch_view(x) for x in (a, b)]
        if all(v is not None for v in views):
            import torch

            free, _total = torch.cuda.mem_get_info(views[0].device)
            if not _fits(m, n, k, free):
                return None
            with torch.cuda.device(views[0].device):
                return torch_reference(*views)
        try:
            import cupy
        except ImportError:
            return None
        if not all(isinstance(x, cupy.ndarray) for x in (a, b)):
            return None
        free, _total = cupy.cuda.runtime.memGetInfo()
        return cupy_reference(a, b) if _fits(m, n, k, free) else None
    except Exception:  # e.g. a dtype the framework cannot convert: the host reference still works
        return None
