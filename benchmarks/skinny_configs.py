#!/usr/bin/env python3
"""Check and time the split-K kernel's configs by hand, to see what the heuristic should pick.

    python benchmarks/skinny_configs.py OUT_DIR [--check] [--sweep decode longk]

``--check`` runs forced configs (both reductions, several splits, tails in every dimension,
row- and column-major B, transposed A) in float16, bfloat16, float32 (IEEE) and tf32 against a
float64 product, each three times (the calls must agree bitwise). ``--sweep`` times block-shape
and split variants around what :func:`gemmzoo_triton.splitk_plan.choose` picks, on fp16 problems,
with :class:`skinny.CleanL2Timer` (L2 full of clean lines, median) and cuBLAS alongside; it writes
OUT_DIR/skinny_configs.json and prints, per problem, the best variant against the chosen one.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from skinny import CleanL2Timer
from triton_vs_cublas import environment, write_results

#: (M, N, K, dtype, B column-major, A transposed, decode blocks, splits, reduction): tails in every
#: dimension, every dtype, both reductions, and one large split to give a race room to show.
CHECK_CASES = [
    (1, 4095, 4097, "float16", False, False, True, 3, 1),
    (1, 4095, 4097, "bfloat16", True, False, True, 5, 1),
    (1, 4095, 4097, "tf32", False, False, True, 4, 2),
    (1, 4095, 4097, "float32", False, False, True, 3, 1),
    (64, 333, 5000, "float16", True, True, True, 7, 1),
    (64, 333, 5000, "bfloat16", False, False, True, 6, 2),
    (300, 129, 9000, "float16", False, False, False, 9, 1),
    (300, 129, 9000, "float16", False, False, False, 9, 2),
    (300, 129, 9000, "bfloat16", True, False, False, 4, 1),
    (300, 129, 9000, "tf32", False, False, False, 4, 1),
    (300, 129, 9000, "float32", False, True, False, 5, 2),
    (512, 512, 65536, "float16", False, False, False, 64, 1),
    (16, 4096, 4096, "float16", True, False, True, 2, 1),
]
CHECK_ERROR = {"float16": 2e-3, "bfloat16": 1e-2, "float32": 1e-5, "tf32": 2e-3}

PROJECTIONS = ((4096, 4096), (14336, 4096), (4096, 14336), (11008, 4096))
#: (M, N, K, B column-major)
DECODE_SHAPES = [(m, n, k, False) for m in (1, 16, 64) for n, k in PROJECTIONS]
DECODE_SHAPES += [(16, n, k, True) for n, k in PROJECTIONS[:2]]
LONGK_SHAPES = [(s, s, k, False) for s in (16, 64, 128, 256, 512) for k in (16384, 65536)]
#: (BLOCK_N, BLOCK_K, stages, warps) variants of the decode blocks.
DECODE_VARIANTS = [(64, 256, 4, 4), (64, 128, 4, 4), (128, 128, 4, 4), (32, 256, 4, 4), (64, 128, 8, 4),
                   (64, 256, 3, 8)]
#: (BLOCK_M, BLOCK_N, BLOCK_K, stages, warps) variants of the tile blocks (M and N cap the first two).
LONGK_VARIANTS = [(128, 128, 64, 4, 8), (128, 128, 64, 3, 4), (64, 64, 64, 4, 4), (64, 64, 128, 4, 4),
                  (32, 32, 256, 4, 4)]


def tensors(m: int, n: int, k: int, dtype: str, b_col: bool, a_t: bool) -> tuple[Any, Any]:
    import torch

    torch_dtype = torch.float32 if dtype == "tf32" else getattr(torch, dtype)
    a = torch.randn(k, m, device="cuda").T if a_t else torch.randn(m, k, device="cuda")
    b = torch.randn(n, k, device="cuda").T if b_col else torch.randn(k, n, device="cuda")
    return a.to(torch_dtype), b.to(torch_dtype)


def check() -> int:
    import torch

    from gemmzoo_triton import splitk_plan as plan

    failures = 0
    for m, n, k, dtype, b_col, a_t, decode, splits, reduce in CHECK_CASES:
        precision = "ieee" if dtype == "float32" else "tf32"
        elt = 4 if dtype in ("float32", "tf32") else 2
        a, b = tensors(m, n, k, dtype, b_col, a_t)
        ref = a.double() @ b.double()
        base = (plan.decode_blocks if decode else plan.tile_blocks)(m, n, elt, precision == "ieee")
        config = plan.with_splits(base, m, n, k, splits, reduce)
        run = plan.bind(a, b, precision, config)
        outs = [run(a, b) for _ in range(3)]
        torch.cuda.synchronize()
        err = ((outs[0].double() - ref).norm() / ref.norm()).item()
        same = all(torch.equal(outs[0], o) for o in outs[1:])
        ok = err <= CHECK_ERROR[dtype] and same and bool(torch.isfinite(outs[0]).all())
        failures += not ok
        print(f"check {m}x{n}x{k} {dtype} B col-major {b_col} A transposed {a_t} {config.label}: "
              f"rel error {err:.1e}, 3 calls identical {same}: {'ok' if ok else 'FAIL'}", flush=True)
    print(f"check: {failures} failures", flush=True)
    return failures


def sweep_problem(m: int, n: int, k: int, b_col: bool, decode: bool, sms: int,
                  timer: CleanL2Timer) -> list[dict[str, Any]]:
    import torch

    from gemmzoo_triton import splitk_plan as plan

    a, b = tensors(m, n, k, "float16", b_col, False)
    moved = (m * k + k * n + m * n) * 2
    chosen = plan.choose(m, n, k, 2, False, sms, decode)
    shape = f"{m}x{n}x{k}" + (" B col-major" if b_col else "")
    median_ms = timer.median_ms
    timer.warm()
    rows = [{"shape": shape, "variant": "cublas", "ms": median_ms(lambda: torch.matmul(a, b))}]
    configs = {chosen.label: chosen}
    if decode:
        bm = chosen.block_m
        bases = [plan.SplitConfig(bm, bn, bk, st, w) for bn, bk, st, w in DECODE_VARIANTS
                 if st * (bm + bn) * bk * 2 <= 200 * 1024]
    else:
        bases = list({plan.SplitConfig(min(bm, max(16, m)), min(bn, max(16, n)), bk, st, w): 0
                      for bm, bn, bk, st, w in LONGK_VARIANTS})
    for base in bases:
        for splits in (1, 2, 3, 4, 6, 8) if decode else (1, 2, 4, 8, 16, 32, 64, 128):
            for reduce in ((1, 2) if not decode else (1,)):
                config = plan.with_splits(base, m, n, k, splits, reduce)
                configs.setdefault(config.label, config)
    ref = a.float() @ b.float()
    for label, config in configs.items():
        run = plan.bind(a, b, "tf32", config)
        err = ((run(a, b).float() - ref).norm() / ref.norm()).item()
        ms = median_ms(lambda run=run: run(a, b))
        rows.append({"shape": shape, "variant": label, "ms": ms, "err": err,
                     "chosen": label == chosen.label, "tb_s": moved / ms / 1e9})
    best = min(rows[1:], key=lambda r: r["ms"])
    pick = next(r for r in rows if r.get("chosen"))
    print(f"{shape}: cublas {rows[0]['ms'] * 1e3:.1f} us ({moved / rows[0]['ms'] / 1e9:.2f} TB/s); "
          f"chosen {pick['variant']} {pick['ms'] * 1e3:.1f} us ({pick['tb_s']:.2f}); "
          f"best {best['variant']} {best['ms'] * 1e3:.1f} us ({best['tb_s']:.2f})", flush=True)
    for row in sorted(rows[1:], key=lambda r: r["ms"])[:5]:
        print(f"    {row['variant']:>40} {row['ms'] * 1e3:7.1f} us {row['tb_s']:.2f} TB/s "
              f"err {row['err']:.1e}", flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--check", action="store_true")
    parser.add_argument("--sweep", nargs="*", default=[], choices=["decode", "longk"])
    args = parser.parse_args(argv)

    from gemmzoo_triton import splitk_plan as plan

    env = environment()
    failures = check() if args.check else 0
    rows: list[dict[str, Any]] = []
    sms = plan.multiprocessors(0)
    timer = CleanL2Timer()
    started = time.time()
    for name in args.sweep:
        for m, n, k, b_col in DECODE_SHAPES if name == "decode" else LONGK_SHAPES:
            rows += sweep_problem(m, n, k, b_col, name == "decode", sms, timer)
            write_results(args.out_dir, "skinny_configs", env, rows, "")
    print(f"sweep took {time.time() - started:.0f} s", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
