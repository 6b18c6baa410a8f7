"""A GPT-2-shaped transformer whose every projection and LM head is one matrix product call.

Built from a :class:`Config` with random weights (nothing is downloaded). Every 2-D product of the
model, the four projections of each block and the LM head (tied to the token embedding, as in
GPT-2), goes through the function the model is given: ``gemmzoo.matmul`` by default, or
``torch.matmul`` for the stock model. Everything else is plain torch (attention through
``scaled_dot_product_attention``, layer norms, GELU, cross-entropy), so two models that differ only
in that function compute the same thing, and their step times differ only by their products.

A projection holds its weight as ``torch.nn.Linear`` does, ``out x in``, and computes
``x · Wᵀ`` on the activations flattened to rows: the forward product has layout NT (B stored
column by column), and autograd's products are ``dX = dY · W`` (NN) and ``dW = dYᵀ · X`` (TN, the
weight's gradient in the weight's own layout).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import torch
import torch.nn.functional as F  # noqa: N812 (the name torch uses)
from torch import nn

Matmul = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


@dataclass(frozen=True)
class Config:
    """The model's sizes: GPT-2 small by default; ``batch`` sequences of ``seq_len`` tokens a step."""

    n_layer: int = 12
    n_head: int = 12
    n_embd: int = 768
    vocab_size: int = 50257
    seq_len: int = 1024
    batch: int = 8

    def __post_init__(self) -> None:
        for name in ("n_layer", "n_head", "n_embd", "vocab_size", "seq_len", "batch"):
            if getattr(self, name) < 1:
                raise ValueError(f"Config.{name} must be at least 1, not {getattr(self, name)}")
        if self.n_embd % self.n_head:
            raise ValueError(f"Config: n_embd ({self.n_embd}) must be a multiple of n_head ({self.n_head})")

    @classmethod
    def tiny(cls, **sizes: int) -> Config:
        """A model that trains a step in well under a second on a CPU; its vocabulary (101) is
        misaligned on purpose, as GPT-2's 50257 is."""
        return replace(cls(n_layer=2, n_head=2, n_embd=32, vocab_size=101, seq_len=16, batch=2), **sizes)

    def problems(self) -> list[tuple[str, int, int, int]]:
        """The forward products of a step: ``(name, M, N, K)`` with their count per step in the
        name's place of a block (each block has one of each); the LM head last."""
        rows, c = self.batch * self.seq_len, self.n_embd
        return [("attn.qkv", rows, 3 * c, c), ("attn.proj", rows, c, c), ("mlp.fc", rows, 4 * c, c),
                ("mlp.proj", rows, c, 4 * c), ("lm_head", rows, self.vocab_size, c)]


def gemmzoo_matmul() -> Matmul:
    """``gemmzoo.matmul`` (imported here, so the stock model needs no gemmzoo)."""
    import gemmzoo

    return gemmzoo.matmul


class Projection(nn.Module):
    """``torch.nn.Linear`` with its product through ``model.matmul``: ``x · Wᵀ + b``."""

    def __init__(self, model: GPT, n_in: int, n_out: int) -> None:
        super().__init__()
        self._model = [model]  # not a submodule: a list keeps it out of the module tree
        self.weight = nn.Parameter(torch.empty(n_out, n_in))
        self.bias = nn.Parameter(torch.zeros(n_out))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.reshape(-1, x.shape[-1])
        y = self._model[0].matmul(rows, self.weight.t()) + self.bias
        return y.view(*x.shape[:-1], y.shape[-1])


class Block(nn.Module):
    """One transformer block: causal self-attention and an MLP, each after a layer norm."""

    def __init__(self, model: GPT, config: Config) -> None:
        super().__init__()
        c = config.n_embd
        self.n_head = config.n_head
        self.ln_1 = nn.LayerNorm(c)
        self.qkv = Projection(model, c, 3 * c)
        self.attn_proj = Projection(model, c, c)
        self.ln_2 = nn.LayerNorm(c)
        self.fc = Projection(model, c, 4 * c)
        self.mlp_proj = Projection(model, 4 * c, c)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, c = x.shape
        q, k, v = self.qkv(self.ln_1(x)).split(c, dim=2)
        heads = [t.view(batch, seq, self.n_head, c // self.n_head).transpose(1, 2) for t in (q, k, v)]
        attended = F.scaled_dot_product_attention(*heads, is_causal=True)
        x = x + self.attn_proj(attended.transpose(1, 2).reshape(batch, seq, c))
        return x + self.mlp_proj(F.gelu(self.fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    """The model: token and position embeddings, ``n_layer`` blocks, a final layer norm and the
    LM head tied to the token embedding. ``matmul`` computes every product (default
    ``gemmzoo.matmul``); set the attribute to swap it."""

    def __init__(self, config: Config, matmul: Matmul | None = None) -> None:
        super().__init__()
        self.config = config
        self.matmul: Matmul = matmul if matmul is not None else gemmzoo_matmul()
        self.wte = nn.Embedding(config.vocab_size, config.n_embd)
        self.wpe = nn.Embedding(config.seq_len, config.n_embd)
        self.blocks = nn.ModuleList(Block(self, config) for _ in range(config.n_layer))
        self.ln_f = nn.LayerNorm(config.n_embd)

    def forward(self, tokens: torch.Tensor, targets: torch.Tensor | None = None) -> Any:
        """The logits (``batch x seq x vocab``), or the mean cross-entropy loss against ``targets``
        (computed in float32)."""
        seq = tokens.shape[1]
        positions = torch.arange(seq, device=tokens.device)
        x = self.wte(tokens) + self.wpe(positions)
        for block in self.blocks:
            x = block(x)
        x = self.ln_f(x)
        logits = self.matmul(x.reshape(-1, x.shape[-1]), self.wte.weight.t())
        if targets is None:
            return logits.view(*tokens.shape, -1)
        return F.cross_entropy(logits.float(), targets.reshape(-1))


def build(config: Config, *, matmul: Matmul | None = None, device: str = "cpu",
          dtype: torch.dtype = torch.float32, seed: int = 0) -> GPT:
    """A model with GPT-2's initialisation drawn from ``seed`` (the same weights for the same
    seed, whatever ``matmul``), on ``device`` in ``dtype``."""
    model = GPT(config, matmul)
    generator = torch.Generator().manual_seed(seed)
    scaled = 0.02 / math.sqrt(2 * config.n_layer)  # GPT-2's residual projections
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if name.endswith("bias"):
                parameter.zero_()
            elif ".ln_" in name or name.startswith("ln_"):
                parameter.fill_(1.0)
            else:
                std = scaled if name.endswith(("attn_proj.weight", "mlp_proj.weight")) else 0.02
                parameter.normal_(0.0, std, generator=generator)
    return model.to(device=device, dtype=dtype)


def batch_of(config: Config, *, device: str = "cpu", seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """Random tokens and targets for one step: ``batch x seq_len`` each."""
    generator = torch.Generator().manual_seed(seed)
    shape = (config.batch, config.seq_len + 1)
    tokens = torch.randint(0, config.vocab_size, shape, generator=generator).to(device)
    return tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()


def step(model: GPT, tokens: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """One training step's work without the optimizer: gradients cleared, forward, backward; the
    loss (detached)."""
    model.zero_grad(set_to_none=True)
    loss = model(tokens, targets)
    loss.backward()
    return loss.detach()
