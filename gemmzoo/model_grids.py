"""Grids of the products real models run, built from their public configurations, with how many
times each runs in one forward pass.

A model grid is a list of :class:`ModelPoint`: a problem of any class (:mod:`gemmzoo.problems.classes`)
and its count per forward pass of ``tokens`` tokens (one prefill of that many tokens, batch 1).
Dense projections are ``gemm`` problems (fused QKV, attention output, fused gate/up, down, the
LM head); attention scores and values are ``batched`` problems (one matrix per head);
mixture-of-experts layers are ``grouped`` problems (one group per expert, tokens spread evenly
by top-k routing); DeepSeek-V3's projections are ``scaled`` blockwise FP8 problems, as its
checkpoints store them. :func:`weighted_summary` turns measured times into "this model's GEMM time,
best backend against the baseline", each point weighted by its count.

The configurations are those published with each model (``config.json`` on its model card):
hidden size, intermediate size, heads, key/value heads, head dimension, layers, vocabulary,
experts and experts per token.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from gemmzoo.problems.classes import Problem


@dataclass(frozen=True)
class ModelPoint:
    """One problem of a model's forward pass and how many times that pass runs it."""

    problem: Problem
    count: int
    role: str


@dataclass(frozen=True)
class _Dense:
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    head_dim: int
    layers: int
    vocab: int
    experts: int = 0
    top_k: int = 0


_DENSE_MODELS = {
    "llama3-8b": _Dense(4096, 14336, 32, 8, 128, 32, 128256),
    "llama3-70b": _Dense(8192, 28672, 64, 8, 128, 80, 128256),
    "qwen2.5-7b": _Dense(3584, 18944, 28, 4, 128, 28, 152064),
    "mixtral-8x7b": _Dense(4096, 14336, 32, 8, 128, 32, 32000, experts=8, top_k=2),
}


def _even_groups(tokens: int, experts: int, top_k: int) -> tuple[int, ...]:
    """Rows per expert when ``tokens`` tokens each pick ``top_k`` experts, spread evenly."""
    total = tokens * top_k
    base, extra = divmod(total, experts)
    return tuple(base + (1 if e < extra else 0) for e in range(experts))


def _transformer(config: _Dense, tokens: int, dtype: str) -> list[ModelPoint]:
    c, t = config, tokens
    qkv = (c.heads + 2 * c.kv_heads) * c.head_dim
    points = [
        ModelPoint(Problem(t, qkv, c.hidden, dtype=dtype), c.layers, "qkv"),
        ModelPoint(Problem(t, c.hidden, c.heads * c.head_dim, dtype=dtype), c.layers, "attn-out"),
        ModelPoint(Problem(t, t, c.head_dim, kind="batched", dtype=dtype, batch=(c.heads,)), c.layers,
                   "attn-scores"),
        ModelPoint(Problem(t, c.head_dim, t, kind="batched", dtype=dtype, batch=(c.heads,)), c.layers,
                   "attn-values"),
        ModelPoint(Problem(t, c.vocab, c.hidden, dtype=dtype), 1, "lm-head"),
    ]
    if c.experts:
        groups = _even_groups(t, c.experts, c.top_k)
        rows = sum(groups)
        points += [
            ModelPoint(Problem(rows, 2 * c.intermediate, c.hidden, kind="grouped", dtype=dtype,
                               groups=groups), c.layers, "moe-gate-up"),
            ModelPoint(Problem(rows, c.hidden, c.intermediate, kind="grouped", dtype=dtype, groups=groups),
                       c.layers, "moe-down"),
        ]
    else:
        points += [
            ModelPoint(Problem(t, 2 * c.intermediate, c.hidden, dtype=dtype), c.layers, "gate-up"),
            ModelPoint(Problem(t, c.hidden, c.intermediate, dtype=dtype), c.layers, "down"),
        ]
    return points


