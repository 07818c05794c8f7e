"""vLLM rollouts on GPUs (the optional ``gpu`` extra: ``pip install 'rlvr[gpu]'``).

``LLM.generate`` on token-id prompts with ``SamplingParams(logprobs=0)`` (the sampled token's
log-prob), stop strings kept in the output, one seed per request. The engine runs in the trainer's
process and shares its GPU (TRL's "colocate" mode); after every update the trainer's weights are
pushed with the model runner's ``load_weights`` and the prefix cache is reset, since cached KV
blocks were computed with the old weights (DESIGN section 7).

vLLM's log-probs are of the raw model distribution unless the engine is built with
``logprobs_mode="processed_logprobs"``; the trainer recomputes old log-probs by default
(``old_logprobs=recompute``), so these are used only with ``old_logprobs=rollout``.
"""
from __future__ import annotations

import os
import tempfile
from typing import Any

from rlvr.agents.rollout.base import Generation, RolloutBackend, SamplingParams, truncate_at_stop

GPU_EXTRA_HINT = ("the vllm rollout backend needs vLLM, a CUDA-only package: install the gpu "
                  "extra with pip install 'rlvr[gpu]' (or use rollout.backend=hf)")


def _import_vllm():
    try:
        import vllm
    except ImportError as e:
        raise ImportError(GPU_EXTRA_HINT) from e
    return vllm


def finish_reason(output) -> str:
    """Map a vLLM ``CompletionOutput`` to ``eos`` / ``stop`` / ``length``."""
    if output.finish_reason == "length":
        return "length"
    return "stop" if isinstance(getattr(output, "stop_reason", None), str) else "eos"


def to_vllm_params(params: SamplingParams, max_tokens: int, seed: int, vllm_module) -> Any:
    """Our ``SamplingParams`` as vLLM's (temperature 0 = greedy; top_k 0 -> vLLM's -1)."""
    return vllm_module.SamplingParams(
        n=1, temperature=params.temperature, top_p=params.top_p,
        top_k=params.top_k if params.top_k > 0 else -1, max_tokens=max_tokens,
        stop=list(params.stop) or None, include_stop_str_in_output=True, logprobs=0,
        seed=seed, skip_special_tokens=True)


def sampled_logprobs(output) -> list[float]:
    """The sampled token's log-prob at each position (``logprobs=0`` returns just that one)."""
    if output.logprobs is None:
        return [0.0] * len(output.token_ids)
    return [float(step[tok].logprob) for tok, step in zip(output.token_ids, output.logprobs)]


class VLLMBackend(RolloutBackend):
    """A colocated vLLM engine; ``sync_weights(model)`` pushes the trainer's weights into it."""

    def __init__(self, model_path: str, tokenizer, *, dtype: str = "auto",
                 gpu_memory_utilization: float = 0.4, enforce_eager: bool = False,
                 seed: int = 0, max_model_len: int | None = None):
        vllm = _import_vllm()
        # In-process engine, so that the trainer can reach the model runner's weights.
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        self._vllm = vllm
        self.tokenizer = tokenizer
        self.llm = vllm.LLM(model=model_path, dtype=dtype, seed=seed,
                            gpu_memory_utilization=gpu_memory_utilization,
                            enforce_eager=enforce_eager, max_model_len=max_model_len,
                            enable_prefix_caching=True)

    @classmethod
    def from_model(cls, model, tokenizer, **kwargs) -> VLLMBackend:
        """Start vLLM from the trainer's in-memory model (saved once to a temporary directory)."""
        _import_vllm()
        tmp = tempfile.mkdtemp(prefix="rlvr-vllm-")
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        dtype = str(next(model.parameters()).dtype).replace("torch.", "")
        return cls(tmp, tokenizer, dtype=dtype, **kwargs)

    def generate(self, contexts, params: SamplingParams, *, seed: int,
                 max_new_tokens: list[int] | None = None) -> Generation:
        from vllm.inputs import TokensPrompt

        n = len(contexts)
        budgets = [params.max_new_tokens] * n if max_new_tokens is None else [
            max(0, min(b, params.max_new_tokens)) for b in max_new_tokens]
        live = [i for i in range(n) if budgets[i] > 0]
        token_ids: list[list[int]] = [[] for _ in range(n)]
        logprobs: list[list[float]] = [[] for _ in range(n)]
        reasons = ["length"] * n
        texts = [""] * n
        if live:
            prompts = [TokensPrompt(prompt_token_ids=list(contexts[i])) for i in live]
            sp = [to_vllm_params(params, budgets[i], seed * 100_003 + i, self._vllm) for i in live]
            outputs = self.llm.generate(prompts, sp, use_tqdm=False)
            for i, out in zip(live, outputs):
                o = out.outputs[0]
                token_ids[i] = list(o.token_ids)
                logprobs[i] = sampled_logprobs(o)
                reasons[i] = finish_reason(o)
                texts[i], _ = truncate_at_stop(o.text, params.stop)
        return Generation(token_ids, logprobs, reasons, texts)

    def _runner_model(self):
        engine = self.llm.llm_engine
        executor = getattr(engine, "model_executor", None)
        worker = getattr(getattr(executor, "driver_worker", None), "worker", None)
        if worker is None:
            raise RuntimeError("cannot reach vLLM's model runner in this vLLM version; set "
                               "VLLM_ENABLE_V1_MULTIPROCESSING=0 before starting the trainer")
        return worker.model_runner.model

    def sync_weights(self, model) -> None:
        """Push ``model``'s weights into the engine, then drop KV blocks of the old weights."""
        runner_model = self._runner_model()
        runner_model.load_weights((name, p.detach()) for name, p in model.state_dict().items())
        self.llm.reset_prefix_cache()
