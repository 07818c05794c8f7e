"""The GPU plan of a grid: which engine trains each setting (native on one GPU when the trainer's
own memory check passes, else verl), on how many GPUs, and how vLLM's memory is sized
(``rlvr reproduce --grid paper`` prints it without GPUs; ``rlvr.reproduce.verl`` writes it into
each launch folder).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from rlvr.config import ConfigError, nest
from rlvr.reproduce.grid import GPU_RESERVE_GIB, GPUS, Grid, Setting, setting_overrides
from rlvr.training.train_config import load_train_config


def param_count(arch: dict[str, int]) -> int:
    """Parameters of a Qwen2 decoder (attention with biases on q/k/v, SwiGLU MLP; the output head
    is tied to the embeddings when ``arch["tied"]``, as in Qwen2.5-3B)."""
    h, L, inter, vocab = arch["hidden"], arch["layers"], arch["inter"], arch["vocab"]
    head_dim = h // arch["heads"]
    kv = arch["kv_heads"] * head_dim
    attn = h * h + 2 * h * kv + (h + 2 * kv) + h * h
    mlp = 3 * h * inter
    return L * (attn + mlp + 2 * h) + (1 if arch.get("tied") else 2) * vocab * h + h


def meta_model(arch: dict[str, int]):
    """A Qwen2 decoder of ``arch`` on the meta device (shapes only, no memory), with fp32
    parameters as the trainer keeps them (bf16/fp16 runs are mixed precision)."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    cfg = Qwen2Config(
        hidden_size=arch["hidden"],
        num_hidden_layers=arch["layers"],
        num_attention_heads=arch["heads"],
        num_key_value_heads=arch["kv_heads"],
        intermediate_size=arch["inter"],
        vocab_size=arch["vocab"],
        tie_word_embeddings=bool(arch.get("tied")),
    )
    with torch.device("meta"):
        return Qwen2ForCausalLM(cfg)


def native_estimate(setting: Setting, cfg):
    """The trainer's own estimate (``rlvr.agents.memory.estimate_for_config``) of ``cfg`` on one
    of the GPUs ``setting`` names."""
    import torch

    from rlvr.agents.memory import estimate_for_config

    total = int(GPUS[setting.gpu] * 2**30)
    return estimate_for_config(
        meta_model(setting.arch),
        cfg,
        torch.device("cuda"),
        available=total - int(GPU_RESERVE_GIB * 2**30),
        device_total=total,
    )


def verl_gpus(setting: Setting, cfg) -> int:
    """GPUs of a verl (FSDP) run: 16 B/param of mixed-precision AdamW sharded across GPUs
    (Rajbhandari et al. 2020, ZeRO section 3), plus 2 B/param each for the bf16 reference and
    vLLM copies, the KV cache of one rollout batch and the activations of a micro-batch, at 85%
    of each GPU; rounded up to a power of two, so that a batch of 2^k rollouts divides over
    them."""
    n = param_count(setting.arch)
    length = cfg.rollout.max_prompt_tokens + cfg.rollout.max_response_tokens
    head_dim = setting.arch["hidden"] // setting.arch["heads"]
    kv_cache = (
        2
        * cfg.prompts_per_step
        * cfg.group_size
        * length
        * setting.arch["layers"]
        * setting.arch["kv_heads"]
        * head_dim
        * 2
    )
    acts = (
        (cfg.micro_batch_size or 4)
        * length
        * setting.arch["hidden"]
        * setting.arch["layers"]
        * 2
        * 2
    )
    total = n * (16 + 2 + 2) + kv_cache + acts
    need = max(2, math.ceil(total / (0.85 * GPUS[setting.gpu] * 2**30)))
    return 2 ** math.ceil(math.log2(need))


#: vLLM's memory beyond its weights and KV cache: the activation peak of its profiling run, CUDA
#: graphs, sampler and NCCL buffers. An allowance: vLLM measures them at start-up and sizes the KV
#: cache from what ``gpu_memory_utilization`` leaves after weights and these (vLLM
#: ``v1/worker/gpu_worker.py``, ``determine_available_memory``).
VLLM_OVERHEAD_GIB = 4.0


def kv_bytes_per_token(arch: dict[str, int]) -> int:
    """KV cache of one token in bf16: K and V x layers x kv_heads x head_dim x 2 bytes."""
    head_dim = arch["hidden"] // arch["heads"]
    return 2 * arch["layers"] * arch["kv_heads"] * head_dim * 2


