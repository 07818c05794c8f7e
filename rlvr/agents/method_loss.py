"""A method's loss on one forward, composed once for every engine: the native update
(``rlvr.training.update``), verl's actor loss (``rlvr.integrations.verl.actor``) and verl's
policy loss (``rlvr.integrations.verl.plugin``).

In order, for the algorithm ``algorithm`` (``rlvr.agents.algorithms``):

1. the stage (Lopti): the advantage is zeroed outside the stage's tokens;
2. the token selection (80/20): the surrogate covers the selected tokens only, normalised by
   their count (``aggregate(..., surrogate=True)``);
3. the weights (``rlvr.agents.weights.token_weights``) on the surrogate's tokens;
4. the clipped surrogate (``rlvr.agents.losses.clipped_surrogate``), times the engine's rollout
   correction weights when it has them, aggregated over the surrogate's tokens;
5. an entropy bonus (verl's ``entropy_coeff``) and the KL to the reference, both on the stage's
   tokens (every response token without stages), aggregated over every response token.

What differs between engines is passed in: how a per-token loss is aggregated (the native
mini-batch normalisers or verl's global batch info) and which KL estimator is used (k3, verl's
``kl_penalty``), so the order of the terms, and so the numbers, are the same everywhere.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch

from rlvr.agents.algorithms import Algorithm
from rlvr.agents.losses import clipped_surrogate
from rlvr.agents.weights import token_weights

#: ``aggregate(loss_mat [B, T], mask [B, T], surrogate) -> scalar``: ``surrogate`` is True for the
#: policy term, whose token count is the selected tokens' when the method selects some.
Aggregate = Callable[[torch.Tensor, torch.Tensor, bool], torch.Tensor]
#: ``kl_penalty(logprobs, ref_logprobs) -> [B, T]`` per-token KL estimate.
KLPenalty = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


@dataclass
class LossInputs:
    """One forward's tensors (``[B, T]`` unless said; ``mask`` bool over response tokens)."""

    logprobs: torch.Tensor
    old_logprobs: torch.Tensor
    #: Per sequence ``[B]`` or per token ``[B, T]``.
    advantages: torch.Tensor
    mask: torch.Tensor
    #: The current forward's per-token entropy (80/20 selects by it; verl's entropy bonus).
    entropy: torch.Tensor | None = None
    #: The sampled token's logit (logit-shaped weights).
    logits: torch.Tensor | None = None
    #: Reference log-probs (``None``: no KL term).
    ref_logprobs: torch.Tensor | None = None
    #: The stage's tokens (``None``: every response token).
    stage: torch.Tensor | None = None
    #: The engine's rollout-correction weights on the surrogate (verl's ``rollout_is_weights``).
    rollout_weights: torch.Tensor | None = None


@dataclass
class MethodLoss:
    """The loss and its parts (tensors with their graph; metrics are the caller's)."""

    loss: torch.Tensor
    pg_loss: torch.Tensor
    #: ``clipped_surrogate``'s per-token terms: ``pg``, ``ratio``, ``clipped``, ``dual_clipped``.
    terms: dict[str, torch.Tensor]
    #: The method's detached weights (``None``: every token weighs 1).
    weights: torch.Tensor | None
    #: Tokens the surrogate covers (the selection, else every response token).
    pg_mask: torch.Tensor
    #: Tokens KL and the entropy bonus count on (the stage, else every response token).
    kl_mask: torch.Tensor
    #: Per-token KL on ``kl_mask`` (zero elsewhere) and its aggregate (``None``: no reference).
    kl_tokens: torch.Tensor | None = None
    kl_loss: torch.Tensor | None = None
    #: The aggregated entropy of the bonus (``None``: no bonus).
    entropy_loss: torch.Tensor | None = None


def method_loss(
    algorithm: Algorithm,
    params: Mapping[str, Any],
    x: LossInputs,
    *,
    aggregate: Aggregate,
    kl_penalty: KLPenalty | None = None,
    clip_low: float,
    clip_high: float,
    dual_clip: float | None,
    weight_position: str = "surrogate",
    kl_coef: float = 0.0,
    entropy_coef: float | None = None,
) -> MethodLoss:
    """The loss of ``algorithm`` with parameters ``params`` on ``x`` (module docstring).
    With ``x.ref_logprobs`` the KL term is computed by ``kl_penalty`` and, when ``kl_coef > 0``,
    added; ``entropy_coef`` (with ``x.entropy``) subtracts verl's entropy bonus."""
    if kl_coef > 0 and x.ref_logprobs is None:
        raise ValueError("ref_logprobs: required when kl_coef > 0")
    if x.ref_logprobs is not None and kl_penalty is None:
        raise ValueError("kl_penalty: a KL estimator is required with ref_logprobs")
    mask = x.mask.to(torch.bool)
    adv = x.advantages.unsqueeze(-1) if x.advantages.dim() == 1 else x.advantages
    if x.stage is not None:  # AR-Lopti: no advantage outside the stage
        adv = adv * x.stage.to(adv.dtype)
    adv = adv.detach().to(x.logprobs.dtype)
    pg_mask = mask
    if algorithm.select_tokens is not None:
        if x.entropy is None:
            raise ValueError(f"entropy: {algorithm.name!r} selects tokens by the forward's entropy")
        pg_mask = mask & algorithm.select_tokens(x.entropy, mask, params)
    weights = None
    if algorithm.weight is not None:
        weights = token_weights(
            algorithm.name,
            logprobs=x.logprobs,
            mask=pg_mask,
            logits=x.logits,
            old_logprobs=x.old_logprobs,
            entropy=x.entropy,
            **params,
        )
    terms = clipped_surrogate(
        x.logprobs,
        x.old_logprobs.detach(),
        adv,
        weights=weights,
        clip_low=clip_low,
        clip_high=clip_high,
        dual_clip=dual_clip,
        weight_position=weight_position,
    )
    pg = terms["pg"] if x.rollout_weights is None else terms["pg"] * x.rollout_weights
    pg_loss = aggregate(pg, pg_mask, True)
    out = MethodLoss(pg_loss, pg_loss, terms, weights, pg_mask, mask)
    if x.stage is not None:
        out.kl_mask = x.stage.to(torch.bool)
    zero = torch.zeros((), dtype=x.logprobs.dtype, device=x.logprobs.device)
    if entropy_coef is not None and x.entropy is not None:
        entropy = torch.where(out.kl_mask, x.entropy, zero)
        out.entropy_loss = aggregate(entropy, mask, False)
        out.loss = out.loss - entropy_coef * out.entropy_loss
    if x.ref_logprobs is not None:
        kl = kl_penalty(x.logprobs, x.ref_logprobs.detach())
        out.kl_tokens = torch.where(out.kl_mask, kl, zero)
        out.kl_loss = aggregate(out.kl_tokens, mask, False)
        if kl_coef > 0:
            out.loss = out.loss + kl_coef * out.kl_loss
    return out


__all__ = ["Aggregate", "KLPenalty", "LossInputs", "MethodLoss", "method_loss"]
