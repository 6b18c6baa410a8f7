"""XLA's GEMM through JAX: ``jax`` on the host CPU, ``jax-cuda`` on a GPU.

Two backends rather than one whose device follows JAX's default platform: a backend's ``device``
is part of every stored measurement and of the choice ``best_backend`` makes, so it must not
change with what happens to be installed. ``jax`` pins its arrays to JAX's CPU device and works
wherever jax is installed; ``jax-cuda`` pins them to the first GPU JAX sees.

Precision is stated in each product, never in JAX's global configuration:

- float32 is IEEE fp32 math (``precision=HIGHEST``); ``tf32`` (``jax-cuda`` only) asks XLA for the
  TF32 dot algorithm (``DotAlgorithmPreset.TF32_TF32_F32``) explicitly.
- float16 and bfloat16 accumulate in float32 (``preferred_element_type=float32``), C rounded once.
- float64 needs 64-bit types, which JAX turns on with a global switch (``jax_enable_x64``). The
  backend never flips it for the process: it converts float64 operands and compiles their product
  inside JAX's scoped ``enable_x64`` context only. 64-bit arrays keep their dtype outside it.

JAX's GPU memory preallocation is turned off before JAX starts, unless the environment sets it
(see :func:`_jax`). Each problem is compiled once (``prepare`` lowers and compiles ahead of time,
so the plan's calls never compile); ``matmul`` goes through ``jax.jit``, which caches per shape
and dtype. JAX dispatches asynchronously: ``synchronize`` waits for the last product this backend
launched, and XLA runs one device's computations in order. jax is imported inside the methods only.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import os
from collections.abc import Callable
from typing import Any

import numpy as np

from gemmzoo import Backend
from gemmzoo.contract.backend import TF32Array, dtype_name

_STORAGE = {"float16": "float16", "bfloat16": "bfloat16", "float32": "float32", "tf32": "float32",
            "float64": "float64"}


def jax_missing_reason() -> str | None:
    """Why jax cannot be imported here, or ``None``."""
    if importlib.util.find_spec("jax") is None:
        return "jax is not installed (pip install 'gemmzoo[jax]')"
    return None


def _jax() -> Any:
    """The ``jax`` module. Before JAX starts its first backend, GPU memory preallocation is turned
    off (``XLA_PYTHON_CLIENT_PREALLOCATE=false``) unless the environment says otherwise: by default
    JAX takes most of a GPU's memory when it starts, and the backends compared here share the GPU
    in one process. A program that started JAX itself keeps its own setting."""
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    return importlib.import_module("jax")


def _x64() -> Any:
    """JAX's scoped switch for 64-bit types (``jax.enable_x64``; ``jax.experimental`` before 0.7)."""
    jax = _jax()

    scoped = getattr(jax, "enable_x64", None)
    if scoped is None:
        from jax.experimental import enable_x64 as scoped
    return scoped(True)


def _product(dtype: str) -> Callable[[Any, Any], Any]:
    """The traced function of ``C = A·B`` for ``dtype``, with its precision stated."""
    jax = _jax()
    jnp = jax.numpy

    if dtype in ("float16", "bfloat16"):
        def product(a: Any, b: Any) -> Any:
            return jax.lax.dot(a, b, preferred_element_type=jnp.float32).astype(a.dtype)
        return product
    if dtype == "tf32":
        precision: Any = jax.lax.DotAlgorithmPreset.TF32_TF32_F32
    else:
        precision = jax.lax.Precision.HIGHEST

    def exact(a: Any, b: Any) -> Any:
        return jax.lax.dot(a, b, precision=precision)

    return exact


def _batched_product(dtype: str) -> Callable[[Any, Any], Any]:
    """The traced function of a batched ``C = A·B`` (``jnp.matmul``'s broadcasting), with the
    precision of :func:`_product`: fp32 accumulation for 16-bit operands, IEEE fp32 otherwise."""
    jax = _jax()
    jnp = jax.numpy

    if dtype in ("float16", "bfloat16"):
        def product(a: Any, b: Any) -> Any:
            return jnp.matmul(a, b, preferred_element_type=jnp.float32).astype(a.dtype)
        return product

    def exact(a: Any, b: Any) -> Any:
        return jnp.matmul(a, b, precision=jax.lax.Precision.HIGHEST)

    return exact


