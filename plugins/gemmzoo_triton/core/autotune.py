"""What the autotuned ``tl`` kernels share: their configs, the pruning of configs per problem, the
two autotuning modes, and the launch that tunes a problem once and then launches its pick directly.

Two modes (:data:`~gemmzoo_triton.core.env.AUTOTUNE_MODES`), a backend option (``autotune=``,
default :data:`~gemmzoo_triton.core.env.AUTOTUNE_ENV`, else ``"quick"``):

- ``"quick"``, for a problem met for the first time (``best_backend`` on a miss, a program's first
  call): a cheap model of the problem (:func:`estimated_cost`: tile waste at the M and N edges,
  waves of programs over the SMs, K steps, the tile's operand reuse) ranks the configs that
  :func:`prune_configs` keeps, and only the best :data:`QUICK_CONFIGS` (a kernel's
  ``quick_configs``, :func:`autotuned`) are compiled and timed (the best alone is launched without
  timing when the others are pruned away);
- ``"full"``, for ``gemmzoo tune``, the deliberate path: every config :func:`prune_configs` keeps is
  compiled and timed. Its picks are kept on disk (:mod:`~gemmzoo_triton.core.picks_store`), and a
  quick backend launches a problem's full pick wherever one exists, in any later process.
"""

from __future__ import annotations

import functools
import inspect
import math
from collections.abc import Callable
from typing import Any

import triton

from gemmzoo_triton.core import picks_store, triton_internals
from gemmzoo_triton.core.env import interpreter_mode

#: Configs a quick autotune compiles and times at most: the model's best ones.
QUICK_CONFIGS = 2


def make_config(
    bm: int, bn: int, bk: int, stages: int, warps: int, group: int = 8, pre_hook: Any = None
) -> triton.Config:
    """A config of the grouped kernels' block shapes, group size, stages and warps."""
    blocks = {"BLOCK_SIZE_M": bm, "BLOCK_SIZE_N": bn, "BLOCK_SIZE_K": bk, "GROUP_SIZE_M": group}
    return triton.Config(blocks, num_stages=stages, num_warps=warps, pre_hook=pre_hook)


#: Problems with M*N*K at most this (256^3) run the smallest config without autotuning: they take
#: microseconds, and tuning them would compile and time every config for each new shape.
SMALL_PROBLEM = 2**24


#: Shared memory a program may use on Hopper (227 KiB): the limit where no CUDA device says one.
SHARED_MEMORY = 227 * 1024

#: IEEE fp32 runs on the FMA units, where tiles over this many elements of C only spill.
FMA_TILE = 128 * 64


def prune_configs(
    configs: list[triton.Config], named_args: dict[str, Any], **kwargs: Any
) -> list[triton.Config]:
    """Drop configs that cannot pay off for this problem before they are compiled and timed.

    First dropped, whatever the problem: configs that need more shared memory than the device
    gives a block (:func:`shared_memory_need` against ``shared_memory_per_block_optin``; such a
    config raises ``OutOfResources`` at launch). Small problems then get the smallest config
    alone. Otherwise dropped: blocks much taller (wider) than M (N), whose extra rows (columns)
    are masked-off work; and, for IEEE fp32, tiles too large for the FMA units.
    """
    m, n, k = named_args["M"], named_args["N"], named_args["K"]
    size = _element_size(named_args)
    limit, stages_c = _shared_memory(named_args)
    # never launched, timed or kept: a config that needs more shared memory than the device has
    configs = [c for c in configs if shared_memory_need(c, size, stages_c) <= limit] or \
        sorted(configs, key=lambda c: shared_memory_need(c, size, stages_c))[:1]
    by_area = sorted(configs, key=lambda c: c.kwargs["BLOCK_SIZE_M"] * c.kwargs["BLOCK_SIZE_N"])
    if m * n * k <= SMALL_PROBLEM:
        return by_area[:1]
    m_cap, n_cap = max(64, triton.next_power_of_2(m)), max(64, triton.next_power_of_2(n))

    def fits(config: triton.Config) -> bool:
        bm, bn = config.kwargs["BLOCK_SIZE_M"], config.kwargs["BLOCK_SIZE_N"]
        if bm > m_cap or bn > n_cap:
            return False
        return kwargs.get("PRECISION") != "ieee" or size != 4 or bm * bn <= FMA_TILE

    return [c for c in configs if fits(c)] or by_area[:1]


#: Bytes a kernel keeps in shared memory besides its operand stages and C tile (mbarriers, the
#: scheduler's few words), rounded up.
SHARED_MEMORY_SLACK = 1024


def shared_memory_need(config: triton.Config, element_size: int, stages_c: bool) -> int:
    """The shared memory ``config`` needs: its pipeline's A and B tiles (``num_stages`` of each),
    the C tile where the kernel stores C through shared memory (the TMA kernels: C in the
    operands' type, bfloat16 for one-byte operands), and :data:`SHARED_MEMORY_SLACK`."""
    bm, bn, bk = (config.kwargs[f"BLOCK_SIZE_{d}"] for d in "MNK")
    need = config.num_stages * (bm + bn) * bk * element_size + SHARED_MEMORY_SLACK
    if stages_c:
        need += bm * bn * max(element_size, 2)
    return need


