"""A before-training estimate of peak memory, so impossible settings fail in seconds.

The estimate is deliberately simple and a little generous (it is a guard, not a profiler):

- float32 master weights, gradients and AdamW's two moments: ``16 * n_params`` bytes (the
  trainer keeps them in float32 whatever the autocast dtype); a frozen reference model adds
  ``n_params * bytes`` when the KL term is on, with ``bytes`` the compute dtype's size;
- training activations of one micro-batch: ``rows * L * layers * (12 * hidden + 3 *
  intermediate) * bytes`` (what a pre-norm decoder layer keeps per token for backward: norms,
  q/k/v/o, residuals, and the gate/up/activation of the MLP; close to Korthikanti et al. 2022's
  count without the attention-score term, which fused SDPA kernels do not store), divided by
  ``layers`` under gradient checkpointing;
- the log-prob head: three fp32 ``[rows, chunk, vocab]`` blocks (logits, softmax, grad);
- the rollout KV cache: ``2 * rows * L * layers * kv_heads * head_dim * bytes``.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class MemoryEstimate:
    parts: dict[str, int]
    available: int
    device: str

    @property
    def total(self) -> int:
        return sum(self.parts.values())

    def describe(self) -> str:
        gib = 2 ** 30
        items = ", ".join(f"{k} {v / gib:.2f}" for k, v in self.parts.items())
        return (f"estimated {self.total / gib:.2f} GiB ({items}) vs {self.available / gib:.2f} GiB "
                f"available on {self.device}")


def available_bytes(device: torch.device) -> int:
    """Free memory on ``device``: CUDA's free bytes, or the kernel's ``MemAvailable``."""
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return int(free)
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    import os

    return int(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))


def estimate_training_memory(model, *, rollout_rows: int, train_rows: int, prompt_tokens: int,
                             response_tokens: int, chunk_size: int, with_reference: bool,
                             gradient_checkpointing: bool, device: torch.device,
                             compute_bytes: int | None = None) -> MemoryEstimate:
    """``compute_bytes``: bytes per element of the autocast dtype (default: the parameters')."""
    cfg = model.config
    n_params = sum(p.numel() for p in model.parameters())
    nbytes = compute_bytes or next(model.parameters()).element_size()
    hidden = int(getattr(cfg, "hidden_size", 0) or 0)
    layers = int(getattr(cfg, "num_hidden_layers", 1) or 1)
    heads = int(getattr(cfg, "num_attention_heads", 1) or 1)
    kv_heads = int(getattr(cfg, "num_key_value_heads", heads) or heads)
    head_dim = int(getattr(cfg, "head_dim", 0) or (hidden // heads if heads else 0))
    vocab = int(getattr(cfg, "vocab_size", 0) or 0)
    inter = int(getattr(cfg, "intermediate_size", 0) or 4 * hidden)
    length = prompt_tokens + response_tokens
    act_layers = 1 if gradient_checkpointing else layers
    parts = {
        "weights+grads+adam": 16 * n_params,
        "reference": n_params * nbytes if with_reference else 0,
        "activations": train_rows * length * act_layers * (12 * hidden + 3 * inter) * nbytes,
        "logprob_head": 3 * train_rows * min(chunk_size, response_tokens) * vocab * 4,
        "kv_cache": 2 * rollout_rows * length * layers * kv_heads * head_dim * nbytes,
    }
    return MemoryEstimate(parts, available_bytes(device), str(device))


def check_fits(estimate: MemoryEstimate) -> None:
    """Raise ``MemoryError`` with the breakdown and what to lower when the estimate does not fit."""
    if estimate.total > estimate.available:
        raise MemoryError(
            f"these settings do not fit in memory: {estimate.describe()}. Lower "
            "micro_batch_size, rollout.max_response_tokens, rollout.max_prompt_tokens or "
            "logprob_chunk_size, set gradient_checkpointing=true, or use a smaller model "
            "(memory_check=false skips this check)."
        )
