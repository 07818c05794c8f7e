"""Reverse shaping (arXiv 2511.00066 ablation): GRPO-SG's Eq. 20 on ``-h``, decreasing in ``h``.

``w = clip(alpha * (sigmoid(-sg[h] / tau) - mu), L, U)`` emphasises low-probability tokens; the
paper reports it near GRPO. Same shaping fields as GRPO-SG (``grpo_sg.SHAPING_FIELDS``).
"""

from __future__ import annotations

from rlvr.agents.algorithms.base import Algorithm, register_algorithm
from rlvr.agents.algorithms.grpo_sg import (
    SHAPING_FIELDS,
    reads_logits,
    shaping_params,
    shaping_weights,
)

#: Reverse shaping ``w = clip(alpha * (sigmoid(-h / tau) - mu), L, U)``, decreasing in h; same
#: tau, L, U as GRPO-SG, mu = 0 (with mu = 0.5, ``sigmoid(-h/tau) - mu`` is negative for every
#: positive input) and alpha re-solved so the token-mean weight matches (~1).
#: prob:  w(1)=0.76, w(0.9)=0.91, w(0.5)=1.72, w(p<=0.37)=U;  token-mean 0.99.
#: logit: w(30)=0.35, w(20)=0.86, w(10)=1.95, w(h<=9.6)=U;    token-mean 0.99.
REVERSE_DEFAULTS: dict[str, dict[str, float]] = {
    "prob": {"alpha": 6.4, "tau": 0.5, "mu": 0.0, "lower": 0.1, "upper": 2.0},
    "logit": {"alpha": 7.25, "tau": 10.0, "mu": 0.0, "lower": 0.1, "upper": 2.0},
}


reverse_weights = shaping_weights(
    "reverse",
    REVERSE_DEFAULTS,
    -1.0,
    """Reverse shaping: ``w = clip(alpha * (sigmoid(-sg[h] / tau) - mu), L, U)``, monotone
    decreasing; ``None`` parameters take ``REVERSE_DEFAULTS[shaping_input]`` (prob: alpha 6.4 ->
    w(1)=0.76, w(0.9)=0.91, w(0.5)=1.72, w(p<=0.37)=U=2, mean 0.99; logit: alpha 7.25, mean 0.99).
    """,
)


REVERSE = register_algorithm(
    Algorithm(
        name="reverse",
        label="Reverse",
        color="#2ca02c",
        weight=reverse_weights,
        fields=SHAPING_FIELDS,
        params=shaping_params(REVERSE_DEFAULTS),
        policy_loss=True,
        needs_logits=reads_logits,
        source="arXiv 2511.00066, the reversed shaping of its ablation",
    )
)