def _shared_memory(named_args: dict[str, Any]) -> tuple[int, bool]:
    """The device's shared memory per block (:data:`SHARED_MEMORY` off CUDA) and whether the
    kernel stages C in shared memory (its operands are tensor descriptors)."""
    a = next(iter(named_args.values()))
    tensor = getattr(a, "base", a)
    from gemmzoo_triton.core import hopper

    limit = hopper.shared_memory_limit(getattr(tensor, "device", None)) or SHARED_MEMORY
    return limit, hasattr(a, "base")


def _element_size(named_args: dict[str, Any]) -> int:
    """The bytes per element of A: the kernels' first argument, a tensor or a tensor descriptor."""
    a = next(iter(named_args.values()))
    return getattr(a, "base", a).element_size()



def autotune_options() -> dict[str, Any]:
    """``cache_results=True`` where this Triton has it (3.4 and later): tuning results on disk."""
    if "cache_results" in inspect.signature(triton.autotune).parameters:
        return {"cache_results": True}
    return {}


#: SMs assumed where the operands are not on a CUDA device (the interpreter): a large Hopper part's.
DEFAULT_SMS = 132

#: Rows x columns of a tile at and above which its operand reuse stops limiting it: the tile's
#: ``bm·bn/(bm+bn)`` (multiply-adds per element loaded) compared with this.
FULL_REUSE = 64

#: Bytes of K a tile's step should load per row to fill the widest shared-memory swizzle.
STEP_BYTES = 128


def estimated_cost(config: triton.Config, m: int, n: int, k: int, element_size: int, sms: int) -> float:
    """A relative time for ``config`` on an M x N x K problem: the model a quick autotune ranks by.

    Programs run in waves over the SMs (``PROGRAMS_PER_SM`` at a time on each, one by default);
    each computes a whole tile, edges included (the masked rows and columns past M and N and the
    K steps past K are work done for nothing); a tile whose operand reuse is under
    :data:`FULL_REUSE` waits on memory in proportion; K steps narrower than :data:`STEP_BYTES`
    and pipelines longer than the K loop cost a little more.
    """
    bm, bn, bk = (config.kwargs[f"BLOCK_SIZE_{d}"] for d in "MNK")
    per_sm = max(1, int(config.kwargs.get("PROGRAMS_PER_SM", 1) or 1))
    tiles = math.ceil(m / bm) * math.ceil(n / bn)
    waves = math.ceil(tiles / (sms * per_sm)) * per_sm
    steps = math.ceil(k / bk)
    reuse = min(1.0, (bm * bn / (bm + bn)) / FULL_REUSE)
    cost = waves * bm * bn * steps * bk / reuse
    if bk * element_size < STEP_BYTES:
        cost *= 1.1
    if config.num_stages > steps + 1:
        cost *= 1.05
    return cost


def quick_prune(
    configs: list[triton.Config], named_args: dict[str, Any], *, keep: int = QUICK_CONFIGS, **kwargs: Any
) -> list[triton.Config]:
    """:func:`prune_configs`, then the ``keep`` best by :func:`estimated_cost` (default
    :data:`QUICK_CONFIGS`; equal costs keep the configs' order)."""
    kept = prune_configs(configs, named_args, **kwargs)
    if len(kept) <= keep:
        return kept
    m, n, k = named_args["M"], named_args["N"], named_args["K"]
    a = next(iter(named_args.values()))
    device = getattr(getattr(a, "base", a), "device", None)
    sms = DEFAULT_SMS
    if device is not None and device.type == "cuda":
        from gemmzoo_triton.core import hopper

        sms = hopper.num_sms(device)
    size = _element_size(named_args)
    return sorted(kept, key=lambda c: estimated_cost(c, m, n, k, size, sms))[:keep]


class _Tuners:
    """A kernel's two autotuners over one ``triton.jit`` function, the configs they share, and how
    many of them the quick one times at most."""

    __slots__ = ("configs", "full", "quick", "quick_configs")

    def __init__(self, full: Any, quick: Any, configs: list[triton.Config], quick_configs: int) -> None:
        self.full, self.quick, self.configs, self.quick_configs = full, quick, configs, quick_configs


#: Each autotuned kernel's tuners, by the kernel's name.
_TUNERS: dict[str, _Tuners] = {}


