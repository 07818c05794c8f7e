"""Reverse shaping (arXiv 2511.00066 ablation): GRPO-SG's Eq. 20 on ``-h``, decreasing in ``h``."""

from rlvr.agents.algorithms import Algorithm, register_algorithm
from rlvr.agents.algorithms.grpo_sg import shaping_params

REVERSE = register_algorithm(
    Algorithm(
        name="reverse",
        label="Reverse",
        color="#2ca02c",
        weight="reverse",
        params=shaping_params("reverse"),
        source="arXiv 2511.00066, the reversed shaping of its ablation",
    )
)