class JaxBackend(Backend):
    """``jax.lax.dot`` compiled by XLA, on JAX's CPU device; batched products through
    ``jnp.matmul`` (the ``batched`` class)."""

    name = "jax"
    requires = ("jax",)
    device = "cpu"
    dtypes = frozenset({"float16", "bfloat16", "float32", "float64"})
    classes = frozenset({"gemm", "batched"})
    #: JAX's platform name for :attr:`device`.
    platform = "cpu"

    def __init__(self) -> None:
        self._jitted: dict[str, Any] = {}
        self._last: Any = None  # the newest result, which synchronize waits for

    def unavailable_reason(self) -> str | None:
        missing = jax_missing_reason()
        if missing:
            return missing
        jax = _jax()

        try:
            jax.devices(self.platform)
        except RuntimeError:
            try:
                present = ", ".join(sorted({d.platform for d in jax.devices()}))
            except RuntimeError:
                present = "none"
            return f"jax {jax.__version__} sees no {self.platform} device (platforms here: {present})"
        return None

    @functools.cached_property
    def _device(self) -> Any:
        jax = _jax()

        return jax.devices(self.platform)[0]

    def from_numpy(self, x: np.ndarray, dtype: str) -> Any:
        jax = _jax()
        jnp = jax.numpy

        self.check_dtype(dtype, np.shape(x))
        host = np.asarray(x).astype(jnp.dtype(_STORAGE[dtype]))
        if dtype == "float64":
            with _x64():
                array = jax.device_put(host, self._device)
        else:
            array = jax.device_put(host, self._device)
        return TF32Array(array) if dtype == "tf32" else array

    def to_numpy(self, y: Any) -> np.ndarray:
        array = np.asarray(y.data if isinstance(y, TF32Array) else y)
        if array.dtype.itemsize == 2:  # float16, bfloat16
            return array.astype(np.float32)
        return np.array(array, copy=True)

    def _jit(self, dtype: str) -> Any:
        """The jitted product for ``dtype``, made once (jit caches a compilation per shape)."""
        try:
            return self._jitted[dtype]
        except KeyError:
            jax = _jax()

            jitted = self._jitted[dtype] = jax.jit(_product(dtype))
            return jitted

    def matmul(self, a: Any, b: Any) -> Any:
        self.check_operands(a, b)
        dtype = dtype_name(a)
        if dtype == "tf32":
            c = self._last = self._jit(dtype)(a.data, b.data)
            return TF32Array(c)
        if dtype == "float64":
            with _x64():
                c = self._last = self._jit(dtype)(a, b)
            return c
        c = self._last = self._jit(dtype)(a, b)
        return c

    def bmm(self, a: Any, b: Any) -> Any:
        """The batched class: ``jnp.matmul``, batch dimensions broadcast, jitted per dtype."""
        from gemmzoo.problems.class_math import batched_problem

        batch, problem = batched_problem(tuple(a.shape), tuple(b.shape))
        dtype = dtype_name(a)
        if batch is None or dtype != dtype_name(b) or dtype not in self.dtypes or dtype == "tf32":
            why = problem or f"A is {dtype} and B is {dtype_name(b)}; both must have one declared dtype " \
                "(not tf32)"
            raise self.input_error("bmm", why, A=tuple(a.shape), B=tuple(b.shape))
        key = "batched-" + dtype
        jitted = self._jitted.get(key)
        if jitted is None:
            jitted = self._jitted[key] = _jax().jit(_batched_product(dtype))
        if dtype == "float64":
            with _x64():
                c = self._last = jitted(a, b)
            return c
        c = self._last = jitted(a, b)
        return c

    def prepare(self, a: Any, b: Any) -> Callable[[Any, Any], Any]:
        """XLA's executable for this problem, compiled here: a plan's call only launches it."""
        self.check_operands(a, b)
        dtype = dtype_name(a)
        tf32 = dtype == "tf32"
        x, y = (a.data, b.data) if tf32 else (a, b)
        if dtype == "float64":
            with _x64():
                compiled = self._jit(dtype).lower(x, y).compile()
        else:
            compiled = self._jit(dtype).lower(x, y).compile()

        if tf32:
            def run_tf32(a: Any, b: Any) -> Any:
                c = self._last = compiled(a.data, b.data)
                return TF32Array(c)
            return run_tf32

        def run(a: Any, b: Any) -> Any:
            c = self._last = compiled(a, b)
            return c

        return run

    def synchronize(self) -> None:
        last = self._last
        if last is not None:
            last.block_until_ready()


class JaxCudaBackend(JaxBackend):
    """``jax.lax.dot`` compiled by XLA for the first GPU JAX sees (cuBLAS or XLA's own kernels,
    as XLA decides), with ``tf32`` as its own mode."""

    name = "jax-cuda"
    device = "cuda"
    stream_ordered = False  # XLA launches on its own streams: events on torch's cannot time it
    # XLA's GPU compiler autotunes each new dot: seconds a problem, left to `gemmzoo tune`
    compiles_per_problem = True
    dtypes = frozenset({"float16", "bfloat16", "float32", "tf32", "float64"})
    platform = "gpu"
