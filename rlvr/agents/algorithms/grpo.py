"""GRPO (Shao et al. 2024, DeepSeekMath): every response token weighs 1."""

from rlvr.agents.algorithms.base import Algorithm, register_algorithm

GRPO = register_algorithm(
    Algorithm(
        name="grpo",
        label="GRPO",
        color="#1f77b4",
        source="Shao et al. 2024, arXiv 2402.03300; verl core_algos.compute_policy_loss_vanilla",
    )
)
