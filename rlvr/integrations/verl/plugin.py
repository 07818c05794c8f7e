"""verl plugin: rlvr's probability-based token-weighted losses in verl's policy-loss registry.

verl 0.9.1 loads every entry point of the ``verl.plugins`` group at the end of ``import verl``
(``verl/__init__.py``; ``VERL_USE_EXTERNAL_PLUGINS=none`` turns discovery off, a comma list keeps
only the named entry points). rlvr declares::

    [project.entry-points."verl.plugins"]
    rlvr = "rlvr.integrations.verl.plugin"

so importing this module registers, with ``verl.trainer.ppo.core_algos.register_policy_loss``,
every algorithm of ``rlvr.agents.algorithms`` whose weight reads log-probs only
(``Algorithm.policy_loss``):

- ``grpo_sg``: TR-GRPO weights ``clip(alpha * (sigmoid(p / tau) - mu), L, U)`` on
  ``p = exp(log_prob)`` (GRPO-SG Eq. 20 with ``shaping_input="prob"``);
- ``reverse``: the decreasing counterpart;
- ``ar``: advantage reweighting ``(alpha * p_old + 1 - alpha) * A`` (Yang et al. 2025).

Select one with ``actor_rollout_ref.actor.policy_loss.loss_mode=grpo_sg``. A verl policy loss
receives only log-probs, so logit-shaped GRPO-SG, 80/20 (entropy) and Lopti (two optimizer steps)
cannot be policy losses: they go through ``rlvr.integrations.verl.actor`` and ``set_loss_fn``.

Each loss has verl's exact signature ``(old_log_prob, log_prob, advantages, response_mask,
loss_agg_mode, config, rollout_is_weights) -> (loss, metrics)``, computes the same per-token
surrogate as verl's ``vanilla`` loss (clip ``config.clip_ratio_low/high``, dual clip
``config.clip_ratio_c`` for negative advantages) times our detached weight, multiplies verl's
rollout-correction weights when given, and aggregates with verl's own
``agg_loss(..., **config.global_batch_info)`` so the loss is invariant to data parallelism.

Hyperparameters live in verl's policy-loss config. verl's ``PolicyLossConfig`` dataclass rejects
unknown keys, so point its ``_target_`` at ``RlvrPolicyLossConfig`` (a subclass adding our keys:
the ``WeightConfig`` fields of those algorithms, generated from the registry, and
``weight_position``)::

    actor_rollout_ref.actor.policy_loss._target_=rlvr.integrations.verl.plugin.RlvrPolicyLossConfig
    +actor_rollout_ref.actor.policy_loss.alpha=... (also tau, mu, lower, upper, ar_alpha,
    weight_position, shaping_input)

Keys left unset take the algorithm's defaults (``rlvr.agents.algorithms.grpo_sg`` etc.).

With ``RLVR_VERL_CPU=1`` it first activates verl's CPU platform and work-arounds
(``rlvr.integrations.verl.cpu``), so that they hold in every process of the run.

It also imports ``rlvr.integrations.verl.agent_loop``, which registers the search-QA agent loop
``rlvr_searchqa`` in every verl process (a failed import is logged at debug level, as verl logs
plugin failures, so the losses stay usable).
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any, Optional

from rlvr.integrations.verl import cpu

# First, before verl's trainer modules load: with RLVR_VERL_CPU=1, the CPU platform and the
# work-arounds of rlvr.integrations.verl.cpu, in every process that imports verl.
cpu.activate()

import torch  # noqa: E402
from verl.trainer.ppo.core_algos import agg_loss, register_policy_loss  # noqa: E402
from verl.workers.config import PolicyLossConfig  # noqa: E402

from rlvr.agents.algorithms import (  # noqa: E402
    ALGORITHMS,
    WeightConfig,
    get_algorithm,
    policy_loss_fields,
)
from rlvr.agents.method_loss import LossInputs, method_loss  # noqa: E402

#: The policy-loss names this plugin registers in verl (``loss_mode``): the algorithms whose
#: weight reads log-probs only.
PLUGIN_LOSSES = tuple(name for name, a in ALGORITHMS.items() if a.policy_loss)
#: The keys read from ``config.policy_loss``: those algorithms' ``WeightConfig`` fields and the
#: weight position.
CONFIG_KEYS = (*policy_loss_fields(), "weight_position")

#: verl's ``PolicyLossConfig`` plus rlvr's keys (None: rlvr's default).
RlvrPolicyLossConfig = dataclasses.make_dataclass(
    "RlvrPolicyLossConfig",
    [(name, kind, dataclasses.field(default=None)) for name, kind in policy_loss_fields().items()]
    + [("weight_position", str, dataclasses.field(default="surrogate"))],
    bases=(PolicyLossConfig,),
)
RlvrPolicyLossConfig.__module__ = __name__


def _get(cfg: Any, key: str, default: Any = None) -> Any:
    """``cfg.get(key)`` for verl's dataclass configs, OmegaConf ``DictConfig`` and dicts alike."""
    if cfg is None:
        return default
    value = cfg.get(key, default) if hasattr(cfg, "get") else getattr(cfg, key, default)
    return default if value is None else value


