"""GRPO-SG (arXiv 2511.00066, Eq. 20): ``w = clip(alpha * (sigmoid(sg[h] / tau) - mu), L, U)``.

``h`` is the sampled token's raw logit under the current policy (``shaping_input="logit"``) or its
probability (``"prob"``, the TR-GRPO version); see ``rlvr.agents.weights.grpo_sg_weights``.
"""

from rlvr.agents.algorithms import Algorithm, register_algorithm
from rlvr.agents.config import shaping_defaults


def shaping_params(scheme: str):
    """``WeightConfig -> {alpha, tau, mu, lower, upper, shaping_input}``, unset fields taking the
    defaults of ``scheme`` for the chosen ``shaping_input`` (``rlvr.agents.config``)."""

    def params(wc) -> dict:
        out: dict = shaping_defaults(scheme, wc.shaping_input)
        for name in ("alpha", "tau", "mu", "lower", "upper"):
            if getattr(wc, name) is not None:
                out[name] = float(getattr(wc, name))
        out["shaping_input"] = wc.shaping_input
        return out

    return params


GRPO_SG = register_algorithm(
    Algorithm(
        name="grpo_sg",
        label="GRPO-SG",
        color="#d62728",
        weight="grpo_sg",
        params=shaping_params("grpo_sg"),
        source="arXiv 2511.00066 Eq. 20 (TR-GRPO: the probability form)",
    )
)
