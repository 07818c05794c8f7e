"""Rollout backends behind one interface (``base.RolloutBackend``) and the episode driver.

- ``hf``: batched sampling with a KV cache for any Hugging Face causal LM (CPU/GPU).
- ``vllm``: vLLM on GPUs (the optional ``gpu`` extra), weights pushed after each update.
- ``multiturn``: generate -> ``env.step`` -> observation tokens (loss mask 0) -> repeat.
"""
from rlvr.agents.rollout.base import (
    FINISH_REASONS,
    Generation,
    RolloutBackend,
    RolloutBatch,
    SamplingParams,
    collate,
)

__all__ = ["FINISH_REASONS", "Generation", "RolloutBackend", "RolloutBatch", "SamplingParams",
           "collate"]
