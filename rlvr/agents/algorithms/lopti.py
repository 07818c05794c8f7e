"""Lopti (Yang et al. 2025, arXiv 2505.12929): low-probability tokens first, then the rest.

As AR-Lopti's code does it (zhyang2226/AR-Lopti@cbeb333, ``verl/trainer/ppo/ray_trainer.py``
``fit``, ``seperate_updating`` with ``seperate_prob = eta``, and ``verl/workers/actor/dp_actor.py``
``update_policy``): old log-probs are computed once; then two full ``update_actor`` passes, every
mini-batch of the low stage (``pi_old < eta``) and then every mini-batch of the high stage. Each
stage zeroes the advantage outside its tokens and multiplies KL (and entropy) by its token mask,
while the loss keeps the full response mask as its normaliser. The reverse order (high first)
collapses training (the paper's ablation). Both stages always run, empty or not, as there.
"""

from rlvr.agents.algorithms import Algorithm, Stage, register_algorithm
from rlvr.agents.weights import lopti_stages


def stages(old_logprobs, mask, params) -> list[Stage]:
    """``[low, high]`` from ``weights.lopti_stages`` (empty stages kept, as the reference)."""
    return [
        Stage(name, m.bool())
        for name, m in lopti_stages(old_logprobs, mask, params["eta"], drop_empty=False)
    ]


LOPTI = register_algorithm(
    Algorithm(
        name="lopti",
        label="Lopti",
        color="#8c564b",
        params=lambda wc: {"eta": wc.eta},
        stages=stages,
        n_stages=2,
        needs_old_logprobs=True,
        source="arXiv 2505.12929 (Lopti); zhyang2226/AR-Lopti@cbeb333 ray_trainer.py, dp_actor.py",
    )
)
