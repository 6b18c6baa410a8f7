"""The Triton backends beyond the shared suite: the fused epilogue, errors, availability, imports."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from backends_here import available

import gemmzoo
from gemmzoo import GemmInputError
from gemmzoo.conformance import error_bound

TRITON_BACKENDS = ("triton-naive", "triton-tiled", "triton-grouped")


def reference(a: np.ndarray, b: np.ndarray, k: int, dtype: str):
    """The float64 product and its per-element error bound."""
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    ref = a64 @ b64
    return ref, error_bound(dtype, k, ref, np.abs(a64) @ np.abs(b64))


ACTIVATIONS = {"leaky_relu": lambda x: np.where(x >= 0, x, 0.01 * x), "relu": lambda x: np.maximum(x, 0.0)}


def run_python(code: str, env: dict[str, str]) -> str:
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.mark.parametrize("activation", ["leaky_relu", "relu"])
@pytest.mark.parametrize("layout", ["NN", "TN"])
def test_fused_activation_matches_float64_reference(activation, layout):
    backend = available("triton-grouped")
    rng = np.random.default_rng(11)
    m, n, k = 45, 70, 53
    for dtype in sorted(backend.dtypes):
        a_values, b_values = rng.standard_normal((m, k)), rng.standard_normal((k, n))
        a = (backend.from_numpy(np.ascontiguousarray(a_values.T), dtype).T if layout[0] == "T"
             else backend.from_numpy(a_values, dtype))
        b = backend.from_numpy(b_values, dtype)
        a_host, b_host = backend.to_numpy(a), backend.to_numpy(b)
        c = backend.to_numpy(backend.matmul(a, b, activation=activation))
        product, bound = reference(a_host, b_host, k, dtype)
        ref = ACTIVATIONS[activation](product)  # both shrink errors: |f(x) - f(y)| <= |x - y|
        assert c.shape == (m, n)
        error = np.abs(c.astype(np.float64) - ref)
        assert np.all(error <= bound), f"{dtype}: {int((error > bound).sum())} elements outside the bound"
        negative = product < -bound
        assert negative.any() and np.all(c[negative] < 0 if activation == "leaky_relu" else c[negative] == 0)


def test_no_activation_equals_plain_matmul():
    backend = available("triton-grouped")
    rng = np.random.default_rng(5)
    a = backend.from_numpy(rng.standard_normal((33, 21)), "float32")
    b = backend.from_numpy(rng.standard_normal((21, 40)), "float32")
    plain = backend.to_numpy(backend.matmul(a, b))
    assert np.array_equal(backend.to_numpy(backend.matmul(a, b, activation=None)), plain)
    fused = backend.to_numpy(backend.matmul(a, b, activation="leaky_relu"))
    assert np.array_equal(fused, np.where(plain >= 0, plain, fused))  # positives untouched
    assert np.any(fused != plain)


def test_unknown_activation_is_a_clear_error():
    backend = available("triton-grouped")
    rng = np.random.default_rng(3)
    a = backend.from_numpy(rng.standard_normal((4, 6)), "float32")
    b = backend.from_numpy(rng.standard_normal((6, 5)), "float32")
    with pytest.raises(GemmInputError) as raised:
        backend.matmul(a, b, activation="gelu")
    message = str(raised.value)
    assert "triton-grouped" in message and "'gelu'" in message and "leaky_relu" in message
    assert "(4, 6)" in message and "(6, 5)" in message


def test_unavailable_without_gpu_or_interpreter_says_why():
    pytest.importorskip("torch")
    pytest.importorskip("triton")
    env = {key: value for key, value in os.environ.items() if key != "TRITON_INTERPRET"}
    env["CUDA_VISIBLE_DEVICES"] = ""  # hides any GPU from torch in the child
    code = (
        "import gemmzoo\n"
        "for name in ('triton-naive', 'triton-tiled', 'triton-grouped'):\n"
        "    print(gemmzoo.get_backend(name).unavailable_reason())\n"
    )
    reasons = run_python(code, env).splitlines()
    assert len(reasons) == 3
    for reason in reasons:
        assert "no CUDA GPU" in reason and "TRITON_INTERPRET=1" in reason, reason


def test_import_and_construction_load_neither_torch_nor_triton():
    code = (
        "import sys, gemmzoo_triton\n"
        "from gemmzoo_triton import TritonGroupedBackend, TritonNaiveBackend, TritonTiledBackend\n"
        "backends = [cls() for cls in (TritonNaiveBackend, TritonTiledBackend, TritonGroupedBackend)]\n"
        "print([(b.name, b.device, sorted(b.dtypes)) for b in backends])\n"
        "print(sorted(m for m in ('torch', 'triton') if m in sys.modules))\n"
    )
    lines = run_python(code, dict(os.environ)).splitlines()
    assert lines[-1] == "[]", lines


def test_interpreter_mode_runs_on_the_cpu_with_the_dtypes_it_computes():
    pytest.importorskip("torch")
    pytest.importorskip("triton")
    code = (
        "import gemmzoo\n"
        "b = gemmzoo.get_backend('triton-tiled')\n"
        "print(b.device, ','.join(sorted(b.dtypes)), b.unavailable_reason())\n"
    )
    on_interpreter = run_python(code, {**os.environ, "TRITON_INTERPRET": "1"})
    assert on_interpreter == "cpu float16,float32 None"
    without = {key: value for key, value in os.environ.items() if key != "TRITON_INTERPRET"}
    assert run_python(code, without).split()[:2] == ["cuda", "bfloat16,float16,float32,tf32"]


# The fast path ------------------------------------------------------------------------------------


def test_device_and_dtypes_are_decided_once_per_instance():
    for name in TRITON_BACKENDS:
        backend = gemmzoo.get_backend(name)
        assert {"device", "dtypes"} <= set(vars(backend)), name  # attributes, not properties
        assert backend.device in ("cpu", "cuda") and backend.dtypes


@pytest.mark.parametrize("name", TRITON_BACKENDS)
def test_prepared_plan_matches_matmul_on_new_operands_each_call(name):
    """A plan made on one pair of operands, run on others like them (new values, new addresses,
    a view whose start is not 16-byte aligned): every element against the float64 bound, and
    bitwise equal to matmul."""
    backend = available(name)
    rng = np.random.default_rng(21)
    m, n, k = 19, 45, 37
    dtype = "float16"

    def operands():
        wide = backend.from_numpy(rng.standard_normal((m, k + 1)), dtype)
        return wide[:, 1:], backend.from_numpy(rng.standard_normal((k, n)), dtype)  # A starts 2 bytes in

    run = backend.prepare(*operands())
    for _ in range(3):
        a, b = operands()
        c = run(a, b)
        ref, bound = reference(backend.to_numpy(a), backend.to_numpy(b), k, dtype)
        got = backend.to_numpy(c).astype(np.float64)
        assert c.shape == (m, n) and np.all(np.abs(got - ref) <= bound)
        assert np.array_equal(backend.to_numpy(backend.matmul(a, b)), backend.to_numpy(c))


def test_matmul_remembers_a_plan_per_problem():
    backend = available("triton-tiled")
    rng = np.random.default_rng(4)
    backend._plans.clear()
    a = backend.from_numpy(rng.standard_normal((9, 7)), "float16")
    b = backend.from_numpy(rng.standard_normal((7, 5)), "float16")
    first = backend.matmul(a, b)
    assert len(backend._plans) == 1
    plan = next(iter(backend._plans.values()))
    a2 = backend.from_numpy(rng.standard_normal((9, 7)), "float16")  # new values, same problem
    assert np.array_equal(backend.to_numpy(backend.matmul(a2, b)), backend.to_numpy(plan(a2, b)))
    assert list(backend._plans.values()) == [plan]
    other = backend.matmul(a.T, backend.from_numpy(rng.standard_normal((9, 3)), "float16"))
    assert len(backend._plans) == 2 and other.shape == (7, 3)  # a transposed A: another problem
    assert np.all(np.isfinite(backend.to_numpy(first)))


@pytest.mark.parametrize("name", TRITON_BACKENDS)
@pytest.mark.parametrize(("m", "n", "k"), [(3, 4, 0), (0, 4, 5), (3, 0, 5)])
def test_prepared_plan_of_an_empty_problem(name, m, n, k):
    backend = available(name)
    rng = np.random.default_rng(1)
    a = backend.from_numpy(rng.standard_normal((m, k)), "float32")
    b = backend.from_numpy(rng.standard_normal((k, n)), "float32")
    c = backend.to_numpy(backend.prepare(a, b)(a, b))
    assert c.shape == (m, n) and np.all(c == 0)


def test_prepare_refuses_bad_input_with_a_clear_error():
    backend = available("triton-grouped")
    rng = np.random.default_rng(3)
    a = backend.from_numpy(rng.standard_normal((4, 6)), "float32")
    b = backend.from_numpy(rng.standard_normal((5, 5)), "float32")
    with pytest.raises(GemmInputError, match=r"triton-grouped.*\(4, 6\).*\(5, 5\)"):
        backend.prepare(a, b)
    with pytest.raises(GemmInputError, match="'gelu'"):
        backend.prepare(a, a.T, activation="gelu")


# On a GPU ----------------------------------------------------------------------------------------


@pytest.mark.gpu
def test_bound_launch_runs_the_compiled_kernel_per_alignment():
    """After a plan's first calls, its launches skip triton.jit's launch path: one compiled kernel
    per alignment of the operands' addresses, each giving the right product."""
    backend = available("triton-tiled")
    import torch

    from gemmzoo_triton.core import launch as launcher

    launches = []
    original = launcher.BoundLaunch.__call__

    def counting(self, *args):
        launches.append(self)
        return original(self, *args)

    rng = np.random.default_rng(6)
    a_wide = backend.from_numpy(rng.standard_normal((64, 97)), "float16")
    b = backend.from_numpy(rng.standard_normal((96, 80)), "float16")
    aligned, shifted = a_wide[:, :96], a_wide[:, 1:]
    try:
        launcher.BoundLaunch.__call__ = counting
        run = backend.prepare(aligned, b)
        for a in (aligned, shifted, aligned, shifted):
            c = run(a, b)
            expected = (a.double() @ b.double()).to(torch.float16)
            assert torch.allclose(c.double(), expected.double(), rtol=2e-2, atol=0.25)
    finally:
        launcher.BoundLaunch.__call__ = original
    assert len({id(bound) for bound in launches}) == 1
    assert set(launches[0]._compiled) == {(True, True, True), (False, True, True)}


