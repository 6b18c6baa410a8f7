"""Train steps of the example transformer (``model.py``) through ``gemmzoo.matmul``, or stock torch.

    python examples/transformer/train_step.py                      # tiny model on the CPU, gemmzoo
    python examples/transformer/train_step.py --stock              # the same through torch.matmul
    python examples/transformer/train_step.py --gpt2 --device cuda --dtype bfloat16
    python examples/transformer/train_step.py --n-embd 1024 --vocab 32000 --device cuda --dtype bfloat16

Each step clears the gradients, runs forward and backward, and prints the loss and the step time.
The first step makes gemmzoo's plans (and records the problems it met for
``gemmzoo tune --recorded``); run that command with the same ``GEMMZOO_CACHE_DIR``, then this
script again, to run on the tuned choices.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from model import PRESETS, Config, batch_of, build, step

DTYPES = {"float32": torch.float32, "float64": torch.float64, "bfloat16": torch.bfloat16,
          "float16": torch.float16}


SIZES = ("n_layer", "n_head", "n_embd", "vocab_size", "seq_len", "batch")


def add_config_arguments(parser: argparse.ArgumentParser) -> None:
    """``--gpt2``, ``--tiny`` or ``--preset NAME``, ``--config name=value,...``, and one option
    per size of :class:`model.Config`."""
    parser.add_argument("--gpt2", action="store_true", help="GPT-2 small's sizes (default on CUDA)")
    parser.add_argument("--tiny", action="store_true", help="a tiny model (default on the CPU)")
    parser.add_argument("--preset", choices=sorted(PRESETS),
                        help="a named model's sizes (llama-*: SwiGLU MLPs, untied sizes as published)")
    parser.add_argument("--config", metavar="NAME=VALUE,...",
                        help="sizes on top of the base (preset, --gpt2, --tiny or the device's default), "
                             "e.g. n_embd=1024,n_head=16,n_layer=4,mlp=swiglu,n_inner=2816,vocab_size=32000")
    for option, field in (("--n-layer", "n_layer"), ("--n-head", "n_head"), ("--n-embd", "n_embd"),
                          ("--vocab", "vocab_size"), ("--seq", "seq_len"), ("--batch", "batch")):
        parser.add_argument(option, dest=field, type=int, metavar="N", help=f"override {field}")


def config_from(args: argparse.Namespace, device: str, cpu_default: Config | None = None) -> Config:
    """The configuration the arguments ask for: ``--preset``'s, else GPT-2 small on CUDA and
    ``cpu_default`` (tiny) on the CPU unless ``--gpt2`` or ``--tiny`` says otherwise; then
    ``--config``'s sizes, then each size option given."""
    if args.preset:
        base = PRESETS[args.preset]
    elif args.tiny:
        base = Config.tiny()
    elif args.gpt2 or device == "cuda":
        base = Config()
    else:
        base = cpu_default or Config.tiny()
    if args.config:
        base = Config.parse(args.config, base)
    sizes = {name: getattr(args, name) for name in SIZES if getattr(args, name) is not None}
    return Config(**{**base.__dict__, **sizes})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_config_arguments(parser)
    parser.add_argument("--stock", action="store_true", help="torch.matmul instead of gemmzoo.matmul")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtype", choices=DTYPES, default="float32")
    parser.add_argument("--steps", type=int, default=3)
    args = parser.parse_args(argv)
    config = config_from(args, args.device)
    model = build(config, matmul=torch.matmul if args.stock else None, device=args.device,
                  dtype=DTYPES[args.dtype])
    tokens, targets = batch_of(config, device=args.device)
    print(f"{'stock torch.matmul' if args.stock else 'gemmzoo.matmul'}: {config}", flush=True)
    for index in range(args.steps):
        started = time.perf_counter()
        loss = step(model, tokens, targets)
        if args.device == "cuda":
            torch.cuda.synchronize()
        took = time.perf_counter() - started
        print(f"step {index}: loss {loss.item():.6f}, {took * 1e3:.1f} ms", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
