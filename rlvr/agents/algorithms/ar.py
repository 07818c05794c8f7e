"""Advantage Reweighting (Yang et al. 2025, "Do Not Let Low-Probability Tokens Over-Dominate in
RL for LLMs", arXiv 2505.12929): ``A_t = [alpha * pi_old(o_t) + 1 - alpha] * A``.

The factor is positive, so as a weight on the surrogate it equals reweighting the advantage.
alpha 0.3 on K&K and 0.1 on math (zhyang2226/AR-Lopti@cbeb333
``scripts/train_kklogic_AR_4x80GB.sh`` and the math script).
"""

from __future__ import annotations

from rlvr.agents.algorithms.base import Algorithm, Param, register_algorithm, require

AR_ALPHA_KK = 0.3
AR_ALPHA_MATH = 0.1
ALPHA = Param("ar_alpha", AR_ALPHA_KK, float, "[0, 1]", keyword="alpha")


def ar_weights(
    *, logprobs, mask, logits=None, old_logprobs=None, entropy=None, alpha: float = AR_ALPHA_KK
):
    """The weight ``alpha * pi_old(o_t) + 1 - alpha`` in ``[1 - alpha, 1]``,
    ``pi_old = exp(old_logprobs)``."""
    ALPHA.check(alpha, "alpha")
    old = require("old_logprobs", old_logprobs, logprobs, "ar")
    return alpha * old.exp() + (1.0 - alpha)


AR = register_algorithm(
    Algorithm(
        name="ar",
        label="AR",
        color="#9467bd",
        weight=ar_weights,
        fields=(ALPHA,),
        needs_old_logprobs=True,
        policy_loss=True,
        source=(
            "arXiv 2505.12929 (Advantage Reweighting); "
            "zhyang2226/AR-Lopti@cbeb333 scripts/train_kklogic_AR_4x80GB.sh"
        ),
    )
)
