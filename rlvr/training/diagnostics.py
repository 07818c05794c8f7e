"""The same-batch gradient probe: how the method's gradient differs from GRPO's on one mini-batch.

On a probed step (``TrainConfig.grad_cosine_every``) the first mini-batch's gradient of the
method's loss is already accumulated when ``gradient_probe`` runs; the probe moves it aside, runs
one more forward and backward of the same micro-batches with GRPO's loss (every token weight 1,
no selection, no stage; the same old log-probs, reference, advantages, clip and normalisers),
reads both, and puts the method's gradient back before the optimizer step. Nothing is stepped
with GRPO's gradient and the method's tensors are restored as they were, so the update is the
same bit for bit with or without the probe (``tests/test_update.py``). It records

- ``grad/cos_grpo``: the cosine between the two gradients (1: the weights only rescale);
- ``grad/norm_ratio_grpo``: ``||g_method|| / ||g_GRPO||`` on the same batch, the factor that a
  gradient-norm comparison between the methods includes as a change of scale (issue 48).

Both are of the loss the optimizer sees (the KL term included: zero at the first step).
"""

from __future__ import annotations

import dataclasses
import math

import torch

from rlvr.agents.algorithms import get_algorithm

#: GRPO: the reference of the probe.
GRPO = get_algorithm("grpo")


def _flat(grads: list[torch.Tensor | None], like: list[torch.Tensor]) -> torch.Tensor:
    return torch.cat(
        [
            (torch.zeros_like(p) if g is None else g).reshape(-1).to(torch.float64)
            for g, p in zip(grads, like)
        ]
    )


def gradient_probe(updater, micro_batches: list, norm) -> dict[str, float]:
    """``grad/cos_grpo`` and ``grad/norm_ratio_grpo`` of the accumulated gradient against GRPO's
    on ``micro_batches`` (one mini-batch, ``norm`` its ``Normalisers``); ``{}`` for GRPO itself
    and for a non-finite GRPO loss."""
    if updater.algorithm.name == GRPO.name:
        return {}
    params = [p for p in updater.policy.model.parameters() if p.requires_grad]
    method = [p.grad for p in params]
    for p in params:
        p.grad = None
    norm = dataclasses.replace(norm, selected=norm.tokens)  # GRPO selects no tokens
    try:
        finite = True
        for mb in micro_batches:
            mb = dataclasses.replace(mb, stage_tokens=None)
            loss, _, _ = updater.micro_batch_loss(mb, norm, algorithm=GRPO)
            if torch.isfinite(loss):
                updater.precision.backward(loss)
            else:
                finite = False
        grpo = _flat([p.grad for p in params], params)
    finally:
        for p, g in zip(params, method):
            p.grad = g
    if not finite:
        return {}
    ours = _flat(method, params)
    n_ours, n_grpo = float(ours.norm()), float(grpo.norm())
    if not (n_grpo > 0 and math.isfinite(n_grpo) and math.isfinite(n_ours)):
        return {}
    cos = float(ours @ grpo) / (n_ours * n_grpo) if n_ours > 0 else 0.0
    return {"grad/cos_grpo": cos, "grad/norm_ratio_grpo": n_ours / n_grpo}


__all__ = ["GRPO", "gradient_probe"]
