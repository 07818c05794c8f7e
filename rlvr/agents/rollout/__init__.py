"""Rollout backends behind one interface (``base.RolloutBackend``) and the episode driver.

- ``hf``: batched sampling with a KV cache for any Hugging Face causal LM (CPU/GPU), the path
  every rollout and evaluation takes; ``hf.GenerateBackend`` is ``model.generate`` behind the
  same interface, kept as a cross-check.
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

#: Backend names accepted by ``make_backend``.
BACKENDS = ("hf", "vllm", "generate")


def check_backend_present(name: str) -> None:
    """``ConfigError`` (one line) when backend ``name`` cannot run here: vLLM not installed.
    Checked with the configuration, before any model loads."""
    if name == "vllm":
        from rlvr.agents.rollout.vllm import check_installed

        check_installed()


def make_backend(name: str, model, tokenizer, **options) -> RolloutBackend:
    """The rollout backend ``name`` over ``model`` (``options`` go to vLLM's engine)."""
    if name == "hf":
        from rlvr.agents.rollout.hf import HFBackend

        return HFBackend(model, tokenizer, **options)
    if name == "generate":
        from rlvr.agents.rollout.hf import GenerateBackend

        return GenerateBackend(model, tokenizer, **options)
    if name == "vllm":
        from rlvr.agents.rollout.vllm import VLLMBackend

        return VLLMBackend.from_model(model, tokenizer, **options)
    raise ValueError(f"unknown rollout backend {name!r}; choose one of {BACKENDS}")


__all__ = [
    "BACKENDS",
    "FINISH_REASONS",
    "Generation",
    "RolloutBackend",
    "RolloutBatch",
    "SamplingParams",
    "check_backend_present",
    "collate",
    "make_backend",
]
