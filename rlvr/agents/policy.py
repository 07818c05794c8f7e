"""A policy wrapper around any Hugging Face causal LM: per-token statistics of given tokens.

For the GRPO family the trainer needs, for every response token ``o_t``: its log-probability
``log pi(o_t | o_<t)`` (with gradient), the raw logit of ``o_t`` (GRPO-SG shapes it), and the
entropy of the next-token distribution (80/20 selects on it). Full logits are ``[B, T, V]``; with
Qwen's 151k vocabulary that is 600 MB per 1k tokens in fp32, so the LM head runs over chunks of
positions, and under autograd each chunk is checkpointed (recomputed in backward) so that no more
than one ``[B, chunk, V]`` block is alive at a time, in forward or backward (the trick of Liger's
fused linear cross-entropy, written plainly).

Log-probabilities are of ``softmax(logits / temperature)``, the distribution the rollout sampled
from (verl divides by the rollout temperature the same way); top-k/top-p truncation is not part of
it, which matches vLLM's default ``raw_logprobs``.
"""

from __future__ import annotations

import contextlib
import copy
import inspect
from dataclasses import dataclass

import torch
from torch.utils.checkpoint import checkpoint


@dataclass
class TokenStats:
    """Per-token statistics of the response tokens, each ``[B, R]`` (zeros at padding)."""

    logprobs: torch.Tensor
    logits: torch.Tensor
    entropy: torch.Tensor