# On a GPU ----------------------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("name", TRITON_BACKENDS)
def test_tuned_sizes_on_gpu(name):
    """A problem large enough that triton-grouped autotunes, with ragged M, N and K and a
    transposed B: every element against the float64 bound, for every declared dtype."""
    backend = available(name)
    rng = np.random.default_rng(17)
    m, n, k = 300, 520, 777
    for dtype in sorted(backend.dtypes):
        a_values, b_values = rng.standard_normal((m, k)), rng.standard_normal((k, n))
        a = backend.from_numpy(a_values, dtype)
        b = backend.from_numpy(np.ascontiguousarray(b_values.T), dtype).T
        ref, bound = reference(backend.to_numpy(a), backend.to_numpy(b), k, dtype)
        c = backend.to_numpy(backend.matmul(a, b))
        error = np.abs(c.astype(np.float64) - ref)
        assert np.all(error <= bound), f"{dtype}: {int((error > bound).sum())} elements outside the bound"


@pytest.mark.gpu
def test_autotuning_runs_once_per_key(empty_cache):  # no full pick from an earlier gemmzoo tune
    backend = available("triton-grouped")
    from gemmzoo_triton.core import autotune
    from gemmzoo_triton.grouped import pointer_kernel as grouped_kernel

    rng = np.random.default_rng(2)
    a = backend.from_numpy(rng.standard_normal((512, 384)), "float16")
    b = backend.from_numpy(rng.standard_normal((384, 640)), "float16")
    first = backend.to_numpy(backend.matmul(a, b))
    # 512x640x384 is under TMA_MIN_WORK: the pointer kernel runs, also on a GPU with TMA
    ran = [key for key in autotune.PICKED if key[1:6] == (512, 640, 384, "tf32", "torch.float16")]
    assert [key[0] for key in ran] == ["grouped_matmul_kernel"], ran
    kernel = autotune.tuner(grouped_kernel.grouped_matmul_kernel, backend.autotune)
    tuned = dict(kernel.cache)
    assert tuned, "no autotuning result was kept"
    second = backend.to_numpy(backend.matmul(a, b))
    assert kernel.cache == tuned
    assert np.array_equal(first, second)


