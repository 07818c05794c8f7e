"""TR-GRPO (the earlier version of arXiv 2511.00066, "Sharpness-Controlled GRPO with Token-Level
Probability Shaping"): Eq. 20's shaping on the sampled token's probability,
``w = clip(alpha * (sigmoid(sg[pi_theta(o_t)] / tau) - mu), L, U)``.

tau 0.5, mu 0.5, L 0.1, U 2 are the probability form's defaults of this project (w(1) = 1.14 x
alpha / 3, w(0.5) = 0.69 x alpha / 3, w(p < 0.066) = L at alpha 3; ``docs/algorithms.md``): p lies
in [0, 1] on every model, so the shape, which tokens are suppressed, does not depend on the model.
Its mean does (tiny-kk 1.077, SmolLM2-135M 0.620 at alpha 3), so alpha is ``CALIBRATED``: set
once from the first batch for a token-mean weight of 1 (``shaping.calibrate_alpha``), for the
reason GRPO-SG's parameters are: a comparison with GRPO should not be a change of scale of the
policy gradient, nor of the KL term's weight against it.

Where the earlier version puts the weight (its Eq. 9 on the ratio inside min and clip, the KL term
weighted too, as public reviews of its withdrawn ICLR submission describe it) is the loss's
``weight_position`` and ``kl_weighting``; the grid keeps one placement for every shaping method
(``docs/algorithms.md``, "Where the weight enters").
"""

from __future__ import annotations

from rlvr.agents.algorithms.base import CALIBRATED, Algorithm, register_algorithm
from rlvr.agents.algorithms.shaping import (
    NUMBERS,
    shaping_calibration,
    shaping_params,
    shaping_weights,
)

#: The probability form: alpha calibrated to a token-mean weight of 1, the shape fixed.
TR_GRPO_DEFAULTS: dict[str, dict[str, object]] = {
    "prob": {"alpha": CALIBRATED, "tau": 0.5, "mu": 0.5, "lower": 0.1, "upper": 2.0},
}

tr_grpo_weights = shaping_weights(
    "tr_grpo",
    TR_GRPO_DEFAULTS,
    1.0,
    """TR-GRPO: ``w = clip(alpha * (sigmoid(sg[p] / tau) - mu), L, U)``, ``p = pi_theta(o_t)``;
    ``None`` parameters take ``TR_GRPO_DEFAULTS["prob"]`` (alpha calibrated before use).""",
    default_input="prob",
)


TR_GRPO = register_algorithm(
    Algorithm(
        name="tr_grpo",
        label="TR-GRPO",
        color="#ff7f0e",
        weight=tr_grpo_weights,
        fields=NUMBERS,
        params=shaping_params(TR_GRPO_DEFAULTS, "prob", choose_input=False),
        policy_loss=True,
        calibrate=shaping_calibration(1.0),
        source=(
            "the earlier version of arXiv 2511.00066 (TR-GRPO): Eq. 20 on the token probability; "
            "alpha calibrated to a token-mean weight of 1"
        ),
    )
)
