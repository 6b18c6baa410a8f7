"""A GPT-2-shaped transformer whose every projection and LM head is one matrix product call.

Built from a :class:`Config` with random weights (nothing is downloaded). Every 2-D product of the
model, the projections of each block and the LM head (tied to the token embedding, as in
GPT-2), goes through the function the model is given: ``gemmzoo.matmul`` by default, or
``torch.matmul`` for the stock model. Everything else is plain torch (attention through
``scaled_dot_product_attention``, layer norms, GELU, cross-entropy), so two models that differ only
in that function compute the same thing, and their step times differ only by their products.

A projection holds its weight as ``torch.nn.Linear`` does, ``out x in``, and computes
``x · Wᵀ`` on the activations flattened to rows: the forward product has layout NT (B stored
column by column), and autograd's products are ``dX = dY · W`` (NN) and ``dW = dYᵀ · X`` (TN, the
weight's gradient in the weight's own layout).

The MLP is GPT-2's (``mlp="gelu"``: ``fc`` to ``n_inner`` then GELU then back) or Llama's
(``mlp="swiglu"``: ``down(silu(gate(x)) * up(x))``, three products, ``gate`` and ``up`` of one
shape), so the products of other model families can be had from the same code; :data:`PRESETS`
names a few.
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
    #: ``"gelu"`` (GPT-2's MLP) or ``"swiglu"`` (Llama's gated MLP).
    mlp: str = "gelu"
    #: The MLP's inner width; 0: ``4 * n_embd`` for GELU, Llama's ``8/3 * n_embd`` rounded up to a
    #: multiple of 256 for SwiGLU.
    n_inner: int = 0

    def __post_init__(self) -> None:
        for name in ("n_layer", "n_head", "n_embd", "vocab_size", "seq_len", "batch"):
            if getattr(self, name) < 1:
                raise ValueError(f"Config.{name} must be at least 1, not {getattr(self, name)}")
        if self.n_embd % self.n_head:
            raise ValueError(f"Config: n_embd ({self.n_embd}) must be a multiple of n_head ({self.n_head})")
        if self.mlp not in MLPS:
            raise ValueError(f"Config.mlp must be one of {', '.join(MLPS)}, not {self.mlp!r}")
        if self.n_inner < 0:
            raise ValueError(f"Config.n_inner must be at least 0 (0: the default), not {self.n_inner}")

    @property
    def inner(self) -> int:
        """The MLP's inner width (see :attr:`n_inner`)."""
        if self.n_inner:
            return self.n_inner
        if self.mlp == "swiglu":
            return -(-8 * self.n_embd // 3 // 256) * 256
        return 4 * self.n_embd

    @classmethod
    def parse(cls, text: str, base: Config | None = None) -> Config:
        """``base`` (default: GPT-2 small) with the sizes of ``text``: ``name=value`` pairs joined
        by commas (``n_embd=1024,n_layer=4,mlp=swiglu``); an unknown name is refused by name."""
        base = base if base is not None else cls()
        known = {name: type(value) for name, value in base.__dict__.items()}
        sizes: dict[str, Any] = {}
        for item in filter(None, (part.strip() for part in text.split(","))):
            name, _, value = item.partition("=")
            name = name.strip().replace("-", "_")
            if name not in known or not value.strip():
                raise ValueError(f"Config: {item!r} is not name=value for a name of {', '.join(known)}")
            kind, value = known[name], value.strip()
            try:
                sizes[name] = kind(value)
            except ValueError:
                raise ValueError(f"Config: {name} must be {kind.__name__}, not {value!r}") from None
        return replace(base, **sizes)

    @classmethod
    def tiny(cls, **sizes: int) -> Config:
        """A model that trains a step in well under a second on a CPU; its vocabulary (101) is
        misaligned on purpose, as GPT-2's 50257 is."""
        return replace(cls(n_layer=2, n_head=2, n_embd=32, vocab_size=101, seq_len=16, batch=2), **sizes)

    def problems(self) -> list[tuple[str, int, int, int]]:
        """The forward products of a step: ``(name, M, N, K)`` with their count per step in the
        name's place of a block (each block has one of each); the LM head last."""
        rows, c, inner = self.batch * self.seq_len, self.n_embd, self.inner
        mlp = [("mlp.fc", rows, inner, c)] if self.mlp == "gelu" else [("mlp.gate", rows, inner, c),
                                                                      ("mlp.up", rows, inner, c)]
        return [("attn.qkv", rows, 3 * c, c), ("attn.proj", rows, c, c), *mlp,
                ("mlp.proj", rows, c, inner), ("lm_head", rows, self.vocab_size, c)]


MLPS = ("gelu", "swiglu")
#: Named configurations: GPT-2 small and medium, and Llama-shaped ones (SwiGLU MLPs) whose
#: sizes are the published models' with fewer layers where a step would take long (the products
#: of a step are those of the full model, each fewer times).
PRESETS = {
    "gpt2": Config(),
    "gpt2-medium": Config(n_layer=24, n_head=16, n_embd=1024),
    "llama-1b": Config(n_layer=16, n_head=32, n_embd=2048, vocab_size=128256, batch=4, mlp="swiglu",
                       n_inner=8192),
    "llama-7b-4layers": Config(n_layer=4, n_head=32, n_embd=4096, vocab_size=32000, batch=4, mlp="swiglu",
                               n_inner=11008),
}


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
        inner = config.inner
        self.swiglu = config.mlp == "swiglu"
        if self.swiglu:
            self.gate = Projection(model, c, inner)
            self.up = Projection(model, c, inner)
        else:
            self.fc = Projection(model, c, inner)
        self.mlp_proj = Projection(model, inner, c)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, c = x.shape
        q, k, v = self.qkv(self.ln_1(x)).split(c, dim=2)
        heads = [t.view(batch, seq, self.n_head, c // self.n_head).transpose(1, 2) for t in (q, k, v)]
        attended = F.scaled_dot_product_attention(*heads, is_causal=True)
        x = x + self.attn_proj(attended.transpose(1, 2).reshape(batch, seq, c))
        h = self.ln_2(x)
        if self.swiglu:
            return x + self.mlp_proj(F.silu(self.gate(h)) * self.up(h))
        return x + self.mlp_proj(F.gelu(self.fc(h), approximate="tanh"))


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
