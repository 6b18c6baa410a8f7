"""What gemmzoo knows of the array libraries it takes: which library an array type belongs to,
a gemmzoo dtype name of an array, its device, which library a backend computes on, and how an
array moves from one library to another (zero-copy on one device, or to the host).

Each answer is learned once per type (or backend and dtype, or pair of libraries) and kept for the
process: these are facts of the loaded libraries and registered backends, which are the process's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from gemmzoo.contract.backend import TF32Array, declare_torch_mm, self_checking
from gemmzoo.contract.dtypes import DTYPES
from gemmzoo.plugins.registry import probe_timeout
from gemmzoo.plugins.watchdog import call as watched

_KINDS: dict[type, str] = {}
_DTYPE_NAMES: dict[Any, str | None] = {}
# by (id(backend), dtype): the backend itself is kept beside the answer, and checked, so that a
# new backend at a dead one's address is never given its answer
_NATIVE: dict[tuple[int, str], tuple[Any, str | None]] = {}
_LIBRARIES = ("numpy", "torch", "cupy")


def array_kind(array_type: type) -> str | None:
    """``"numpy"``, ``"torch"`` or ``"cupy"`` for those libraries' array types, else ``None``."""
    try:
        return _KINDS[array_type]
    except KeyError:
        root = array_type.__module__.partition(".")[0]
        kind = root if root in _LIBRARIES and hasattr(array_type, "__dlpack__") else None
        if kind == "torch" and not _is_tensor_type(array_type):
            kind = None
        _KINDS[array_type] = kind  # type: ignore[assignment]
        return kind


def _is_tensor_type(array_type: type) -> bool:
    import torch

    if not issubclass(array_type, torch.Tensor):
        return False
    # torch's own product (own_product's), declared what it is once, as torch's tensors are first met
    declare_torch_mm(self_checking(torch.mm))
    return True


def dtype_of(array: Any) -> str | None:
    """The gemmzoo dtype name of a NumPy, CuPy or torch array, or ``None`` if it is not one."""
    key = array.dtype
    try:
        return _DTYPE_NAMES[key]
    except KeyError:
        name = str(key).removeprefix("torch.")
        found = name if name in DTYPES and name != "tf32" else None
        _DTYPE_NAMES[key] = found  # type: ignore[assignment]
        return found


def device_of(array: Any, kind: str) -> str:
    """``"cpu"`` or ``"cuda"``."""
    if kind == "numpy":
        return "cpu"
    if kind == "cupy":
        return "cuda"
    return "cuda" if array.is_cuda else "cpu"


def native_kind(backend: Any, dtype: str) -> str | None:
    """Which library's arrays ``backend`` computes on for ``dtype`` (learned once from a 1x1
    ``from_numpy``), or ``None`` when they are none of NumPy, torch and CuPy, or when the probe
    raises or overruns the watchdog's limit (:mod:`gemmzoo.plugins.watchdog`; a backend of another
    distribution only)."""
    key = (id(backend), dtype)
    entry = _NATIVE.get(key)
    if entry is not None and entry[0] is backend:
        return entry[1]
    try:
        probe = watched(backend, "from_numpy(1x1)", backend.from_numpy, np.ones((1, 1), dtype=np.float32),
                        dtype, timeout=probe_timeout(backend))
    except Exception:  # a broken backend computes on nothing gemmzoo can hand it directly
        probe = None
    if isinstance(probe, TF32Array):
        probe = probe.data
    kind = array_kind(type(probe))
    _NATIVE[key] = (backend, kind)
    return kind


def native_kind_known(backend: Any, dtype: str) -> bool:
    """Whether :func:`native_kind` answers for ``backend`` and ``dtype`` from what it learned,
    without a probe."""
    entry = _NATIVE.get((id(backend), dtype))
    return entry is not None and entry[0] is backend


#: The dtypes each array library's own matrix product takes directly, by library: where
#: :func:`own_product` answers. NumPy's float16 product is left out (it does not reach BLAS and
#: runs far slower than the ``numpy`` backend's float32 detour, which is checked); fp8 operands
#: have no plain product in either library, and ``tf32`` is gemmzoo's own mode
#: (:class:`~gemmzoo.TF32Array`), not a library's array.
OWN_PRODUCT_DTYPES: dict[str, frozenset[str]] = {
    "torch": frozenset({"float16", "bfloat16", "float32", "float64"}),
    "numpy": frozenset({"float32", "float64"}),
}
#: What :func:`own_product` calls, by library, as a caller would name it.
OWN_PRODUCT_NAMES = {"torch": "torch.mm", "numpy": "numpy.matmul"}


def has_own_product(kind: str | None, dtype: str) -> bool:
    """Whether :func:`own_product` answers for arrays of library ``kind`` holding ``dtype``."""
    return dtype in OWN_PRODUCT_DTYPES.get(kind or "", ())


def own_product(kind: str, dtype: str) -> Any:
    """The array library's own product of two matrices, called as it is, under whatever precision
    switches its caller has set: ``torch.mm`` (what ``torch.matmul`` calls for two matrices; it
    rejects a B of another dtype or device itself) or ``numpy.matmul``. ``None`` where
    :func:`has_own_product` says no."""
    if not has_own_product(kind, dtype):
        return None
    if kind == "numpy":
        return np.matmul
    import torch

    if torch.Tensor not in _KINDS:  # learning torch's tensor type declares torch.mm
        array_kind(torch.Tensor)
    return torch.mm


def _converter(source: str, target: str) -> Callable[[Any], Any]:
    """A zero-copy conversion of a same-device array from library ``source`` to ``target``."""
    if target == "numpy":
        if source == "torch":
            return lambda x: x.numpy()
        return np.from_dlpack
    if target == "torch":
        import torch

        if source == "numpy":
            return torch.from_numpy
        return torch.from_dlpack
    import cupy

    return cupy.from_dlpack


_CONVERTERS: dict[tuple[str, str], Callable[[Any], Any]] = {}


def convert(x: Any, source: str, target: str) -> Any:
    """``x``, an array of library ``source``, as an array of library ``target`` on the same device,
    without a copy (``x`` itself when the libraries are one)."""
    if source == target:
        return x
    try:
        conversion = _CONVERTERS[source, target]
    except KeyError:
        conversion = _CONVERTERS[source, target] = _converter(source, target)
    return conversion(x)


def to_host(x: Any, kind: str) -> np.ndarray:
    """``x``, an array of library ``kind``, as a NumPy array on the host (bfloat16 as float32,
    float8_e4m3fn as ml_dtypes' E4M3)."""
    if kind == "numpy":
        return x
    if kind == "cupy":
        import cupy

        return cupy.asnumpy(x)
    import torch

    if x.dtype == torch.bfloat16:  # NumPy has no bfloat16; float32 holds every value exactly
        x = x.float()
    if x.dtype == getattr(torch, "float8_e4m3fn", None):  # nor float8: ml_dtypes' array of its bytes
        from gemmzoo.contract.fp8 import E4M3

        return x.view(torch.uint8).cpu().numpy().view(E4M3)
    return x.cpu().numpy()
