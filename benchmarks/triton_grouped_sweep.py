"""triton-grouped against cuBLAS (``torch.matmul``) in device time, one shape at a time.

Parts (``--parts``, any of):

- ``settings``: 4097^3 float16 with each way of copying the operands (``aligned.COPIER``) and of
  returning C (``grouped_plan.C_OUTPUT``);
- ``misaligned``: shapes whose rows are not 16-byte aligned (K or N not a multiple of 8), some
  aligned controls; triton-grouped's plan (its aligned route where it applies), and where asked
  its pointer route forced, against cuBLAS;
- ``aligned``: square and transformer-projection shapes; the plan, and the TMA kernels (one
  program per tile, persistent) autotuned directly, against cuBLAS;
- ``precision``: float32 at 4096^3 in tf32 and IEEE against cuBLAS in the same precision, with
  the candidate kernels and config sets.

Device time: the median of ``triton.testing.do_bench`` (CUDA events, L2 flushed before each
call) after a first call that compiles and autotunes; TFLOPS = 2·M·N·K / time; random normal
inputs; every result is checked against an fp32 product (relative Frobenius error). New work
stops after ``--budget`` seconds, so that what was measured comes back. Writes OUTDIR/sweep.json.

    python benchmarks/triton_grouped_sweep.py OUTDIR [--parts misaligned aligned precision] [--budget 240]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpu_results import MISALIGNED

ALIGNED = [
    (1024, 1024, 1024), (1536, 1536, 1536), (2048, 2048, 2048), (2176, 2176, 2176),
    (3072, 3072, 3072), (4096, 4096, 4096), (512, 4096, 4096), (1024, 14336, 4096),
    (2048, 4096, 11008),
]


class Sweep:
    """Measurements, their log and the time budget."""

    def __init__(self, outdir: Path, budget: float) -> None:
        self.outdir = outdir
        self.deadline = time.monotonic() + budget
        self.rows: list[dict[str, Any]] = []

    def left(self) -> bool:
        return time.monotonic() < self.deadline

    def record(self, row: dict[str, Any]) -> None:
        self.rows.append(row)
        shown = {k: (round(v, 1) if isinstance(v, float) else v) for k, v in row.items()}
        print(json.dumps(shown), flush=True)
        (self.outdir / "sweep.json").write_text(json.dumps(self.rows, indent=1))


def tflops(shape: tuple[int, int, int], ms: float) -> float:
    m, n, k = shape
    return 2 * m * n * k / (ms * 1e-3) / 1e12


def device_ms(call: Callable[[], Any]) -> float:
    import triton

    return float(triton.testing.do_bench(call, warmup=25, rep=100, return_mode="median"))


def error(c: Any, a: Any, b: Any) -> float:
    """‖C − A·B‖ / ‖A·B‖ against an fp32 IEEE product of the same operands."""
    import torch

    previous = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        ref = a.float() @ b.float()
    finally:
        torch.backends.cuda.matmul.allow_tf32 = previous
    return float(torch.linalg.norm(c.float() - ref) / torch.linalg.norm(ref))


def operands(shape: tuple[int, int, int], dtype: Any) -> tuple[Any, Any]:
    import torch

    m, n, k = shape
    return torch.randn(m, k, device="cuda", dtype=dtype), torch.randn(k, n, device="cuda", dtype=dtype)


def measure_plan(sweep: Sweep, backend: Any, part: str, shape: tuple[int, int, int], dtype_name: str,
                 route: str | None = None, cublas: float | None = None,
                 settings: dict[str, str] | None = None) -> float | None:
    """cuBLAS (unless given) and triton-grouped's plan (its route forced when ``route``; with
    ``settings``, grouped_plan.C_OUTPUT and aligned.COPIER, for this plan)."""
    import torch

    from gemmzoo_triton import aligned, grouped_plan

    a, b = operands(shape, getattr(torch, dtype_name))
    if cublas is None:
        cublas = tflops(shape, device_ms(lambda: torch.matmul(a, b)))
    original = grouped_plan.route, grouped_plan.C_OUTPUT, aligned.COPIER
    if route is not None:
        grouped_plan.route = lambda x, y, precision: route
    if settings:
        grouped_plan.C_OUTPUT = settings.get("C_OUTPUT", grouped_plan.C_OUTPUT)
        aligned.COPIER = settings.get("COPIER", aligned.COPIER)
    try:
        start = time.monotonic()
        run = backend.prepare(a, b)
        c = run(a, b)
        torch.cuda.synchronize()
        first_s = time.monotonic() - start
        ours = tflops(shape, device_ms(lambda: run(a, b)))
        row = {
            "part": part, "shape": "x".join(map(str, shape)), "dtype": dtype_name,
            "variant": (f"plan:{run.route}" if hasattr(run, "route") else "plan")
            + (f" {settings}" if settings else ""),
            "tflops": ours, "cublas_tflops": cublas, "ratio": ours / cublas,
            "rel_error": error(c, a, b), "first_call_s": first_s, "config": picked_config(a, b, run),
        }
    finally:
        grouped_plan.route, grouped_plan.C_OUTPUT, aligned.COPIER = original
    sweep.record(row)
    return cublas


def picked_config(a: Any, b: Any, run: Any) -> str:
    from gemmzoo_triton import grouped_kernel

    shape = (a.shape[0], b.shape[1], a.shape[1])
    picked = grouped_kernel.PICKED.items()
    found = [f"{key[0]} {config}" for key, config in picked if tuple(key[1:4]) == shape]
    if not found and getattr(run, "route", "pointer") != "pointer":
        return "grouped_gluon_kernel (tile and schedule from its pick_schedule; no autotuning)"
    return "; ".join(found)


def measure_tma(sweep: Sweep, part: str, shape: tuple[int, int, int], dtype_name: str, variant: str,
                cublas: float, precision: str = "tf32", b_transposed: bool = False,
                configs: list[Any] | None = None) -> None:
    """A TMA kernel autotuned on its own (over ``configs`` when given) and timed bound."""
    import torch

    from gemmzoo_triton import grouped_kernel, grouped_tma_kernel

    a, b = operands(shape, getattr(torch, dtype_name))
    if b_transposed:
        b = b.T.contiguous().T
    c = torch.empty(shape[0], shape[1], device="cuda", dtype=a.dtype)
    kernel = (grouped_tma_kernel.tma_matmul_kernel if variant == "tiles"
              else grouped_tma_kernel.tma_persistent_matmul_kernel)
    saved = kernel.configs
    if configs is not None:
        kernel.configs = configs
        kernel.cache.clear()
        for key in [k for k in grouped_kernel.PICKED if k[0] == kernel.base_fn.__name__]:
            del grouped_kernel.PICKED[key]
    try:
        config = grouped_tma_kernel.launch(a, b, c, precision, variant=variant)
        run = grouped_tma_kernel.bind(a, b, c, precision, config, variant=variant)
        ours = tflops(shape, device_ms(lambda: run(a, b, c)))
        sweep.record({
            "part": part, "shape": "x".join(map(str, shape)), "dtype": dtype_name,
            "variant": f"tma-{variant}{' B^T' if b_transposed else ''}{' own configs' if configs else ''}",
            "precision": precision, "tflops": ours, "cublas_tflops": cublas, "ratio": ours / cublas,
            "rel_error": error(c, a, b), "config": str(config),
        })
    finally:
        if configs is not None:
            kernel.configs = saved
            kernel.cache.clear()


def measure_pointer_ieee(sweep: Sweep, shape: tuple[int, int, int], cublas: float, fma_tile: int) -> None:
    """The pointer kernel in IEEE fp32, autotuned afresh with tiles up to ``fma_tile`` elements."""
    import torch

    from gemmzoo_triton import grouped_kernel

    a, b = operands(shape, torch.float32)
    c = torch.empty(shape[0], shape[1], device="cuda", dtype=a.dtype)
    kernel = grouped_kernel.grouped_matmul_kernel
    saved = grouped_kernel.FMA_TILE
    grouped_kernel.FMA_TILE = fma_tile
    kernel.cache.clear()
    grouped_kernel.PICKED.pop(grouped_kernel.pointer_key(a, b, "ieee"), None)
    try:
        config = grouped_kernel.launch(a, b, c, "ieee")
        run = grouped_kernel.bind(a, b, "ieee", config)
        ours = tflops(shape, device_ms(lambda: run(a, b, c)))
        sweep.record({
            "part": "precision", "shape": "x".join(map(str, shape)), "dtype": "float32",
            "variant": f"pointer ieee fma_tile={fma_tile}", "tflops": ours, "cublas_tflops": cublas,
            "ratio": ours / cublas, "rel_error": error(c, a, b), "config": str(config),
        })
    finally:
        grouped_kernel.FMA_TILE = saved
        kernel.cache.clear()
        grouped_kernel.PICKED.pop(grouped_kernel.pointer_key(a, b, "ieee"), None)


def guarded(sweep: Sweep, label: str, call: Callable[[], Any]) -> Any:
    if not sweep.left():
        print(f"skipped (time budget): {label}", flush=True)
        return None
    try:
        return call()
    except Exception as failure:  # one broken measurement must not lose the others
        sweep.record({"label": label, "error": f"{type(failure).__name__}: {failure}"[:500]})
        return None


def settings(sweep: Sweep, backend: Any) -> None:
    """4097^3 float16 with each way of copying the operands and of returning C."""
    cublas = None
    for c_output in ("view", "pointers"):
        for copier in ("triton", "torch"):
            chosen = {"C_OUTPUT": c_output, "COPIER": copier}
            measured = guarded(sweep, f"settings {chosen}", lambda c=cublas, chosen=chosen: measure_plan(
                sweep, backend, "settings", (4097, 4097, 4097), "float16", cublas=c, settings=chosen))
            cublas = measured or cublas


def misaligned(sweep: Sweep, backend: Any, pointer_too: bool) -> None:
    for shape, dtypes in MISALIGNED:
        for dtype_name in dtypes:
            label = f"misaligned {shape} {dtype_name}"
            cublas = guarded(sweep, label, lambda s=shape, d=dtype_name: measure_plan(
                sweep, backend, "misaligned", s, d))
            if pointer_too and cublas is not None and dtype_name == "float16":
                guarded(sweep, label + " pointer", lambda s=shape, c=cublas: measure_plan(
                    sweep, backend, "misaligned", s, "float16", route="pointer", cublas=c))


def aligned(sweep: Sweep, backend: Any, variants: list[str], dtypes: list[str]) -> None:
    for shape, dtype_name in [(shape, d) for d in dtypes for shape in ALIGNED]:
        label = f"aligned {shape} {dtype_name}"
        cublas = guarded(sweep, label, lambda s=shape, d=dtype_name: measure_plan(
            sweep, backend, "aligned", s, d))
        if cublas is None:
            continue
        for variant in variants:
            guarded(sweep, f"{label} {variant}", lambda s=shape, v=variant, c=cublas: measure_tma(
                sweep, "aligned", s, "float16", v, c))


def precision(sweep: Sweep, backend: Any, experiments: bool) -> None:
    import torch

    from gemmzoo import TF32Array
    from gemmzoo_triton.grouped_kernel import _config
    from gemmzoo_triton.grouped_tma_kernel import set_block_shapes

    shape = (4096, 4096, 4096)
    a, b = operands(shape, torch.float32)

    def cublas(tf32: bool) -> float:
        torch.backends.cuda.matmul.allow_tf32 = tf32
        try:
            return tflops(shape, device_ms(lambda: torch.matmul(a, b)))
        finally:
            torch.backends.cuda.matmul.allow_tf32 = False

    for mode in ("tf32", "float32"):
        reference = guarded(sweep, f"cublas {mode}", lambda m=mode: cublas(m == "tf32"))
        if reference is None:
            continue
        x, y = (TF32Array(a), TF32Array(b)) if mode == "tf32" else (a, b)

        def plan(x=x, y=y, mode=mode, reference=reference) -> None:
            run = backend.prepare(x, y)
            c = run(x, y)
            ours = tflops(shape, device_ms(lambda: run(x, y)))
            sweep.record({"part": "precision", "shape": "4096x4096x4096", "dtype": mode,
                          "variant": f"plan:{getattr(run, 'route', '')}", "tflops": ours,
                          "cublas_tflops": reference, "ratio": ours / reference,
                          "rel_error": error(getattr(c, "data", c), a, b),
                          "config": picked_config(a, b, run)})

        guarded(sweep, f"plan {mode}", plan)
        if mode == "tf32":
            b_columns = b.T.contiguous().T
            guarded(sweep, "plan tf32 B column-major", lambda r=reference, bc=b_columns: plan(
                TF32Array(a), TF32Array(bc), "tf32 (B column-major)", r))
        if mode == "float32" and experiments:
            guarded(sweep, "pointer ieee wide", lambda r=reference: measure_pointer_ieee(
                sweep, shape, r, 128 * 256))
        if mode == "tf32" and experiments:
            fp32_configs = [
                _config(bm, bn, bk, s, w, pre_hook=set_block_shapes)
                for bm, bn, bk, s, w in ((128, 128, 32, 4, 8), (128, 256, 32, 3, 8), (256, 128, 32, 3, 8),
                                         (128, 128, 64, 3, 8), (128, 128, 32, 3, 4), (128, 64, 32, 4, 4))
            ]
            for b_t in (False, True):
                guarded(sweep, f"tma tf32 B^T={b_t}", lambda t=b_t, r=reference, f=fp32_configs: measure_tma(
                    sweep, "precision", shape, "float32", "tiles", r, "tf32", t, f))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("outdir", type=Path)
    parser.add_argument("--parts", nargs="+", default=["misaligned", "aligned", "precision"])
    parser.add_argument("--budget", type=float, default=240.0)
    parser.add_argument("--pointer-too", action="store_true", help="misaligned: also the pointer route")
    parser.add_argument("--aligned-dtypes", nargs="+", default=["float16"])
    parser.add_argument("--experiments", action="store_true", help="precision: also the kernel experiments")
    parser.add_argument("--variants", nargs="*", default=["tiles", "persistent"], help="aligned: TMA kernels")
    args = parser.parse_args(argv)
    args.outdir.mkdir(parents=True, exist_ok=True)

    import torch

    import gemmzoo

    backend = gemmzoo.get_backend("triton-grouped")
    sweep = Sweep(args.outdir, args.budget)
    sweep.record({"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                  "triton": __import__("triton").__version__, "cuda": torch.version.cuda})
    for part in args.parts:
        {"settings": lambda: settings(sweep, backend),
         "misaligned": lambda: misaligned(sweep, backend, args.pointer_too),
         "aligned": lambda: aligned(sweep, backend, args.variants, args.aligned_dtypes),
         "precision": lambda: precision(sweep, backend, args.experiments)}[part]()
    print("\nshape dtype variant TFLOPS cuBLAS ratio error")
    for row in sweep.rows:
        if "ratio" in row:
            print(f"{row['shape']} {row['dtype']} {row['variant']} {row['tflops']:.0f} "
                  f"{row['cublas_tflops']:.0f} "
                  f"{row['ratio']:.2f} {row['rel_error']:.1e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
