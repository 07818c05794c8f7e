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
- the rollout KV cache: ``2 * rows * L * layers * kv_heads * head_dim * bytes``; with a
  colocated vLLM engine, the engine's own reservation instead (``gpu_memory_utilization`` of the
  GPU: its weights and paged KV cache). In sleep mode the engine is empty during the update and
  the trainer's transient memory (activations, log-prob head) is not live during rollouts, so the
  peak is the resident part plus the larger of the two phases.

Activations and the KV cache count ``compute_bytes`` per element: 2 under bf16/fp16 autocast,
whose parameters (and so ``bytes`` above) stay fp32.

``estimate_for_config`` derives every argument from a ``TrainConfig``: the trainer's check and
the paper plan (``rlvr.reproduce.gpu_plan.plan_rows``) call it, so they cannot disagree. The
native trainer runs on one device; a run that does not fit one GPU goes to verl.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass
class MemoryEstimate:
    parts: dict[str, int]
    available: int
    device: str
    #: Phase -> parts live only in that phase; the peak holds the largest phase.
    phases: dict[str, tuple[str, ...]] = field(default_factory=dict)

    @property
    def total(self) -> int:
        phased = {k for names in self.phases.values() for k in names}
        resident = sum(v for k, v in self.parts.items() if k not in phased)
        return resident + max(
            (sum(self.parts[k] for k in names) for names in self.phases.values()), default=0
        )

    def describe(self) -> str:
        gib = 2**30
        items = ", ".join(f"{k} {v / gib:.2f}" for k, v in self.parts.items())
        phases = "".join(f"; {p}: {'+'.join(names)}" for p, names in self.phases.items())
        peak = ", peak of the larger phase" if self.phases else ""
        return (
            f"estimated {self.total / gib:.2f} GiB{peak} ({items}{phases}) vs "
            f"{self.available / gib:.2f} GiB available on {self.device}"
        )


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


def estimate_training_memory(
    model,
    *,
    rollout_rows: int,
    train_rows: int,
    prompt_tokens: int,
    response_tokens: int,
    chunk_size: int,
    with_reference: bool,
    gradient_checkpointing: bool,
    device: torch.device,
    compute_bytes: int | None = None,
    engine_bytes: int = 0,
    engine_sleeps: bool = False,
    available: int | None = None,
) -> MemoryEstimate:
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
    cbytes = compute_bytes or nbytes
    length = prompt_tokens + response_tokens
    act_layers = 1 if gradient_checkpointing else layers
    parts = {
        "weights+grads+adam": 16 * n_params,
        "reference": n_params * nbytes if with_reference else 0,
        "activations": train_rows * length * act_layers * (12 * hidden + 3 * inter) * cbytes,
        "logprob_head": 3 * train_rows * min(chunk_size, response_tokens) * vocab * 4,
        "kv_cache": (
            0 if engine_bytes else 2 * rollout_rows * length * layers * kv_heads * head_dim * cbytes
        ),
    }
    phases: dict[str, tuple[str, ...]] = {}
    if engine_bytes:
        parts["rollout_engine"] = int(engine_bytes)
        if engine_sleeps:
            phases = {"update": ("activations", "logprob_head"), "rollout": ("rollout_engine",)}
    avail = available_bytes(device) if available is None else int(available)
    return MemoryEstimate(parts, avail, str(device), phases)


def total_bytes(device: torch.device) -> int:
    """All memory of ``device`` (a CUDA GPU's total; the host's ``MemTotal``)."""
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[1])
    import os

    return int(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))


def estimate_for_config(
    model,
    cfg,
    device: torch.device,
    *,
    available: int | None = None,
    device_total: int | None = None,
) -> MemoryEstimate:
    """The estimate of the run ``cfg`` (a ``TrainConfig``) of ``model`` on ``device``.

    Training rows per forward are the micro-batch (else the mini-batch, else the batch), as in
    the update and the no-grad log-prob passes. A vLLM rollout engine reserves
    ``rollout.vllm_gpu_memory_utilization`` of ``device_total`` (default: the device's memory).
    """
    batch = cfg.prompts_per_step * cfg.group_size
    rows = cfg.micro_batch_size or cfg.mini_batch_size or batch
    vllm = cfg.rollout.backend == "vllm"
    engine = 0
    if vllm:
        total = device_total if device_total is not None else total_bytes(device)
        engine = int(cfg.rollout.vllm_gpu_memory_utilization * total)
    return estimate_training_memory(
        model,
        rollout_rows=batch,
        train_rows=rows,
        prompt_tokens=cfg.rollout.max_prompt_tokens,
        response_tokens=cfg.rollout.max_response_tokens,
        chunk_size=cfg.logprob_chunk_size,
        with_reference=cfg.loss.kl_coef > 0 or cfg.track_kl,
        gradient_checkpointing=cfg.gradient_checkpointing,
        device=device,
        compute_bytes=2 if cfg.dtype in ("bfloat16", "float16") else None,
        engine_bytes=engine,
        engine_sleeps=vllm and cfg.rollout.vllm_sleep_mode,
        available=available,
    )


#: Where runs too large for one GPU go (the native trainer does not shard).
VERL_ROUTE = (
    "the native trainer runs on one GPU and does not shard: train this size with "
    "verl (docs/integrations_verl.md; the paper plan marks such runs engine: verl)"
)


def check_fits(estimate: MemoryEstimate) -> None:
    """Raise ``MemoryError`` with the breakdown and what to lower when the estimate does not fit;
    on a GPU, where even the resident part (weights, optimizer, reference) does not fit, name the
    verl route instead."""
    if estimate.total <= estimate.available:
        return
    resident = sum(estimate.parts[k] for k in ("weights+grads+adam", "reference"))
    if estimate.device.startswith("cuda"):
        lower = (
            ""
            if resident > estimate.available
            else "lower micro_batch_size or the token budgets, set gradient_checkpointing=true, or "
        )
        raise MemoryError(
            f"this run does not fit one GPU: {estimate.describe()}; {lower}{VERL_ROUTE}"
        )
    raise MemoryError(
        f"these settings do not fit in memory: {estimate.describe()}. Lower "
        "micro_batch_size, rollout.max_response_tokens, rollout.max_prompt_tokens or "
        "logprob_chunk_size, set gradient_checkpointing=true, or use a smaller model "
        "(memory_check=false skips this check)."
    )