def weight_config(scheme: str, config: Any) -> tuple[WeightConfig, str]:
    """``(WeightConfig, weight_position)`` for ``scheme`` from ``config.policy_loss``.

    Raises ``ValueError`` naming the key when the method would read the sampled token's logit
    (``shaping_input="logit"``): a verl policy loss sees no logits (use
    ``rlvr.integrations.verl.actor`` for the logit form).
    """
    if scheme not in PLUGIN_LOSSES:
        raise ValueError(
            f"loss_mode: {scheme!r} is not an rlvr plugin loss; known: {list(PLUGIN_LOSSES)}"
        )
    pl = _get(config, "policy_loss")
    fields = {k: _get(pl, k) for k in policy_loss_fields()}
    wc = WeightConfig(**{k: v for k, v in fields.items() if v is not None})
    if get_algorithm(scheme).needs_logits(wc.params(scheme)):
        raise ValueError(
            f"policy_loss.shaping_input: verl passes a policy loss only log-probs, "
            f"so {scheme!r} runs with shaping_input='prob' here, got {wc.shaping_input!r}; use "
            "rlvr.integrations.verl.actor (set_loss_fn) for logit-shaped GRPO-SG"
        )
    return wc, str(_get(pl, "weight_position", "surrogate"))


def clip_settings(config: Any) -> tuple[float, float, float]:
    """``(clip_low, clip_high, clip_ratio_c)`` exactly as verl's ``vanilla`` loss reads them."""
    clip = _get(config, "clip_ratio", 0.2)
    return (
        float(_get(config, "clip_ratio_low", clip)),
        float(_get(config, "clip_ratio_high", clip)),
        float(_get(config, "clip_ratio_c", 3.0)),
    )


def rlvr_policy_loss(
    scheme: str,
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    config: Any = None,
    rollout_is_weights: Optional[torch.Tensor] = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """The token-weighted clipped surrogate of ``scheme`` in verl's policy-loss contract.

    The method's loss as every engine composes it (``rlvr.agents.method_loss``): weights of
    log-probs (detached), per-token loss ``w * s`` with ``s`` verl's dual-clip surrogate,
    aggregation verl's ``agg_loss``; verl adds its KL loss itself.
    """
    if config is None:
        raise ValueError("config: verl passes the actor config; rlvr's verl losses need it")
    wc, weight_position = weight_config(scheme, config)
    clip_low, clip_high, clip_c = clip_settings(config)
    mask = response_mask.to(torch.bool)
    global_batch_info = dict(_get(config, "global_batch_info", {}) or {})

    def aggregate(loss_mat, tokens, surrogate: bool):
        return agg_loss(
            loss_mat=loss_mat, loss_mask=tokens, loss_agg_mode=loss_agg_mode, **global_batch_info
        )

    out = method_loss(
        get_algorithm(scheme),
        wc.params(scheme),
        LossInputs(
            log_prob, old_log_prob, advantages.detach(), mask, rollout_weights=rollout_is_weights
        ),
        aggregate=aggregate,
        clip_low=clip_low,
        clip_high=clip_high,
        dual_clip=clip_c,
        weight_position=weight_position,
    )
    terms, weights = out.terms, out.weights
    with torch.no_grad():
        n = mask.sum().clamp(min=1)
        valid_w = weights[mask]
        metrics = {
            "actor/pg_clipfrac": float((terms["clipped"] & mask).sum() / n),
            "actor/ppo_kl": float(((old_log_prob - log_prob) * mask).sum() / n),
            "actor/pg_clipfrac_lower": float((terms["dual_clipped"] & mask).sum() / n),
            "actor/rlvr_weight_mean": float(valid_w.mean()) if valid_w.numel() else 0.0,
            "actor/rlvr_weight_min": float(valid_w.min()) if valid_w.numel() else 0.0,
            "actor/rlvr_weight_max": float(valid_w.max()) if valid_w.numel() else 0.0,
        }
    return out.loss, metrics


def _registered_loss(scheme: str):
    """verl's policy-loss signature bound to ``scheme`` (``rlvr_policy_loss``), registered as
    ``loss_mode=scheme``."""

    def loss(
        old_log_prob,
        log_prob,
        advantages,
        response_mask,
        loss_agg_mode="token-mean",
        config=None,
        rollout_is_weights=None,
    ):
        return rlvr_policy_loss(
            scheme,
            old_log_prob,
            log_prob,
            advantages,
            response_mask,
            loss_agg_mode,
            config,
            rollout_is_weights,
        )

    loss.__name__ = f"compute_policy_loss_{scheme}"
    return register_policy_loss(scheme)(loss)


#: grpo_sg: TR-GRPO / GRPO-SG on the probability; reverse: the decreasing shaping; ar: advantage
#: reweighting ``(alpha * p_old + 1 - alpha) * A``.
for _scheme in PLUGIN_LOSSES:
    _registered_loss(_scheme)

try:  # the rlvr_searchqa agent loop (verl.experimental.agent_loop's registry)
    from rlvr.integrations.verl import agent_loop  # noqa: F401
except Exception as _error:  # noqa: BLE001 - an experimental verl API must not break the losses
    logging.getLogger(__name__).debug("rlvr_searchqa agent loop not registered: %r", _error)
