"""torch.mm (torch.matmul's product of two matrices) on the CPU and on CUDA (cuBLAS), with TF32 as
a per-call mode on CUDA.

On CUDA the cuBLAS precision switches each dtype needs are held only while gemmzoo's product
launches, under one lock: see :mod:`gemmzoo_torch.precision`.
"""

from __future__ import annotations

import functools
import importlib.util
from collections.abc import Callable
from typing import Any

from gemmzoo import Backend
from gemmzoo.arrays.torch_tensors import TorchTensors
from gemmzoo.contract.backend import declare_torch_mm, dtype_name, self_checking
from gemmzoo_torch import fp8
from gemmzoo_torch.classes import TorchClasses
from gemmzoo_torch.precision import needless_switches, runner

CPU_TORCH_HINT = "pip install torch --index-url https://download.pytorch.org/whl/cpu"
CUDA_TORCH_HINT = "pip install 'gemmzoo[torch]'"


def torch_missing_reason(cuda: bool = False) -> str | None:
    """Why torch cannot be imported here, or ``None``; the hint installs the CPU build (a few
    hundred MB) for a CPU backend and PyPI's CUDA build (several GB) only for a CUDA one."""
    if importlib.util.find_spec("torch") is None:
        return f"torch is not installed ({CUDA_TORCH_HINT if cuda else CPU_TORCH_HINT})"
    return None


def cuda_missing_reason() -> str | None:
    """Why torch cannot compute on a CUDA GPU here (not installed, or no device visible), or ``None``."""
    missing = torch_missing_reason(cuda=True)
    if missing:
        return missing
    import torch

    if not torch.cuda.is_available():
        build = "a CPU-only build" if torch.version.cuda is None else f"CUDA {torch.version.cuda}"
        return f"no CUDA device visible to torch {torch.__version__} ({build})"
    return None


class TorchCpuBackend(TorchClasses, TorchTensors, Backend):
    """``torch.mm`` on CPU tensors; ``torch.matmul`` for batched products and
    ``torch._grouped_mm`` (or a loop of products) for grouped ones (:mod:`gemmzoo_torch.classes`)."""

    name = "torch-cpu"
    requires = ("torch",)
    prior_routes = ({"device": "cpu", "library": "torch"},)
    device = "cpu"
    dtypes = frozenset({"float16", "bfloat16", "float32", "float64"})
    classes = frozenset({"gemm", "batched", "grouped"})

    def unavailable_reason(self) -> str | None:
        return torch_missing_reason()

    @property
    def library_product(self) -> str | None:
        """``"torch"``: the product is ``torch.mm`` (on CUDA under precision switches of its own:
        :class:`TorchBackend`); ``None`` for a subclass with a product of its own."""
        own = type(self).matmul in (TorchCpuBackend.matmul, TorchBackend.matmul)
        return "torch" if own else None

    def matmul(self, a: Any, b: Any) -> Any:
        import torch

        # torch.mm rejects what is not two matrices of one dtype; that error is then said as
        # check_operands says it, naming the shapes.
        try:
            if type(a) is type(b) and a.dtype in self._torch_dtypes:
                return torch.mm(a, b)
        except Exception:
            self.check_operands(a, b)
            raise
        self.check_operands(a, b)
        return torch.mm(a, b)

    @functools.cached_property
    def _torch_dtypes(self) -> frozenset[Any]:
        """The torch dtypes of the declared dtypes: operands of these go straight to torch."""
        import torch

        return frozenset(getattr(torch, name) for name in self.dtypes if hasattr(torch, name))

    def prepare(self, a: Any, b: Any) -> Callable[[Any, Any], Any]:
        """``torch.mm`` itself (``torch.matmul``'s product of two matrices): nothing is left to do
        per call, and torch rejects a B of another dtype or device."""
        if type(self).matmul is not TorchCpuBackend.matmul:  # a subclass's own product: plan through it
            return super().prepare(a, b)
        # two matrices of one declared dtype whose K agree need no other check (check_operands says the rest)
        if not (type(a) is type(b) and a.dtype in self._torch_dtypes and b.dtype == a.dtype
                and a.dim() == 2 and b.dim() == 2 and a.shape[1] == b.shape[0]):
            self.check_operands(a, b)
        return self._mm

    @functools.cached_property
    def _mm(self) -> Callable[[Any, Any], Any]:
        """``torch.mm``, declared (once) to be itself and to reject a B of another dtype or device."""
        import torch

        return declare_torch_mm(self_checking(torch.mm))


