"""Lopti (Yang et al. 2025, arXiv 2505.12929): low-probability tokens first, then the rest.

As AR-Lopti's code does it (zhyang2226/AR-Lopti@cbeb333, ``verl/trainer/ppo/ray_trainer.py``
``fit``, ``seperate_updating`` with ``seperate_prob = eta``, and ``verl/workers/actor/dp_actor.py``
``update_policy``): old log-probs are computed once; then two full ``update_actor`` passes, every
mini-batch of the low stage (``pi_old < eta``) and then every mini-batch of the high stage. Each
stage zeroes the advantage outside its tokens and multiplies KL (and entropy) by its token mask,
while the loss keeps the full response mask as its normaliser. The reverse order (high first)
collapses training (the paper's ablation). Both stages always run, empty or not, as there, and
each splits the batch into the same mini-batches, in order (``dp_actor.py``
``batch.split(ppo_mini_batch_size)``; ``rlvr.training.update``).

eta 0.4: ``SEPERATE_PROB=0.4`` of ``scripts/train_kklogic_Lopti_4x80GB.sh`` (AR-Lopti@b92ba16,
unchanged at cbeb333; the script also turns AR off, ``REWEIGHT_K=0.0``, ``REWEIGHT_TAU=1.0``).
The AR+Lopti script ``scripts/train_kklogic_AR-Lopti_4x80GB.sh`` uses 0.5 with AR's alpha 0.3
(this project's earlier defaults); that combination is not a baseline here. The
repository ships K&K scripts only, so every task runs Lopti with its K&K eta.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

from rlvr.agents.algorithms.base import Algorithm, Param, Stage, register_algorithm

#: The threshold eta (AR-Lopti's ``seperate_prob``) of ``scripts/train_kklogic_Lopti_4x80GB.sh``.
LOPTI_ETA = 0.4
ETA = Param("eta", LOPTI_ETA, float, "(0, 1)")


def lopti_masks(
    old_logprobs: torch.Tensor, mask: torch.Tensor, eta: float = LOPTI_ETA
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(low_mask, high_mask)`` with ``low = mask & (pi_old < eta)``,
    ``high = mask & (pi_old >= eta)``; they partition the response tokens. Float masks shaped like
    ``old_logprobs``.
    """
    import torch

    ETA.check(eta)
    if mask.shape != old_logprobs.shape:
        raise ValueError(
            f"mask: shape {tuple(mask.shape)} != old_logprobs shape {tuple(old_logprobs.shape)}"
        )
    with torch.no_grad():
        valid = mask.to(torch.bool)
        low = valid & (old_logprobs.detach().exp() < eta)
        high = valid & ~low
    return low.to(old_logprobs.dtype), high.to(old_logprobs.dtype)


def lopti_stages(
    old_logprobs: torch.Tensor,
    mask: torch.Tensor,
    eta: float = LOPTI_ETA,
    *,
    drop_empty: bool = True,
) -> list[tuple[str, torch.Tensor]]:
    """The ordered Lopti updates for one mini-batch: ``[("low", low_mask), ("high", high_mask)]``.

    First the low-probability tokens (``pi_old < eta``), then the rest. ``drop_empty`` omits a
    stage with no tokens, since an optimizer step on a zero gradient still moves AdamW's moments
    and applies weight decay (the algorithm keeps both, as the reference does).
    """
    low, high = lopti_masks(old_logprobs, mask, eta)
    stages = [("low", low), ("high", high)]
    if drop_empty:
        stages = [(name, m) for name, m in stages if bool(m.sum() > 0)]
    return stages


def stages(old_logprobs, mask, params) -> list[Stage]:
    """``[low, high]`` from ``lopti_stages`` (empty stages kept, as the reference)."""
    return [
        Stage(name, m.bool())
        for name, m in lopti_stages(old_logprobs, mask, params["eta"], drop_empty=False)
    ]


LOPTI = register_algorithm(
    Algorithm(
        name="lopti",
        label="Lopti",
        color="#8c564b",
        fields=(ETA,),
        stages=stages,
        n_stages=2,
        needs_old_logprobs=True,
        source=(
            "arXiv 2505.12929 (Lopti); zhyang2226/AR-Lopti@cbeb333 ray_trainer.py, dp_actor.py; "
            "eta 0.4: AR-Lopti@b92ba16 scripts/train_kklogic_Lopti_4x80GB.sh"
        ),
    )
)
