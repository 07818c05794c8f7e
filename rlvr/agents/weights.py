"""Per-token weights of the GRPO family: a method's weight function applied to detached tensors.

Every method with a weight (``Algorithm.weight``, one file per method in
``rlvr.agents.algorithms``) maps per-token tensors ``[B, T]`` to a weight ``w`` of the same shape
that multiplies the clipped surrogate (``rlvr.agents.losses.policy_loss``). Weights never carry
gradient: ``token_weights`` computes under ``torch.no_grad`` from detached inputs, the ``sg[.]``
of GRPO-SG Eq. 20, and masked positions (``mask == 0``) always get weight 0.

The weights (``docs/algorithms.md``): GRPO ``w = 1``; GRPO-SG
``clip(alpha * (sigmoid(sg[h] / tau) - mu), L, U)`` (``algorithms/grpo_sg.py``); Reverse, the
same on ``-h`` (``reverse.py``); AR ``alpha * pi_old + 1 - alpha`` (``ar.py``). 80/20 selects
tokens instead (``entropy_top.py``) and Lopti splits them into stages (``lopti.py``).
"""

from __future__ import annotations

import inspect

import torch

from rlvr.agents.algorithms import get_algorithm
from rlvr.agents.algorithms.base import INPUTS


def token_weights(
    scheme: str,
    *,
    logprobs: torch.Tensor,
    mask: torch.Tensor,
    logits: torch.Tensor | None = None,
    old_logprobs: torch.Tensor | None = None,
    entropy: torch.Tensor | None = None,
    **params,
) -> torch.Tensor:
    """Detached token weights ``[B, T]`` (same shape/dtype as ``logprobs``) of algorithm
    ``scheme`` (ones for a method without a weight).

    ``logits`` is the sampled token's logit ``[B, T]`` (gathered), only needed by
    ``shaping_input="logit"``. Unknown methods or parameters raise ``ValueError`` naming them.
    """
    try:
        fn = get_algorithm(scheme).weight
    except ValueError:
        raise ValueError(f"scheme: unknown weight scheme {scheme!r}") from None
    accepted = set() if fn is None else _keywords(fn)
    for key in params:
        if key not in accepted:
            raise ValueError(
                f"{key}: not a parameter of weight scheme {scheme!r} (takes {sorted(accepted)})"
            )
    if mask.shape != logprobs.shape:
        raise ValueError(
            f"mask: shape {tuple(mask.shape)} != logprobs shape {tuple(logprobs.shape)}"
        )
    with torch.no_grad():
        valid = mask.to(dtype=torch.bool)
        if fn is None:
            w = torch.ones_like(logprobs)
        else:
            w = fn(
                logprobs=logprobs.detach(),
                mask=valid,
                logits=None if logits is None else logits.detach(),
                old_logprobs=None if old_logprobs is None else old_logprobs.detach(),
                entropy=None if entropy is None else entropy.detach(),
                **params,
            )
        w = torch.where(
            valid,
            w.to(logprobs.dtype),
            torch.zeros((), dtype=logprobs.dtype, device=logprobs.device),
        )
    return w.detach()


def _keywords(fn) -> set[str]:
    params = inspect.signature(fn).parameters.values()
    return {p.name for p in params if p.kind is p.KEYWORD_ONLY} - set(INPUTS)
