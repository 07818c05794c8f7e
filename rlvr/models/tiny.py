"""Architecture of the tiny base models: a ~1M-parameter Qwen2 causal LM.

Same architecture class as Qwen2.5 (``Qwen2ForCausalLM``), so the trainer's code path is the one
that serves the paper-scale models. The default size comes from measurements on the project's
2-core CPU (docs/tiny_models.md): a 1.05M-parameter model reached greedy K&K accuracy
0.63/0.34/0.28/0.11 on 2/3/4/5 people after 10 minutes of training at ~6.8k tokens/s, while a 5M
model was ~3x slower per token and no better at equal wall time.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import Qwen2ForCausalLM

from rlvr.models.micro import micro_config


@dataclass(frozen=True)
class ArchConfig:
    """Qwen2 shape. Defaults: ~0.9M parameters plus ``vocab_size * hidden_size`` (tied)
    embeddings."""

    hidden_size: int = 128
    num_layers: int = 4
    num_heads: int = 4
    num_kv_heads: int = 2
    intermediate_size: int = 384
    max_position_embeddings: int = 1024

    def __post_init__(self):
        for name in (
            "hidden_size",
            "num_layers",
            "num_heads",
            "num_kv_heads",
            "intermediate_size",
            "max_position_embeddings",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"ArchConfig.{name} must be >= 1, got {getattr(self, name)}")
        if self.hidden_size % self.num_heads:
            raise ValueError(
                f"ArchConfig.hidden_size={self.hidden_size} is not a multiple of "
                f"num_heads={self.num_heads}"
            )
        if self.num_heads % self.num_kv_heads:
            raise ValueError(
                f"ArchConfig.num_heads={self.num_heads} is not a multiple of "
                f"num_kv_heads={self.num_kv_heads}"
            )


def build_tiny(arch: ArchConfig, tokenizer, seed: int = 0) -> Qwen2ForCausalLM:
    """A freshly initialised Qwen2 model of shape ``arch`` for ``tokenizer``; same seed, same
    weights."""
    config = micro_config(
        len(tokenizer),
        hidden_size=arch.hidden_size,
        num_layers=arch.num_layers,
        num_heads=arch.num_heads,
        num_kv_heads=arch.num_kv_heads,
        intermediate_size=arch.intermediate_size,
        max_position_embeddings=arch.max_position_embeddings,
    )
    config.pad_token_id = tokenizer.pad_token_id
    config.eos_token_id = tokenizer.eos_token_id
    config.bos_token_id = None
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Qwen2ForCausalLM(config)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    return model


def count_parameters(model) -> int:
    """Distinct parameters (tied embeddings counted once)."""
    return sum(p.numel() for p in model.parameters())
