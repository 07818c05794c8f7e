"""Reverse shaping (arXiv 2511.00066 ablation): GRPO-SG's Eq. 20 on ``-h``, decreasing in ``h``.

``w = clip(alpha * (sigmoid(-sg[h] / tau) - mu), L, U)`` emphasises low-probability tokens; the
paper reports it near GRPO. It follows GRPO-SG's published form mirrored: ``h`` the sampled
token's raw logit by default, L = 0.1 and U = 2, alpha, tau and mu calibrated on the first batch
by the same rule (``shaping.calibrate_shaping`` with sign -1: tau from the logits' spread, the 5 %
of tokens with the *highest* logits at L, token-mean weight 1). Same fields as GRPO-SG.
"""

from __future__ import annotations

from rlvr.agents.algorithms.base import CALIBRATED, Algorithm, register_algorithm
from rlvr.agents.algorithms.shaping import (
    SHAPING_FIELDS,
    reads_logits,
    shaping_calibration,
    shaping_params,
    shaping_weights,
)

#: Reverse shaping ``w = clip(alpha * (sigmoid(-h / tau) - mu), L, U)``, decreasing in h.
#: logit: GRPO-SG's L, U, the rest calibrated. prob (the earlier fixed form, kept for its runs):
#: same tau, L, U as GRPO-SG's prob form, mu = 0 (with mu = 0.5, ``sigmoid(-h/tau) - mu`` is
#: negative for every positive input) and alpha 6.4 for a token-mean weight of 0.99 on
#: ``grpo_sg.reference_token_probs``: w(1)=0.76, w(0.9)=0.91, w(0.5)=1.72, w(p<=0.37)=U.
REVERSE_DEFAULTS: dict[str, dict[str, object]] = {
    "logit": {"alpha": CALIBRATED, "tau": CALIBRATED, "mu": CALIBRATED, "lower": 0.1, "upper": 2.0},
    "prob": {"alpha": 6.4, "tau": 0.5, "mu": 0.0, "lower": 0.1, "upper": 2.0},
}


reverse_weights = shaping_weights(
    "reverse",
    REVERSE_DEFAULTS,
    -1.0,
    """Reverse shaping: ``w = clip(alpha * (sigmoid(-sg[h] / tau) - mu), L, U)``, monotone
    decreasing; ``None`` parameters take ``REVERSE_DEFAULTS[shaping_input]`` (logit: calibrated;
    prob: alpha 6.4 -> w(1)=0.76, w(0.9)=0.91, w(0.5)=1.72, w(p<=0.37)=U=2, mean 0.99).
    """,
    default_input="logit",
)


REVERSE = register_algorithm(
    Algorithm(
        name="reverse",
        label="Reverse",
        color="#2ca02c",
        weight=reverse_weights,
        fields=SHAPING_FIELDS,
        params=shaping_params(REVERSE_DEFAULTS, "logit"),
        policy_loss=True,
        needs_logits=reads_logits,
        calibrate=shaping_calibration(-1.0),
        source="arXiv 2511.00066, the reversed shaping of its ablation, on the logit, calibrated",
    )
)
