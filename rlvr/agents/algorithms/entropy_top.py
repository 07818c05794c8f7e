"""80/20 (Wang et al. 2025, "Beyond the 80/20 Rule", arXiv 2506.01939): the policy loss on the
top ``fraction`` of response tokens by entropy, KL on all of them.

As the official code does it (Shenzhi-Wang/Beyond-the-80-20-Rule-RLVR@6f5dda6,
``verl/workers/actor/dp_actor.py`` ``update_policy`` and
``core_algos.get_global_entropy_top_mask``):
the entropy is the one of the current training forward, the selection is made over the response
tokens of that forward (``ceil(fraction * n)`` tokens), and the surrogate is averaged over the
selected tokens only.

With several forwards per mini-batch the reference averages per forward: each forward's mean
over its kept tokens, times ``1 / gradient_accumulation`` (``response_mask.shape[0] /
ppo_mini_batch_size`` under dynamic batch sizes). Both engines here divide the kept tokens' sum
by ``ceil(fraction * N)`` instead, ``N`` the mini-batch's response tokens: the global-batch
normaliser every other method uses (``rlvr.agents.losses.agg_loss``, verl 0.9.1's
``agg_loss``), and the one count verl's actor loss knows (one micro-batch and the global token
count). It equals the reference when a mini-batch is one forward and differs from the kept count
by less than the number of forwards (forwards of 31 and 29 tokens keep 7 + 6 = 13, divide by
``ceil(0.2 * 60) = 12``). ``docs/algorithms.md``, "Normalisers", says why.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    pass

from rlvr.agents.algorithms.base import Algorithm, Param, register_algorithm, require

#: Keep the top 20 % entropy tokens (the paper's ``entropy_top_ratio``).
ENTROPY_TOP_FRACTION = 0.2
FRACTION = Param("fraction", ENTROPY_TOP_FRACTION, float, "(0, 1]")


def n_kept(fraction: float, n_valid: int) -> int:
    """``ceil(fraction * n_valid)``, robust to float noise (``0.2 * 15`` is 3.0000000000000004)."""
    return min(n_valid, math.ceil(round(fraction * n_valid, 9)))


def entropy_top_weights(
    *,
    logprobs,
    mask,
    logits=None,
    old_logprobs=None,
    entropy=None,
    fraction: float = ENTROPY_TOP_FRACTION,
):
    """A 0/1 mask keeping the top-``fraction`` entropy tokens.

    ``I[H_t >= tau_rho]`` with ``tau_rho`` the batch's (1 - rho) entropy quantile, implemented as
    exactly ``k = ceil(fraction * n_valid)`` tokens (ties broken by ``torch.topk``) over all valid
    tokens of the tensors passed, so call it on the whole forward, not on a part of it.
    ``entropy`` is the per-position entropy of the policy's next-token distribution.
    """
    import torch

    FRACTION.check(fraction)
    ent = require("entropy", entropy, logprobs, "entropy_top")
    flat_valid = mask.reshape(-1).to(torch.bool)
    n_valid = int(flat_valid.sum())
    keep = torch.zeros(flat_valid.shape, dtype=logprobs.dtype, device=logprobs.device)
    if n_valid == 0:
        return keep.reshape(logprobs.shape)
    k = n_kept(fraction, n_valid)
    scores = ent.reshape(-1).to(torch.float64).masked_fill(~flat_valid, -math.inf)
    top = torch.topk(scores, k).indices
    keep[top] = 1.0
    return keep.reshape(logprobs.shape)


def select_top_entropy(entropy, mask, params):
    return entropy_top_weights(
        logprobs=entropy, mask=mask.bool(), entropy=entropy, fraction=params["fraction"]
    ).bool()


ENTROPY_TOP = register_algorithm(
    Algorithm(
        name="entropy_top",
        label="80/20 (entropy top)",
        color="#e377c2",
        fields=(FRACTION,),
        select_tokens=select_top_entropy,
        selected=lambda params, n: n_kept(params["fraction"], n),
        source="arXiv 2506.01939; Shenzhi-Wang/Beyond-the-80-20-Rule-RLVR@6f5dda6 dp_actor.py",
    )
)
