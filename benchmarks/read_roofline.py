#!/usr/bin/env python3
"""How fast this GPU reads a buffer of a given size, timed the way skinny.py times decode products.

    python benchmarks/read_roofline.py OUT_DIR [--mib 8 16 32 64 128 1024] [--rounds 3]

A decode product (M <= 64) is a stream through B; at 16x4096x4096 fp16 B is 32 MiB and the kernel
lasts about as long as the GPU takes to start and drain a stream. This script asks what any
kernel could do at that size: for each buffer size it times, with skinny.py's clean-L2 timer
(L2 refilled with unrelated clean lines before every call, CUDA events, the median),

- ``read``: a Triton kernel that only reads the buffer (each program sums its blocks into one
  float, so nothing is written but a few bytes), over a small grid of launch shapes (programs
  per SM, block size, warps, loads in flight); the fastest counts;
- ``sum``: ``torch.sum`` of the buffer;
- ``copy``: ``torch.Tensor.copy_`` of half the buffer into the other half's size (the same
  bytes moved: half read, half written);

and, for reference, cuBLAS (``torch.matmul``) and triton-decode's plan at 16 x 4096 x 4096 fp16,
whose B is 32 MiB. TB/s = bytes moved / device time. Prints a table and writes
OUT_DIR/read_roofline.json. Not a pytest file.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import sys
from pathlib import Path
from typing import Any

from gpu_results import environment, write_results
from skinny import CleanL2Timer

#: Launch shapes of the read kernel: (programs per SM, elements per block, warps, loads in flight).
READ_CONFIGS = list(itertools.product((1, 2, 4, 8), (4096, 8192, 16384), (4, 8), (2, 4)))


def _read_kernel() -> Any:
    import triton
    import triton.language as tl

    @triton.jit
    def read_kernel(x_ptr, out_ptr, n_blocks, BLOCK: tl.constexpr, STAGES: tl.constexpr):  # noqa: N803
        """Program p sums blocks p, p + P, p + 2P, ... of x into out[p] (P programs)."""
        pid = tl.program_id(0)
        programs = tl.num_programs(0)
        offsets = tl.arange(0, BLOCK)
        total = tl.zeros((BLOCK,), dtype=tl.float32)
        for block in tl.range(pid, n_blocks, programs, num_stages=STAGES):
            total += tl.load(x_ptr + block * BLOCK + offsets).to(tl.float32)
        tl.store(out_ptr + pid, tl.sum(total))

    return read_kernel


def best_read(x: Any, timer: CleanL2Timer, sms: int, reps: int) -> tuple[float, str]:
    """The fastest read of ``x`` over :data:`READ_CONFIGS`: (ms, config name); each config's
    result is checked against ``torch.sum`` first."""
    import torch

    kernel = _read_kernel()
    expected = x.float().sum().item()
    tolerance = 1e-3 * max(1.0, x.float().abs().sum().item())
    best = (float("inf"), "")
    for per_sm, block, warps, stages in READ_CONFIGS:
        n_blocks = x.numel() // block
        programs = min(per_sm * sms, n_blocks)
        out = torch.empty(programs, device=x.device, dtype=torch.float32)

        def call(out: Any = out, programs: int = programs, n_blocks: int = n_blocks,
                 block: int = block, warps: int = warps, stages: int = stages) -> None:
            kernel[(programs,)](x, out, n_blocks, BLOCK=block, STAGES=stages, num_warps=warps)

        call()
        got = out.sum().item()
        if abs(got - expected) > tolerance:
            raise AssertionError(f"read kernel {per_sm}/SM {block} w{warps} s{stages}: "
                                 f"sum {got} != {expected}")
        ms = timer.median_ms(call, reps)
        if ms < best[0]:
            best = (ms, f"{per_sm}/SM block {block} w{warps} s{stages}")
    return best


def decode_reference(timer: CleanL2Timer, reps: int) -> dict[str, float]:
    """Device time (ms) of cuBLAS and of triton-decode's plan at 16x4096x4096 fp16, row-major B."""
    import torch

    import gemmzoo

    a = torch.randn(16, 4096, device="cuda").half()
    b = torch.randn(4096, 4096, device="cuda").half()
    run = gemmzoo.get_backend("triton-decode").prepare(a, b)
    expected = (a.float() @ b.float())
    for name, fn in (("cublas", lambda: torch.matmul(a, b)), ("triton-decode", lambda: run(a, b))):
        error = ((fn().float() - expected).norm() / expected.norm()).item()
        if error > 2e-3:
            raise AssertionError(f"{name} at 16x4096x4096: relative error {error:.2e}")
    return {"cublas": timer.median_ms(lambda: torch.matmul(a, b), reps),
            "triton-decode": timer.median_ms(lambda: run(a, b), reps)}


def measure_size(mib: int, timer: CleanL2Timer, sms: int, rounds: int, reps: int) -> dict[str, Any]:
    """One row: the best read, ``torch.sum`` and a copy of ``mib`` MiB, medians over ``rounds``."""
    import torch

    nbytes = mib << 20
    x = torch.randn(nbytes // 2, device="cuda").half()
    half = x[: x.numel() // 2]
    target = torch.empty_like(half)
    reads, configs, sums, copies = [], [], [], []
    for _ in range(rounds):
        ms, config = best_read(x, timer, sms, reps)
        reads.append(ms)
        configs.append(config)
        sums.append(timer.median_ms(lambda: x.sum(), reps))
        copies.append(timer.median_ms(lambda: target.copy_(half), reps))
    row = {"mib": mib, "bytes": nbytes, "read_ms": statistics.median(reads),
           "read_config": configs[reads.index(min(reads))],
           "sum_ms": statistics.median(sums), "copy_ms": statistics.median(copies)}
    for name in ("read", "sum", "copy"):
        row[f"{name}_tb_s"] = nbytes / (row[f"{name}_ms"] * 1e-3) / 1e12
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--mib", nargs="+", type=int, default=[8, 16, 32, 64, 128, 1024])
    parser.add_argument("--rounds", type=int, default=3, help="timings per row; the median counts")
    parser.add_argument("--reps", type=int, default=40, help="calls per timing")
    args = parser.parse_args(argv)
    env = environment()
    sms = env["sms"]
    timer = CleanL2Timer()
    timer.warm()
    rows: list[dict[str, Any]] = []
    lines = ["TB/s = bytes moved / device time (clean-L2 timer, median)", ""]
    for mib in args.mib:
        rows.append(measure_size(mib, timer, sms, args.rounds, args.reps))
        row = rows[-1]
        lines.append(f"{mib:5d} MiB  read {row['read_tb_s']:5.2f} TB/s ({row['read_ms'] * 1e3:7.1f} us, "
                     f"{row['read_config']})  sum {row['sum_tb_s']:5.2f}  copy {row['copy_tb_s']:5.2f}")
        print(lines[-1], flush=True)
        write_results(args.out_dir, "read_roofline", env, rows, "\n".join(lines) + "\n")
    decode = decode_reference(timer, args.reps)
    moved = (16 * 4096 + 4096 * 4096 + 16 * 4096) * 2
    for name, ms in decode.items():
        lines.append(f"16x4096x4096 fp16 {name}: {ms * 1e3:.1f} us, {moved / (ms * 1e-3) / 1e12:.2f} TB/s")
        print(lines[-1], flush=True)
    env["decode_16x4096x4096_fp16_ms"] = decode
    env["decode_bytes"] = moved
    write_results(args.out_dir, "read_roofline", env, rows, "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
