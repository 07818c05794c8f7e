"""Advantage Reweighting (Yang et al. 2025, arXiv 2505.12929):
``A_t = [alpha * pi_old(o_t) + 1 - alpha] * A``, alpha 0.3 on K&K and 0.1 on math."""

from rlvr.agents.algorithms import Algorithm, register_algorithm

AR = register_algorithm(
    Algorithm(
        name="ar",
        label="AR",
        color="#9467bd",
        weight="ar",
        params=lambda wc: {"alpha": wc.ar_alpha},
        needs_old_logprobs=True,
        source=(
            "arXiv 2505.12929 (Advantage Reweighting); "
            "zhyang2226/AR-Lopti@cbeb333 scripts/train_kklogic_AR_4x80GB.sh"
        ),
    )
)
