"""``torch-compile`` and ``torch-compile-cuda``: ``torch.mm`` compiled by ``torch.compile``
(TorchInductor, max-autotune), one compilation per problem.

Each problem gets a compiled function of its own (a fresh copy of the product's code object, so
that Dynamo's per-code cache and its recompile limit see one problem each), compiled with
``dynamic=False`` and autotuned for exactly that problem when :meth:`prepare` first calls it. A
plan's calls then run the compiled code with Dynamo's guard check in front: compilation and
autotuning never fall in a timed call.

- ``torch-compile`` (CPU): ``mode="max-autotune"``. For operands that are not constants, Inductor's
  choice on the CPU is ATen's ``mm`` (its C++ GEMM template wants frozen weights), so this backend
  measures what ``torch.compile`` costs a CPU caller and lets the suite check its path in CI.
- ``torch-compile-cuda``: ``mode="max-autotune-no-cudagraphs"`` (Inductor's Triton templates
  against cuBLAS, per problem). Inductor reads cuBLAS's precision switches when it compiles (TF32
  in its templates) and cuBLAS reads them when it runs, so each dtype's switches
  (:mod:`gemmzoo_torch.precision`) are held at gemmzoo's values for the compilation and for every
  call: float32 is IEEE, ``tf32`` is its own mode. The switches' lock is held while a problem
  compiles, so gemmzoo's other torch products in other threads wait for the compilation.

torch is imported inside the methods only.
"""

from __future__ import annotations

import os
import shutil
import types
from collections.abc import Callable
from typing import Any

from gemmzoo import Backend, TF32Array
from gemmzoo.arrays.torch_tensors import TorchTensors
from gemmzoo.contract.backend import dtype_name
from gemmzoo_torch.backend import cuda_missing_reason, torch_missing_reason


def _product(a: Any, b: Any) -> Any:
    import torch

    return torch.mm(a, b)


def _fresh_product() -> Callable[[Any, Any], Any]:
    """A function computing ``torch.mm(a, b)`` with a code object of its own."""
    return types.FunctionType(_product.__code__.replace(), _product.__globals__, "_product")


def _compiler_missing() -> str | None:
    """Why Inductor cannot build CPU code here, or ``None`` (it calls ``$CXX`` or a C++ compiler on
    the ``PATH``)."""
    named = os.environ.get("CXX")
    if named and shutil.which(named):
        return None
    if any(shutil.which(name) for name in ("c++", "g++", "clang++")):
        return None
    return "TorchInductor needs a C++ compiler on the CPU (none of $CXX, c++, g++, clang++ found)"


class TorchCompileBackend(TorchTensors, Backend):
    """``torch.compile(torch.mm, mode="max-autotune", dynamic=False)`` on CPU tensors, compiled
    once per problem."""

    compiles_per_problem = True

    name = "torch-compile"
    requires = ("torch",)
    prior_routes = ()
    device = "cpu"
    #: The backend that runs ATen's ``mm`` on this device.
    aten_backend = "torch-cpu"
    dtypes = frozenset({"float16", "bfloat16", "float32", "float64"})
    #: ``torch.compile``'s mode.
    mode = "max-autotune"

    def __init__(self) -> None:
        self._plans = {}

    def unavailable_reason(self) -> str | None:
        return torch_missing_reason() or _compiler_missing()

    @property  # type: ignore[override]
    def searches_over(self) -> tuple[str, ...]:
        """ATen's ``mm`` backend, while Inductor's GEMM autotuning includes ATen (its default;
        ``TORCHINDUCTOR_MAX_AUTOTUNE_GEMM_BACKENDS`` can leave it out)."""
        chosen = os.environ.get("TORCHINDUCTOR_MAX_AUTOTUNE_GEMM_BACKENDS", "ATEN")
        return (self.aten_backend,) if "ATEN" in chosen.upper().replace(" ", "").split(",") else ()

    def matmul(self, a: Any, b: Any) -> Any:
        self.check_operands(a, b)
        return self.remembered_plan(a, b)(a, b)

    def _held(self, dtype: str) -> Callable[[Callable[[Any, Any], Any], Any, Any], Any] | None:
        """How to launch with ``dtype``'s precision switches held, or ``None`` when nothing is held."""
        return None

    def prepare(self, a: Any, b: Any) -> Callable[[Any, Any], Any]:
        """Compile and autotune ``torch.mm`` for this problem (the first call does it), then return
        the compiled function."""
        import torch

        self.check_operands(a, b)
        dtype = dtype_name(a)
        compiled = torch.compile(_fresh_product(), mode=self.mode, dynamic=False, fullgraph=True)
        held = self._held(dtype)
        tf32 = dtype == "tf32"
        x, y = (a.data, b.data) if tf32 else (a, b)
        # Compiled under the caller's grad mode (part of Dynamo's guards), as the plan will run.
        if held is None:
            compiled(x, y)
        else:
            held(compiled, x, y)
        if held is None:
            return compiled
        if tf32:
            def run_tf32(a: Any, b: Any) -> Any:
                return TF32Array(held(compiled, a.data, b.data))
            return run_tf32

        def run(a: Any, b: Any) -> Any:
            return held(compiled, a, b)

        return run


class TorchCompileCudaBackend(TorchCompileBackend):
    """``torch.compile(torch.mm, mode="max-autotune-no-cudagraphs", dynamic=False)`` on CUDA
    tensors, compiled and autotuned once per problem, cuBLAS's switches held at gemmzoo's values."""

    name = "torch-compile-cuda"
    requires = ("torch", "triton")
    suite_compiles = True  # Inductor compiles and autotunes each case of the suite
    device = "cuda"
    aten_backend = "torch"
    dtypes = frozenset({"float16", "bfloat16", "float32", "tf32", "float64"})
    mode = "max-autotune-no-cudagraphs"

    def unavailable_reason(self) -> str | None:
        missing = cuda_missing_reason()
        if missing:
            return missing
        import importlib.util

        if importlib.util.find_spec("triton") is None:
            return "TorchInductor needs triton on CUDA (pip install triton)"
        return None

    def _held(self, dtype: str) -> Callable[[Callable[[Any, Any], Any], Any, Any], Any] | None:
        from gemmzoo_torch.precision import _launch_held, _switches, lock

        switches = _switches(dtype)
        if not switches:
            return None

        def held(launch: Callable[[Any, Any], Any], a: Any, b: Any) -> Any:
            with lock:
                return _launch_held(launch, a, b, switches)

        return held

    def synchronize(self) -> None:
        import torch

        torch.cuda.synchronize()