@pytest.mark.gpu
def test_operands_on_the_wrong_device_are_a_clear_error():
    backend = available("triton-tiled")
    import torch

    a, b = torch.randn(8, 4), torch.randn(4, 6)
    with pytest.raises(GemmInputError, match=r"triton-tiled.*A is on cpu"):
        backend.matmul(a, b)


@pytest.mark.interpreter
def test_the_interpreters_overflow_check_fires_only_in_debug_so_the_suite_skips_it():
    """tests/conftest.py turns the interpreter's ``sanitize_overflow`` off because, without debug,
    the check it pays for is never made: with it on, an int32 product that overflows still runs
    and wraps, the same values as with it off; only debug options make it fail."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("triton")
    import dataclasses

    from overflow_kernel import times_kernel
    from triton.runtime import interpreter

    builder = interpreter.interpreter_builder
    kept = builder.options
    assert not kept.debug and not kept.sanitize_overflow  # as conftest left it
    rng = np.random.default_rng(3)
    x = torch.from_numpy(rng.integers(2**20, 2**30, size=16, dtype=np.int32))
    wrapped = (x.numpy().astype(np.int64) * 4099 + 2**31) % 2**32 - 2**31
    assert (np.abs(x.numpy().astype(np.int64) * 4099) > 2**31).all()  # every product overflows
    try:
        for sanitize in (False, True):
            builder.options = dataclasses.replace(kept, sanitize_overflow=sanitize)
            out = torch.zeros_like(x)
            times_kernel[(1,)](x, out, 4099, size=16)
            np.testing.assert_array_equal(out.numpy(), wrapped.astype(np.int32))
        builder.options = dataclasses.replace(kept, sanitize_overflow=True, debug=True)
        with pytest.raises(Exception, match="overflow"):
            times_kernel[(1,)](x, torch.zeros_like(x), 4099, size=16)
    finally:
        builder.options = kept


@pytest.mark.interpreter
def test_the_interpreters_numpy_dtypes_kept_per_type_are_its_own_answers():
    """tests/conftest.py keeps the interpreter's NumPy dtype of each Triton type
    (``memoize_interpreter_dtypes``): for every type it knows, alone, in a block, behind a
    pointer and in a block of pointers, the kept answer is the one its own function gives."""
    triton = pytest.importorskip("triton")
    import triton.language as tl
    from triton.runtime import interpreter

    kept = getattr(interpreter, "_get_np_dtype", None)
    if kept is None:
        pytest.skip(f"Triton {triton.__version__}'s interpreter has no _get_np_dtype: conftest keeps nothing")
    original = kept.original  # as conftest left it
    scalars = [tl.int1, tl.int8, tl.uint8, tl.int16, tl.uint16, tl.int32, tl.uint32, tl.int64, tl.uint64,
               tl.float16, tl.bfloat16, tl.float32, tl.float64, tl.float8e5, tl.float8e5b16, tl.float8e4nv,
               tl.float8e4b8, tl.float8e4b15]
    types = [*scalars, *(tl.pointer_type(s) for s in scalars)]
    types += [tl.block_type(t, shape) for t in types for shape in ([4], [2, 8])]
    for _ in range(2):  # the first answer of each type is computed, the second is the kept one
        for tt_dtype in types:
            assert kept(tt_dtype) == original(tt_dtype), tt_dtype
    with pytest.raises(KeyError):
        kept(tl.void)