def _deepseek_v3(tokens: int, dtype: str) -> list[ModelPoint]:
    """DeepSeek-V3: 61 layers (3 dense, 58 MoE with 256 routed experts, 8 per token, and one
    shared expert), multi-head latent attention with 128 heads; projections in blockwise FP8."""
    t, hidden, heads, layers, dense_layers = tokens, 7168, 128, 61, 3
    moe_layers = layers - dense_layers

    def fp8(n: int, k: int, count: int, role: str) -> ModelPoint:
        scaled = Problem(t, n, k, kind="scaled", scaling="blockwise", dtype="float8_e4m3fn")
        return ModelPoint(scaled, count, role)

    groups = _even_groups(t, 256, 8)
    rows = sum(groups)
    return [
        fp8(1536, hidden, layers, "q-down"),
        fp8(heads * (128 + 64), 1536, layers, "q-up"),
        fp8(512 + 64, hidden, layers, "kv-down"),
        fp8(heads * (128 + 128), 512, layers, "kv-up"),
        fp8(hidden, heads * 128, layers, "attn-out"),
        ModelPoint(Problem(t, t, 192, kind="batched", dtype=dtype, batch=(heads,)), layers, "attn-scores"),
        ModelPoint(Problem(t, 128, t, kind="batched", dtype=dtype, batch=(heads,)), layers, "attn-values"),
        fp8(2 * 18432, hidden, dense_layers, "dense-gate-up"),
        fp8(hidden, 18432, dense_layers, "dense-down"),
        fp8(2 * 2048, hidden, moe_layers, "shared-gate-up"),
        fp8(hidden, 2048, moe_layers, "shared-down"),
        ModelPoint(Problem(rows, 2 * 2048, hidden, kind="grouped", dtype=dtype, groups=groups), moe_layers,
                   "moe-gate-up"),
        ModelPoint(Problem(rows, hidden, 2048, kind="grouped", dtype=dtype, groups=groups), moe_layers,
                   "moe-down"),
        ModelPoint(Problem(t, 129280, hidden, dtype=dtype), 1, "lm-head"),
    ]


#: The model grids, by name.
MODELS: tuple[str, ...] = (*_DENSE_MODELS, "deepseek-v3")


def model_grid(name: str, tokens: int = 4096, dtype: str = "bfloat16") -> list[ModelPoint]:
    """The problems of one forward pass of model ``name`` over ``tokens`` tokens, with counts;
    ``ValueError`` naming the known models otherwise."""
    if tokens < 1:
        raise ValueError(f"model grid {name!r}: tokens must be at least 1, not {tokens}")
    if name == "deepseek-v3":
        return _deepseek_v3(tokens, dtype)
    try:
        config = _DENSE_MODELS[name]
    except KeyError:
        raise ValueError(f"unknown model {name!r}; known: {', '.join(MODELS)}") from None
    return _transformer(config, tokens, dtype)


@dataclass(frozen=True)
class ModelSummary:
    """A model's GEMM time per forward pass with the best backend of each point and with the
    baseline, each point's time times its count; ``ratio`` is baseline over best (above 1: faster)."""

    best_s: float
    baseline_s: float
    ratio: float
    points: int
    missing: tuple[str, ...]


def weighted_summary(points: list[ModelPoint], times: Mapping[str, Mapping[str, float]],
                     baseline: str | Callable[[Problem], str]) -> ModelSummary:
    """Sum each point's count × time for the fastest backend measured at it and for ``baseline``
    (a backend name, or a function naming one per problem); ``times`` maps a problem's text to
    ``{backend: seconds}``. Points without a time for the baseline are left out and named in
    ``missing``."""
    best_total = base_total = 0.0
    used, missing = 0, []
    for point in points:
        measured = times.get(point.problem.text(), {})
        name = baseline(point.problem) if callable(baseline) else baseline
        if name not in measured or not measured:
            missing.append(point.problem.text())
            continue
        best_total += point.count * min(measured.values())
        base_total += point.count * measured[name]
        used += 1
    ratio = base_total / best_total if best_total > 0 else float("nan")
    return ModelSummary(best_total, base_total, ratio, used, tuple(missing))