@dataclass(frozen=True)
class RolloutMemory:
    """One GPU while vLLM generates a step's rollouts (bytes): vLLM's share
    (``gpu_memory_utilization`` of the GPU: bf16 weights, the KV cache, its overhead) beside what
    the trainer keeps there meanwhile."""

    gpu: str
    #: vLLM engines (GPUs / tensor-parallel size) and the rollouts each holds at once.
    engines: int
    sequences: int
    #: prompt + response budget (``max_model_len``).
    tokens: int
    kv_per_token: int
    tensor_parallel: int
    weights: int
    overhead: int
    #: Kept on the GPU by the trainer during rollouts (sharded master weights, AdamW unless
    #: offloaded, the reference).
    trainer: int
    total: int
    gpu_memory_utilization: float
    optimizer_offload: bool = False

    @property
    def kv_budget(self) -> int:
        """KV cache bytes on one GPU at this ``gpu_memory_utilization``."""
        return int(self.gpu_memory_utilization * self.total) - self.weights - self.overhead

    @property
    def kv_sequences(self) -> int:
        """Full-length sequences (``tokens`` each) one engine's KV cache holds."""
        per_seq = self.tokens * self.kv_per_token // self.tensor_parallel
        return max(0, self.kv_budget) // per_seq

    @property
    def fits(self) -> bool:
        """vLLM's share plus the trainer's within the GPU (``GPU_RESERVE_GIB`` kept free), and a
        KV cache of at least one full-length sequence (vLLM refuses to start otherwise)."""
        used = self.trainer + self.gpu_memory_utilization * self.total
        return used <= self.total - GPU_RESERVE_GIB * 2**30 and self.kv_sequences >= 1

    def record(self) -> dict[str, Any]:
        gib = 2**30
        return {
            "gpu": self.gpu,
            "gpu_memory_utilization": self.gpu_memory_utilization,
            "vllm_weights_GiB": round(self.weights / gib, 2),
            "kv_cache_GiB": round(self.kv_budget / gib, 2),
            "kv_bytes_per_token": self.kv_per_token,
            "kv_sequences": self.kv_sequences,
            "sequences_per_engine": self.sequences,
            "max_model_len": self.tokens,
            "vllm_overhead_GiB": VLLM_OVERHEAD_GIB,
            "trainer_resident_GiB": round(self.trainer / gib, 2),
            "optimizer_offload": self.optimizer_offload,
        }


