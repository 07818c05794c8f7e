"""80/20 (Wang et al. 2025, "Beyond the 80/20 Rule", arXiv 2506.01939): the policy loss on the
top ``fraction`` of response tokens by entropy, KL on all of them.

As the official code does it (Shenzhi-Wang/Beyond-the-80-20-Rule-RLVR@6f5dda6,
``verl/workers/actor/dp_actor.py`` ``update_policy`` and
``core_algos.get_global_entropy_top_mask``):
the entropy is the one of the current training forward, the selection is made over the response
tokens of that forward (``ceil(fraction * n)`` tokens), and the surrogate is averaged over the
selected tokens only. The reference averages per micro-batch and scales by 1/accumulation; here
the denominator is the mini-batch's number of selected tokens (the global-batch aggregation of
``rlvr.agents.losses.agg_loss``), which is the same when a mini-batch is one forward.
"""

from rlvr.agents.algorithms import Algorithm, register_algorithm
from rlvr.agents.weights import entropy_top_weights


def select_top_entropy(entropy, mask, params):
    return entropy_top_weights(
        logprobs=entropy, mask=mask.bool(), entropy=entropy, fraction=params["fraction"]
    ).bool()


ENTROPY_TOP = register_algorithm(
    Algorithm(
        name="entropy_top",
        label="80/20 (entropy top)",
        color="#e377c2",
        params=lambda wc: {"fraction": wc.fraction},
        select_tokens=select_top_entropy,
        source="arXiv 2506.01939; Shenzhi-Wang/Beyond-the-80-20-Rule-RLVR@6f5dda6 dp_actor.py",
    )
)
