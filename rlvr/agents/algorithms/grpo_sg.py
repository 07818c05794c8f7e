"""GRPO-SG (arXiv 2511.00066, Eq. 20): ``w = clip(alpha * (sigmoid(sg[h] / tau) - mu), L, U)``
with ``h`` the sampled token's raw logit under the current policy, as the paper writes it.

Increasing in ``h``: confident tokens weigh more, low-probability tokens (which carry the largest
gradients) less. The paper does not publish tau, mu, alpha, L, U. L = 0.1 keeps a floor of
learning signal on every token, U = 2 bounds any token's amplification; alpha, tau and mu are
``CALIBRATED``: set once from the model's own first batch by the rule of
``rlvr.agents.algorithms.shaping`` (tau from the spread of its logits, the lowest 5 % of tokens at
L, token-mean weight 1), because at fixed values the logit form is nearly constant on real models
(tiny-kk: mean 0.949, std 0.140; SmolLM2-135M: mean 1.218, std 0.097 at alpha 2.75, tau 10,
mu 0.5; ``docs/algorithms.md``). A number given for one of them is kept and the rule fills the
rest.

``shaping_input="prob"`` is the earlier fixed-parameter probability form (alpha 3, tau 0.5, mu 0.5:
token-mean 0.99 on ``reference_token_probs``), which the tiny grid's sensitivity sweep keeps so
that its runs keep their keys; the probability form as a method of its own, calibrated, is
``tr_grpo``. ``reverse.py`` applies the same shaping to ``-h``.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

from rlvr.agents.algorithms.base import CALIBRATED, Algorithm, register_algorithm
from rlvr.agents.algorithms.shaping import (
    SHAPING_FIELDS,
    calibrate_alpha,  # noqa: F401  (public here since the first version)
    reads_logits,
    shaping_calibration,
    shaping_params,
    shaping_weights,
    sigmoid_shaping,  # noqa: F401
)

#: Eq. 20's parameters per shaping input. logit: L, U fixed, the rest calibrated (module
#: docstring). prob: w(1)=1.14, w(0.99)=1.14, w(0.9)=1.07, w(0.5)=0.69, w(0.1)=0.15,
#: w(p<0.066)=L; token-mean 0.99 on ``reference_token_probs`` (1.11 on p > 0.9, 0.10 on p < 0.1).
GRPO_SG_DEFAULTS: dict[str, dict[str, object]] = {
    "logit": {"alpha": CALIBRATED, "tau": CALIBRATED, "mu": CALIBRATED, "lower": 0.1, "upper": 2.0},
    "prob": {"alpha": 3.0, "tau": 0.5, "mu": 0.5, "lower": 0.1, "upper": 2.0},
}


def reference_token_probs(n: int = 100_000, seed: int = 0) -> torch.Tensor:
    """Sampled-token probabilities shaped like an RL rollout of an instruct model.

    A mixture (our assumption, stated so the prob defaults can be re-derived): 80 % of tokens with
    p ~ U(0.9, 1), 10 % with p ~ U(0.5, 0.9), 10 % log-uniform on [1e-3, 0.5] (the low-p tail).
    """
    import torch

    g = torch.Generator().manual_seed(seed)
    u = torch.rand(n, generator=g, dtype=torch.float64)
    pick = torch.rand(n, generator=g, dtype=torch.float64)
    tail = torch.exp(math.log(1e-3) + u * (math.log(0.5) - math.log(1e-3)))
    p = torch.where(pick < 0.8, 0.9 + 0.1 * u, torch.where(pick < 0.9, 0.5 + 0.4 * u, tail))
    return p


def reference_token_logits(n: int = 100_000, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """``(logits, probs)`` of sampled tokens: ``h = c + log p`` with ``p`` from
    ``reference_token_probs`` and ``c ~ U(10, 30)`` the position's log-partition (about the top
    logit). The range of c is an assumption about instruct-LLM logit scales, not a measurement.
    """
    import torch

    p = reference_token_probs(n, seed)
    g = torch.Generator().manual_seed(seed + 1)
    c = 10.0 + 20.0 * torch.rand(n, generator=g, dtype=torch.float64)
    return c + torch.log(p), p


grpo_sg_weights = shaping_weights(
    "grpo_sg",
    GRPO_SG_DEFAULTS,
    1.0,
    """GRPO-SG Eq. 20: ``w_{i,t} = clip(alpha * (sigmoid(sg[h_{i,t}] / tau) - mu), L, U)``.

    ``h`` is the sampled token's raw logit (``shaping_input="logit"``, the default) or its
    probability (``"prob"``). ``None`` parameters take ``GRPO_SG_DEFAULTS[shaping_input]``; the
    logit form's alpha, tau, mu are ``CALIBRATED`` (``shaping.calibrate_shaping``) and must be
    numbers by the time weights are computed.
    """,
    default_input="logit",
)


GRPO_SG = register_algorithm(
    Algorithm(
        name="grpo_sg",
        label="GRPO-SG",
        color="#d62728",
        weight=grpo_sg_weights,
        fields=SHAPING_FIELDS,
        params=shaping_params(GRPO_SG_DEFAULTS, "logit"),
        policy_loss=True,
        needs_logits=reads_logits,
        calibrate=shaping_calibration(1.0),
        source="arXiv 2511.00066 Eq. 20 on the sampled token's logit; alpha, tau, mu calibrated",
    )
)