def autotuned(configs: list[triton.Config], key: list[str],
              quick_configs: int = QUICK_CONFIGS) -> Callable[[Any], Any]:
    """``triton.autotune`` in both modes: decorates a ``triton.jit`` function and returns the full
    mode's autotuner (pruned by :func:`prune_configs`); :func:`launch_tuned` finds the quick one
    (pruned by :func:`quick_prune` to the ``quick_configs`` best, default :data:`QUICK_CONFIGS`).
    Both keep their results on disk where Triton can."""
    if isinstance(quick_configs, bool) or not isinstance(quick_configs, int) or quick_configs < 1:
        raise ValueError(f"quick_configs: a whole number of configs, at least 1; got {quick_configs!r}")

    def decorate(fn: Any) -> Any:
        def tuner(prune: Callable[..., list[triton.Config]]) -> Any:
            return triton.autotune(configs=configs, key=key, prune_configs_by={"early_config_prune": prune},
                                   **autotune_options())(fn)

        full, quick = tuner(prune_configs), tuner(functools.partial(quick_prune, keep=quick_configs))
        _TUNERS[fn.__name__] = _Tuners(full, quick, list(configs), quick_configs)
        return full

    return decorate


def tuner(kernel: Any, mode: str) -> Any:
    """The autotuner of ``kernel`` (made by :func:`autotuned`) that tunes in ``mode``."""
    tuners = _TUNERS[triton_internals.kernel_name(kernel)]
    return tuners.full if mode == "full" else tuners.quick


#: The config picked for each problem this process has seen, by the kernel's name and the
#: problem's key (see :func:`launch_tuned`). Later calls launch it straight through the kernel:
#: the autotuner's per-call path costs host time of its own, which shows in the timings of small
#: products (docs/results/2026-11-21-h100-triton.md).
PICKED: dict[tuple[Any, ...], triton.Config] = {}

#: The keys of :data:`PICKED` whose config a full autotune picked.
FULL_PICKS: set[tuple[Any, ...]] = set()


def picked(kernel: Any, key: tuple[Any, ...], mode: str = "quick") -> triton.Config | None:
    """The config a problem of ``key`` launches in ``mode``, or None before it is tuned: a full
    pick (this process's, else one kept on disk) in either mode; in quick mode, else the quick pick."""
    picked_key = (triton_internals.kernel_name(kernel), *key)
    config = PICKED.get(picked_key)
    if config is not None and (mode == "quick" or picked_key in FULL_PICKS):
        return config
    tuners = _TUNERS.get(picked_key[0])
    stored = picks_store.load(picked_key, tuners.configs) if tuners is not None else None
    if stored is not None:
        PICKED[picked_key] = stored
        FULL_PICKS.add(picked_key)
    return stored


def _compile_at_once(kernel: Any, configs: list[triton.Config], args: tuple[Any, ...],
                     options: dict[str, Any], named_args: dict[str, Any]) -> None:
    """Compile the configs an autotuner is about to time in parallel first
    (:func:`~gemmzoo_triton.core.triton_internals.compile_at_once`); not under the interpreter,
    which compiles nothing."""
    if not interpreter_mode():
        triton_internals.compile_at_once(triton_internals.jit_function(kernel), configs, args, options,
                                         named_args)


def launch_tuned(
    kernel: Any, grid: Any, args: tuple[Any, ...], options: dict[str, Any], key: tuple[Any, ...],
    mode: str = "quick",
) -> triton.Config:
    """Launch an autotuned ``kernel`` on ``grid`` (a function of the config); return the config.

    A problem's first call in ``mode`` tunes it (see the module docstring); :data:`PICKED`
    remembers the pick under the kernel's name and ``key`` (and a full pick on disk), and later
    calls launch it directly, without the autotuner's per-call cost. The autotuner runs a config's
    ``pre_hook`` before its launches; a direct launch runs it here.
    """
    picked_key = (triton_internals.kernel_name(kernel), *key)
    config = picked(kernel, key, mode)
    named_args: dict[str, Any] | None = None
    if config is None:
        tuners = _TUNERS.get(picked_key[0])
        # args: the leading ones
        named_args = dict(zip(triton_internals.argument_names(kernel), args, strict=False))
        if mode == "full" or tuners is None:
            if tuners is not None:
                _compile_at_once(kernel, prune_configs(tuners.configs, named_args, **options), args, options,
                                 named_args)
            kernel[grid](*args, **options)
            config = PICKED[picked_key] = triton_internals.picked_config(kernel)
            if mode == "full":
                FULL_PICKS.add(picked_key)
                picks_store.save(picked_key, config)
            return config
        quick = quick_prune(tuners.configs, named_args, keep=tuners.quick_configs, **options)
        if len(quick) > 1:
            _compile_at_once(kernel, quick, args, options, named_args)
            tuners.quick[grid](*args, **options)
            config = PICKED[picked_key] = triton_internals.picked_config(tuners.quick)
            return config
        config = PICKED[picked_key] = quick[0]  # nothing to time: launched directly below
    config_kwargs = config.all_kwargs()
    if config.pre_hook is not None:
        if named_args is None:
            named_args = dict(zip(triton_internals.argument_names(kernel), args, strict=False))
        config.pre_hook({**named_args, **options, **config_kwargs})
    triton_internals.jit_function(kernel)[grid(config_kwargs)](*args, **options, **config_kwargs)
    return config
