"""Advantage Reweighting (Yang et al. 2025, "Do Not Let Low-Probability Tokens Over-Dominate in
RL for LLMs", arXiv 2505.12929): ``A_t = [alpha * pi_old(o_t) + 1 - alpha] * A``.

The factor is positive, so as a weight on the surrogate it equals reweighting the advantage, as
AR-Lopti computes it (zhyang2226/AR-Lopti@cbeb333 ``verl/trainer/ppo/ray_trainer.py``
``compute_reweight_advantage``, ``both_linear_normal``: ``(reweight_k * p_old + reweight_tau) * A``
with ``reweight_tau = 1 - alpha`` and ``neg_adv_weight = 1``), from the old log-probs, once.

alpha, each recipe its own:

- K&K, AR alone: 0.2, ``REWEIGHT_K=0.2`` / ``REWEIGHT_TAU=0.8`` in
  ``scripts/train_kklogic_AR_4x80GB.sh`` (AR-Lopti@b92ba16, unchanged at cbeb333). The AR+Lopti
  script ``scripts/train_kklogic_AR-Lopti_4x80GB.sh`` uses 0.3 with Lopti's eta 0.5 (this
  project's earlier defaults); that combination is not a baseline here.
- math: 0.1, the paper's math setting as recorded in ``docs/design.md`` §5; the repository ships
  K&K scripts only (``rlvr/profiles/*_math.yaml`` set it).
"""

from __future__ import annotations

from rlvr.agents.algorithms.base import Algorithm, Param, register_algorithm, require

#: ``REWEIGHT_K`` of ``scripts/train_kklogic_AR_4x80GB.sh`` (AR-Lopti@b92ba16).
AR_ALPHA_KK = 0.2
#: The math setting (``docs/design.md`` §5); the math profiles set it.
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
            "zhyang2226/AR-Lopti@b92ba16 scripts/train_kklogic_AR_4x80GB.sh (alpha 0.2)"
        ),
    )
)