def _rollout_memory(setting: Setting, cfg, gpus: int, trainer: int, gmu: float | None, **kw):
    n = param_count(setting.arch)
    tp = cfg.rollout.tensor_parallel_size
    engines = max(1, gpus // tp)
    batch = cfg.prompts_per_step * cfg.group_size
    tokens = cfg.rollout.vllm_max_model_len or (
        cfg.rollout.max_prompt_tokens + cfg.rollout.max_response_tokens
    )
    per_token = kv_bytes_per_token(setting.arch)
    sequences = -(-batch // engines)
    weights = 2 * n // tp
    overhead = int(VLLM_OVERHEAD_GIB * 2**30)
    total = int(GPUS[setting.gpu] * 2**30)
    if gmu is None:  # the share that holds every rollout of the engine at full length
        need = weights + overhead + sequences * tokens * per_token // tp
        gmu = math.ceil(100 * need / total) / 100
    return RolloutMemory(
        gpu=setting.gpu,
        engines=engines,
        sequences=sequences,
        tokens=tokens,
        kv_per_token=per_token,
        tensor_parallel=tp,
        weights=weights,
        overhead=overhead,
        trainer=trainer,
        total=total,
        gpu_memory_utilization=gmu,
        **kw,
    )


def verl_rollout_memory(setting: Setting, cfg, gpus: int) -> RolloutMemory:
    """The memory plan of a verl run's rollouts on ``gpus`` GPUs: ``gpu_memory_utilization``
    sized so that each vLLM engine's KV cache holds its share of the step's rollouts at the full
    prompt + response length (no preemption), beside the FSDP shards that stay on the GPU
    (fp32 master weights 4 B/param, AdamW 8 B/param, the bf16 reference 2 B/param when the KL
    term is on, over ``gpus``; gradients are freed after each step). AdamW moves to CPU memory
    (``optimizer_offload``) only when both do not fit otherwise."""
    n = param_count(setting.arch)
    ref = 2 * n if cfg.loss.kl_coef > 0 else 0
    for offload in (False, True):
        trainer = (4 * n + (0 if offload else 8 * n) + ref) // gpus
        plan = _rollout_memory(setting, cfg, gpus, trainer, None, optimizer_offload=offload)
        if plan.fits:
            return plan
    return plan


def native_rollout_memory(setting: Setting, cfg) -> RolloutMemory:
    """The native run's rollouts on one GPU at the profile's ``gpu_memory_utilization`` (the
    trainer keeps its fp32 weights, gradients and AdamW, 16 B/param, and the reference;
    ``rlvr.agents.memory``): the KV cache that share leaves."""
    n = param_count(setting.arch)
    ref = 2 * n if cfg.loss.kl_coef > 0 else 0
    return _rollout_memory(setting, cfg, 1, 16 * n + ref, cfg.rollout.vllm_gpu_memory_utilization)


def plan_rows(grid: Grid) -> list[dict[str, Any]]:
    """One row per setting: the engine (native on one GPU when the trainer's own memory check
    passes on the GPU the setting names, else verl), GPUs, peak memory, steps, rollouts, and
    the rollout engine's memory (``gpu_memory_utilization``, the KV cache it leaves per GPU and
    how many full-length rollouts that holds out of each engine's share)."""
    rows = []
    for key, s in grid.settings.items():
        if not s.arch:
            continue
        cfg = load_train_config(nest(setting_overrides(s, "grpo", 0, {"out": "plan"})))
        est = native_estimate(s, cfg)
        native = est.total <= est.available
        gpus = 1 if native else verl_gpus(s, cfg)
        mem = native_rollout_memory(s, cfg) if native else verl_rollout_memory(s, cfg, gpus)
        rows.append(
            {
                "setting": key,
                "model": s.model,
                "params_B": round(param_count(s.arch) / 1e9, 2),
                "engine": "native" if native else "verl",
                "gpus": f"{gpus}x {s.gpu}",
                "native_peak_GiB": round(est.total / 2**30, 1),
                "micro_batch": cfg.micro_batch_size,
                "steps": cfg.steps,
                "rollouts_per_step": cfg.prompts_per_step * cfg.group_size,
                "max_tokens_per_rollout": cfg.rollout.max_prompt_tokens
                + cfg.rollout.max_response_tokens,
                "vllm_gmu": mem.gpu_memory_utilization,
                "kv_GiB_per_gpu": round(mem.kv_budget / 2**30, 1),
                "kv_holds": f"{min(mem.kv_sequences, mem.sequences)}/{mem.sequences}",
                "seeds": grid.seeds,
            }
        )
    return rows


PLAN_NOTE = (
    "Engine: `native` runs fit one GPU by the trainer's own memory check "
    "(rlvr.agents.memory.estimate_for_config: fp32 master weights, gradients and AdamW, the "
    "reference, bf16 activations of one micro-batch with gradient checkpointing, and the vLLM "
    "engine, asleep during the update); `verl` runs do not (native_peak_GiB is above the GPU) "
    "and are sized for FSDP sharding (rlvr.reproduce.gpu_plan.verl_gpus); the native trainer "
    "refuses them. vllm_gmu: vLLM's gpu_memory_utilization (verl: sized so that each engine's "
    "KV cache holds its share of a step's rollouts at full length beside the FSDP shards, "
    "rlvr.reproduce.gpu_plan.verl_rollout_memory; native: the profile's); kv_GiB_per_gpu: the KV "
    "cache it leaves after the bf16 weights and vLLM's overhead; kv_holds: full-length rollouts "
    "that cache holds of each engine's share (fewer: vLLM queues the rest)."
)


def check_engines(grid: Grid) -> None:
    """Refuse, in one line, a GPU reproduction that includes settings only verl can train."""
    verl = [r["setting"] for r in plan_rows(grid) if r["engine"] == "verl"]
    if verl:
        from rlvr.agents.memory import VERL_ROUTE

        raise ConfigError(
            f"grid {grid.name}: settings {', '.join(verl)} do not fit one GPU "
            f"(see the plan printed without GPUs); {VERL_ROUTE}"
        )