def cache_kwarg(model) -> str:
    """The name of the KV-cache argument of ``model.forward`` (``cache`` since transformers 5.2x,
    ``past_key_values`` before)."""
    params = inspect.signature(model.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


def output_cache(output):
    """The KV cache a forward returned (``cache`` or ``past_key_values``, by version)."""
    cache = getattr(output, "cache", None)
    return cache if cache is not None else getattr(output, "past_key_values", None)


def position_ids_from_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """Positions that skip left padding: ``cumsum(mask) - 1``, clamped at 0 on the padding."""
    return (attention_mask.long().cumsum(-1) - 1).clamp(min=0)


def head_token_stats(
    hidden: torch.Tensor,
    targets: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    temperature: float,
):
    """Log-prob, raw logit and entropy of ``targets`` from hidden states ``[B, C, H]``.

    The logits are formed and reduced in fp32 inside this function, so under checkpointing only
    ``hidden`` (and the three ``[B, C]`` outputs) are kept for backward.
    """
    logits = torch.nn.functional.linear(hidden, weight, bias).float()
    target_logit = logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    scaled = logits / temperature if temperature != 1.0 else logits
    logz = torch.logsumexp(scaled, dim=-1)
    logprobs = target_logit / temperature - logz if temperature != 1.0 else target_logit - logz
    with torch.no_grad():
        logp_all = scaled.detach() - logz.detach().unsqueeze(-1)
        entropy = -(logp_all.exp() * logp_all).sum(-1)
    return logprobs, target_logit.detach(), entropy


def response_token_stats(
    model,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    n_response: int,
    *,
    temperature: float = 1.0,
    chunk_size: int = 256,
    share_prompts: bool = True,
) -> TokenStats:
    """Statistics of the last ``n_response`` tokens of ``input_ids`` under ``model``.

    ``input_ids``/``attention_mask`` are ``[B, P + R]``: a left-padded prompt followed by the
    right-padded response (``R = n_response``). Gradients flow into ``logprobs`` when grad mode
    is on; ``logits`` and ``entropy`` are always detached.

    With ``share_prompts`` (default), rows with identical prompts (the G rollouts of a GRPO group)
    run their prompt through the model once; the responses then attend to that prompt's KV cache
    (indexed out to every row, so gradients from all G responses flow back into the one prompt
    pass). The result equals the row-by-row forward up to float rounding, at a fraction of the
    cost when prompts are long.
    """
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0 for log-probs, got {temperature}")
    base = model.get_decoder() if hasattr(model, "get_decoder") else model.base_model
    head = model.get_output_embeddings()
    total = input_ids.shape[1]
    targets = input_ids[:, total - n_response :]
    hidden = None
    if share_prompts and total > n_response:
        hidden = _shared_prompt_hidden(base, input_ids, attention_mask, n_response)
    if hidden is None:
        out = base(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids_from_mask(attention_mask),
            use_cache=False,
        )
        # Hidden state at position t predicts token t + 1.
        hidden = out.last_hidden_state[:, total - n_response - 1 : total - 1]
    parts = []
    use_ckpt = torch.is_grad_enabled() and hidden.requires_grad
    for start in range(0, n_response, chunk_size):
        h = hidden[:, start : start + chunk_size]
        y = targets[:, start : start + chunk_size]
        if use_ckpt:
            parts.append(
                checkpoint(
                    head_token_stats, h, y, head.weight, head.bias, temperature, use_reentrant=False
                )
            )
        else:
            parts.append(head_token_stats(h, y, head.weight, head.bias, temperature))
    logprobs, logits, entropy = (torch.cat(xs, dim=1) for xs in zip(*parts))
    return TokenStats(logprobs=logprobs, logits=logits, entropy=entropy)


def _shared_prompt_hidden(base, input_ids, attention_mask, n_response):
    """Hidden states predicting the response tokens, with each distinct prompt run once.

    Returns None when every prompt is distinct (nothing to share) or the model has no usable
    KV cache, so the caller falls back to the plain forward.
    """
    total = input_ids.shape[1]
    p = total - n_response
    key = torch.cat([input_ids[:, :p], attention_mask[:, :p].to(input_ids.dtype)], dim=1)
    uniq, inverse = torch.unique(key, dim=0, return_inverse=True)
    if uniq.shape[0] == input_ids.shape[0]:
        return None
    try:
        from transformers import DynamicCache
    except ImportError:
        return None
    u_ids, u_mask = uniq[:, :p], uniq[:, p:].to(attention_mask.dtype)
    cache_arg = cache_kwarg(base)
    prompt_out = base(
        input_ids=u_ids,
        attention_mask=u_mask,
        position_ids=position_ids_from_mask(u_mask),
        use_cache=True,
        **{cache_arg: DynamicCache()},
    )
    cache = output_cache(prompt_out)
    if cache is None:
        return None
    cache.batch_select_indices(inverse)
    positions = position_ids_from_mask(attention_mask)[:, p:]
    resp_out = base(
        input_ids=input_ids[:, p:],
        attention_mask=attention_mask,
        position_ids=positions,
        use_cache=True,
        **{cache_arg: cache},
    )
    last_prompt = prompt_out.last_hidden_state[inverse, -1:]
    return torch.cat([last_prompt, resp_out.last_hidden_state[:, :-1]], dim=1)


def reference_copy(model):
    """A frozen copy of ``model`` for the KL term (eval mode, no gradients)."""
    ref = copy.deepcopy(model)
    ref.eval()
    ref.requires_grad_(False)
    return ref


def disable_dropout(model) -> None:
    """Set every dropout probability of ``model`` to 0 (modules and config attributes)."""
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
    config = getattr(model, "config", None)
    for name in (
        "attention_dropout",
        "hidden_dropout",
        "dropout",
        "resid_pdrop",
        "embd_pdrop",
        "attn_pdrop",
    ):
        if isinstance(getattr(config, name, None), float):
            setattr(config, name, 0.0)
    for module in model.modules():  # attention layers that read the rate at forward time
        if isinstance(getattr(module, "attention_dropout", None), float):
            module.attention_dropout = 0.0


def checkpointing_active(model) -> bool:
    """Whether a forward of ``model`` now recomputes its layers in backward (transformers only
    checkpoints in train mode with gradients on)."""
    name = (
        "is_activation_checkpointing"
        if hasattr(type(model), "is_activation_checkpointing")
        else "is_gradient_checkpointing"
    )
    return bool(getattr(model, name, False)) and model.training and torch.is_grad_enabled()


class Policy:
    """A causal LM, its tokenizer, and (optionally) a frozen reference model.

    Thin: the math lives in ``response_token_stats``; this class only keeps the pieces together.
    Dropout is zeroed: old and new log-probs of the same weights must agree (verl's actors
    compute both deterministically too), and then train mode, which gradient checkpointing needs,
    computes the same function as eval mode. The model stays in eval mode outside ``training()``.
    """

    def __init__(
        self,
        model,
        tokenizer,
        *,
        with_reference: bool = False,
        chunk_size: int = 256,
        temperature: float = 1.0,
        reference_dtype: torch.dtype | None = None,
    ):
        self.model = model
        self.tokenizer = tokenizer
        self.chunk_size = chunk_size
        self.temperature = temperature
        disable_dropout(model)
        self.reference = reference_copy(model) if with_reference else None
        if self.reference is not None and reference_dtype is not None:
            self.reference.to(reference_dtype)
        self.model.eval()

    @contextlib.contextmanager
    def training(self):
        """Train mode for the forwards inside (gradient checkpointing applies), eval after."""
        self.model.train()
        try:
            yield
        finally:
            self.model.eval()

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def token_stats(self, input_ids, attention_mask, n_response) -> TokenStats:
        # Checkpointed layers drop the KV cache (transformers' GradientCheckpointingLayer), so
        # the shared-prompt forward, which feeds the prompt's cache to the responses, is off.
        return response_token_stats(
            self.model,
            input_ids,
            attention_mask,
            n_response,
            temperature=self.temperature,
            chunk_size=self.chunk_size,
            share_prompts=not checkpointing_active(self.model),
        )

    @torch.no_grad()
    def reference_logprobs(self, input_ids, attention_mask, n_response) -> torch.Tensor:
        if self.reference is None:
            raise RuntimeError("this Policy was built without a reference model (kl_coef = 0)")
        return response_token_stats(
            self.reference,
            input_ids,
            attention_mask,
            n_response,
            temperature=self.temperature,
            chunk_size=self.chunk_size,
        ).logprobs
