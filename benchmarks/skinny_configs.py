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

from gpu_results import environment, write_results
from skinny import CleanL2Timer

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
#: (M, N, K, dtype, B column-major, A transposed, blocks (M, N, K, stages, warps), splits, reduction)
#: for the TMA kernel: rows of 16-byte multiples (descriptors need them), tails in M, N and K.
TMA_CHECK_CASES = [
    (300, 136, 9000, "float16", False, False, (128, 128, 64, 4, 8), 9, 1),
    (304, 136, 9000, "bfloat16", True, True, (128, 256, 64, 3, 8), 5, 2),
    (72, 200, 20000, "float16", True, False, (64, 64, 128, 4, 4), 16, 1),
    (1, 4096, 4104, "float16", False, False, (16, 128, 128, 4, 4), 3, 1),
    (64, 4104, 4096, "bfloat16", True, False, (64, 64, 256, 3, 4), 2, 1),
    (512, 512, 65536, "float16", False, False, (128, 256, 64, 3, 8), 64, 1),
    (512, 512, 65536, "bfloat16", False, False, (256, 128, 64, 3, 8), 16, 2),
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
    for m, n, k, dtype, b_col, a_t, blocks, splits, reduce in TMA_CHECK_CASES:
        a, b = tensors(m, n, k, dtype, b_col, a_t)
        ref = a.double() @ b.double()
        config = plan.with_splits(plan.SplitConfig(*blocks, tma=True), m, n, k, splits, reduce)
        run = plan.bind(a, b, "tf32", config)
        outs = [run(a, b) for _ in range(3)]
        torch.cuda.synchronize()
        err = ((outs[0].double() - ref).norm() / ref.norm()).item()
        same = all(torch.equal(outs[0], o) for o in outs[1:])
        tma = plan.tma_usable(a, b, "tf32")
        ok = err <= CHECK_ERROR[dtype] and same and tma and bool(torch.isfinite(outs[0]).all())
        failures += not ok
        print(f"check {m}x{n}x{k} {dtype} B col-major {b_col} A transposed {a_t} {config.label}: "
              f"rel error {err:.1e}, 3 calls identical {same}, TMA {tma}: {'ok' if ok else 'FAIL'}",
              flush=True)
    print(f"check: {failures} failures", flush=True)
    return failures


#: Tiles (M, N, K, stages, warps) the TMA sweep weighs for long K (M and N cap the first two).
LONGK_TMA_TILES = [(128, 256, 64, 3, 8), (256, 128, 64, 3, 8), (128, 128, 64, 4, 8), (128, 128, 128, 3, 8),
                   (64, 128, 128, 4, 4), (64, 64, 128, 4, 4), (64, 64, 256, 3, 4), (32, 32, 256, 4, 4),
                   (16, 16, 256, 4, 4)]
#: Column blocks (N, K, stages, warps) the TMA sweep weighs for decode shapes (M fills the rows).
DECODE_TMA_TILES = [(32, 256, 4, 4), (64, 256, 4, 4), (64, 128, 6, 4), (128, 128, 4, 4), (128, 64, 8, 4),
                    (256, 64, 4, 8)]
#: The long-K problems the TMA sweep times: M = N = 16 already beats cuBLAS with pointer loads.
LONGK_TMA_SHAPES = [shape for shape in LONGK_SHAPES if shape[0] >= 64]
DECODE_TMA_SHAPES = [(1, 4096, 4096, False), (16, 4096, 4096, False), (64, 4096, 4096, False),
                     (16, 4096, 4096, True), (16, 14336, 4096, False)]


def tma_variants(m: int, n: int, k: int, decode: bool, sms: int) -> list[Any]:
    """TMA configs around a problem: each tile, with splits that fill about half, one or two
    waves of the SMs (decode: 1, 2 and 4 splits), each reduction."""
    from gemmzoo_triton import splitk_plan as plan

    if decode:
        bm = max(16, 1 << (m - 1).bit_length())
        bases = [(bm, bn, bk, st, w) for bn, bk, st, w in DECODE_TMA_TILES]
    else:
        bases = [(min(bm, max(16, 1 << (m - 1).bit_length())), min(bn, max(16, 1 << (n - 1).bit_length())),
                  bk, st, w) for bm, bn, bk, st, w in LONGK_TMA_TILES]
    found = {}
    for bm, bn, bk, st, w in dict.fromkeys(bases):
        if st * (bm + bn) * bk * 2 > plan.STAGE_BUDGET:
            continue
        tiles = -(-m // bm) * -(-n // bn)
        splits = (1, 2, 4) if decode else sorted({max(1, -(-sms // 2 // tiles)), max(1, sms // tiles),
                                                  max(1, 2 * sms // tiles)})
        for split in splits:
            for reduce in ((1,) if decode else (1, 2)):
                base = plan.SplitConfig(bm, bn, bk, st, w, tma=True)
                config = plan.with_splits(base, m, n, k, split, reduce)
                found.setdefault(config.label, config)
    return list(found.values())


def sweep_tma_problem(m: int, n: int, k: int, b_col: bool, decode: bool, sms: int,
                      timer: CleanL2Timer) -> list[dict[str, Any]]:
    """cuBLAS, the plan's current choice and :func:`tma_variants`, timed on one fp16 problem."""
    import torch

    from gemmzoo_triton import splitk_plan as plan

    a, b = tensors(m, n, k, "float16", b_col, False)
    moved = (m * k + k * n + m * n) * 2
    shape = f"{m}x{n}x{k}" + (" B col-major" if b_col else "")
    chosen = plan.choose(m, n, k, 2, False, sms, decode)
    timer.warm()
    rows = [{"shape": shape, "variant": "cublas", "ms": timer.median_ms(lambda: torch.matmul(a, b))}]
    ref = a.float() @ b.float()
    for config in [chosen, *tma_variants(m, n, k, decode, sms)]:
        run = plan.bind(a, b, "tf32", config)
        err = ((run(a, b).float() - ref).norm() / ref.norm()).item()
        ms = timer.median_ms(lambda run=run: run(a, b))
        rows.append({"shape": shape, "variant": config.label, "ms": ms, "err": err,
                     "chosen": config is chosen, "tb_s": moved / ms / 1e9})
    cublas = rows[0]["ms"]
    print(f"{shape}: cublas {cublas * 1e3:.1f} us ({moved / cublas / 1e9:.2f} TB/s); chosen "
          f"{rows[1]['variant']} {rows[1]['ms'] * 1e3:.1f} us", flush=True)
    for row in sorted(rows[1:], key=lambda r: r["ms"])[:6]:
        print(f"    {row['variant']:>44} {row['ms'] * 1e3:7.1f} us {row['tb_s']:.2f} TB/s "
              f"{cublas / row['ms']:.2f}x err {row['err']:.1e}", flush=True)
    return rows


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
    parser.add_argument("--sweep", nargs="*", default=[],
                        choices=["decode", "longk", "decode-tma", "longk-tma"])
    args = parser.parse_args(argv)

    from gemmzoo_triton import splitk_plan as plan

    env = environment()
    failures = check() if args.check else 0
    rows: list[dict[str, Any]] = []
    sms = plan.multiprocessors(0)
    timer = CleanL2Timer()
    started = time.time()
    for name in args.sweep:
        if name.endswith("-tma"):
            for m, n, k, b_col in DECODE_TMA_SHAPES if name == "decode-tma" else LONGK_TMA_SHAPES:
                rows += sweep_tma_problem(m, n, k, b_col, name == "decode-tma", sms, timer)
                write_results(args.out_dir, "skinny_configs", env, rows, "")
            continue
        for m, n, k, b_col in DECODE_SHAPES if name == "decode" else LONGK_SHAPES:
            rows += sweep_problem(m, n, k, b_col, name == "decode", sms, timer)
            write_results(args.out_dir, "skinny_configs", env, rows, "")
    print(f"sweep took {time.time() - started:.0f} s", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
