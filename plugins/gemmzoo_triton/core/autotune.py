"""What the autotuned ``tl`` kernels share: their configs, the pruning of configs per problem, and
the launch that tunes a problem once per process and then launches its pick directly."""



from __future__ import annotations

import inspect
from typing import Any

import triton

from gemmzoo_triton.core import triton_internals


def make_config(
    bm: int, bn: int, bk: int, stages: int, warps: int, group: int = 8, pre_hook: Any = None
) -> triton.Config:
    """A config of the grouped kernels' block shapes, group size, stages and warps."""
    blocks = {"BLOCK_SIZE_M": bm, "BLOCK_SIZE_N": bn, "BLOCK_SIZE_K": bk, "GROUP_SIZE_M": group}
    return triton.Config(blocks, num_stages=stages, num_warps=warps, pre_hook=pre_hook)


#: Problems with M*N*K at most this (256^3) run the smallest config without autotuning: they take
#: microseconds, and tuning them would compile and time every config for each new shape.
SMALL_PROBLEM = 2**24


#: Shared memory a program may use on Hopper (227 KiB).
SHARED_MEMORY = 227 * 1024

#: IEEE fp32 runs on the FMA units, where tiles over this many elements of C only spill.
FMA_TILE = 128 * 64


def prune_configs(
    configs: list[triton.Config], named_args: dict[str, Any], **kwargs: Any
) -> list[triton.Config]:
    """Drop configs that cannot pay off for this problem before they are compiled and timed.

    Small problems get the smallest config alone. Otherwise dropped: blocks much taller (wider)
    than M (N), whose extra rows (columns) are masked-off work; pipelines whose stages overflow
    shared memory for this element size; and, for IEEE fp32, tiles too large for the FMA units.
    """
    m, n, k = named_args["M"], named_args["N"], named_args["K"]
    size = _element_size(named_args)
    by_area = sorted(configs, key=lambda c: c.kwargs["BLOCK_SIZE_M"] * c.kwargs["BLOCK_SIZE_N"])
    if m * n * k <= SMALL_PROBLEM:
        return by_area[:1]
    m_cap, n_cap = max(64, triton.next_power_of_2(m)), max(64, triton.next_power_of_2(n))

    def fits(config: triton.Config) -> bool:
        bm, bn, bk = (config.kwargs[f"BLOCK_SIZE_{d}"] for d in "MNK")
        if bm > m_cap or bn > n_cap:
            return False
        if config.num_stages * (bm + bn) * bk * size > SHARED_MEMORY:
            return False
        return kwargs.get("PRECISION") != "ieee" or size != 4 or bm * bn <= FMA_TILE

    return [c for c in configs if fits(c)] or by_area[:1]


def _element_size(named_args: dict[str, Any]) -> int:
    """The bytes per element of A: the kernels' first argument, a tensor or a tensor descriptor."""
    a = next(iter(named_args.values()))
    return getattr(a, "base", a).element_size()


def autotune_options() -> dict[str, Any]:
    """``cache_results=True`` where this Triton has it (3.4 and later): tuning results on disk."""
    if "cache_results" in inspect.signature(triton.autotune).parameters:
        return {"cache_results": True}
    return {}


#: The config the autotuner picked for each problem this process has seen, by the kernel's name
#: and the problem's key (see :func:`launch_tuned`). Later calls launch it straight through the
#: kernel: the autotuner's per-call path costs host time of its own, which shows in the timings of
#: small products (docs/results/2026-11-21-h100-triton.md).
PICKED: dict[tuple[Any, ...], triton.Config] = {}


def launch_tuned(
    kernel: Any, grid: Any, args: tuple[Any, ...], options: dict[str, Any], key: tuple[Any, ...]
) -> triton.Config:
    """Launch an autotuned ``kernel`` on ``grid`` (a function of the config); return the config.

    A problem's first call goes through the autotuner, which times the configs and keeps the
    best; :data:`PICKED` remembers it under the kernel's name and ``key``, and later calls launch
    it directly, without the autotuner's per-call cost. The autotuner runs a config's
    ``pre_hook`` before its launches; a direct launch runs it here.
    """
    picked_key = (triton_internals.kernel_name(kernel), *key)
    config = PICKED.get(picked_key)
    if config is None:
        kernel[grid](*args, **options)
        config = PICKED[picked_key] = triton_internals.picked_config(kernel)
        return config
    config_kwargs = config.all_kwargs()
    if config.pre_hook is not None:
        # args: the leading ones
        named_args = dict(zip(triton_internals.argument_names(kernel), args, strict=False))
        config.pre_hook({**named_args, **options, **config_kwargs})
    triton_internals.jit_function(kernel)[grid(config_kwargs)](*args, **options, **config_kwargs)
    return config