class TorchBackend(TorchCpuBackend):
    """``torch.mm`` on CUDA tensors: cuBLAS. ``float32`` is IEEE; ``tf32`` is its own mode.

    ``float8_e4m3fn`` (on GPUs of capability 8.9 and later) goes through ``torch._scaled_mm`` with
    fp32 promotion of partial sums, C in bfloat16: see :mod:`gemmzoo_torch.fp8`.

    Batched, scaled (``torch._scaled_mm`` tensorwise and rowwise) and grouped
    (``torch._grouped_mm``) products: see :mod:`gemmzoo_torch.classes`.
    """

    name = "torch"
    prior_routes = ({"device": "cuda", "library": "torch"},)
    device = "cuda"
    classes = frozenset({"gemm", "batched", "scaled", "grouped"})

    @property  # type: ignore[override]
    def dtypes(self) -> frozenset[str]:
        base = frozenset({"float16", "bfloat16", "float32", "tf32", "float64"})
        # fp8 is declared until torch is loaded (registration must not load it), then only on a
        # GPU with fp8 tensor cores: availability, which every user asks first, loads torch.
        return base if fp8.fp8_device_ready() is False else base | {"float8_e4m3fn"}

    def unavailable_reason(self) -> str | None:
        return cuda_missing_reason()

    def __init__(self) -> None:
        self._runs: dict[Any, Callable[[Any, Any], Any]] = {}

    def _run(self, dtype: str, without: tuple[str, ...] = ()) -> Callable[[Any, Any], Any]:
        """The launcher for ``dtype`` (see :mod:`gemmzoo_torch.precision`), less the switches named
        in ``without``, built once.

        The full launcher is kept under the operands' own dtype object too (torch's dtype, or
        ``"tf32"`` for :class:`gemmzoo.TF32Array`), which is how :meth:`matmul` looks it up —
        except for fp8: its launcher pads K, so a K that does not match would not be rejected by
        torch, and :meth:`matmul` checks such operands first. The other launchers are declared
        self-checking (:func:`gemmzoo.contract.backend.self_checking`) when they are built.
        """
        key = (dtype, without) if without else dtype
        try:
            return self._runs[key]
        except KeyError:
            import torch

            if dtype == "float8_e4m3fn":
                return fp8.scaled_matmul  # converts the operands first: not self-checking
            run = self._runs[key] = self_checking(runner(dtype, without))  # torch.mm refuses a B that differs
            if dtype != "tf32" and not without:
                self._runs[getattr(torch, dtype)] = run
            return run

    def matmul(self, a: Any, b: Any) -> Any:
        # Operands of a dtype met before go straight to its launcher; torch.mm itself rejects
        # operands that are not matrices, or whose K, dtype or device do not match, and that error
        # is then said as check_operands says it. Only one array type is checked here.
        try:
            run = self._runs.get(a.dtype) if type(a) is type(b) else None
            if run is not None:
                return run(a, b)
        except Exception:
            self.check_operands(a, b)
            raise
        self.check_operands(a, b)
        return self._run(dtype_name(a))(a, b)

    def prepare(self, a: Any, b: Any) -> Callable[[Any, Any], Any]:
        """The dtype's launcher: the precision switches are checked, and set only when they differ.
        For float16 and bfloat16, the reduced-precision switch is left alone where it does not
        change this problem's product (:func:`gemmzoo_torch.precision.needless_switches` probes that
        once, with random operands of the problem's shapes and strides).

        torch rejects a B of another dtype or device, except through fp8's launcher (it converts
        the operands before ``torch._scaled_mm`` sees them), which is not declared self-checking.
        """
        if type(self).matmul is not TorchBackend.matmul:  # a subclass's own product: plan through it
            return super().prepare(a, b)
        self.check_operands(a, b)
        dtype = dtype_name(a)
        if dtype == "float8_e4m3fn":  # a plan of its own: copies decided once, buffers kept
            return fp8.scaled_plan(a, b)
        return self._run(dtype, needless_switches(dtype, a, b))

    def synchronize(self) -> None:
        import torch

        torch.cuda.synchronize()
