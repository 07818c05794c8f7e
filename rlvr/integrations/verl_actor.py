"""A whole actor loss for verl's ``set_loss_fn``: the schemes a policy loss cannot express.

verl's registered policy losses (``rlvr.integrations.verl_plugin``) see only log-probs. verl 0.9.1's
model-engine workers (``verl/workers/engine_workers.py``) run a replaceable *actor loss*
``loss_fn(model_output, data, dp_group) -> (loss, metrics)`` (default
``partial(verl.workers.utils.losses.ppo_loss, config=actor_config)``), installed on the worker group
with ``actor_rollout_wg.set_loss_fn(fn)``. ``model_output`` holds per-token ``log_probs`` and, when
``actor.calculate_entropy=True`` (or ``entropy_coeff != 0``), ``entropy``. ``RlvrActorLoss`` is a
drop-in replacement computing verl's ``ppo_loss`` (same data fields, global-batch aggregation,
entropy bonus and KL loss) with our token weights on the surrogate:

- ``grpo``: weight 1; equals verl's ``ppo_loss`` with ``loss_mode=vanilla`` (tested).
- ``grpo_sg`` / ``reverse`` with ``shaping_input="logit"`` (GRPO-SG Eq. 20 proper) or ``"prob"``;
  ``ar``.
- ``entropy_top`` (80/20): keeps the top ``fraction`` of response tokens by entropy. verl computes
  the loss per micro-batch, so "top 20 % of the batch" is per micro-batch here (set
  ``ppo_micro_batch_size_per_gpu`` = mini-batch to make it the mini-batch); KL stays unmasked.
- ``lopti``: one stage per update, ``low`` (``p_old < eta``) or ``high``; the stage comes from the
  batch's non-tensor ``rlvr_lopti_stage`` (or the ``stage`` argument). Lopti's two optimizer steps
  per batch are two ``update_actor`` calls, low first (see ``docs/integrations_verl.md``). The
  token-mean denominator is verl's global token count of the whole mini-batch.

The sampled token's *logit* (needed by ``shaping_input="logit"``) is not in verl's
``model_output``. verl calls the loss function a second way, ``loss_fn(student_logits=..., data=...)``,
from inside the forward pass when the batch's non-tensor ``distillation_use_topk`` is True, and stores
each returned ``(1, total_nnz)`` tensor in ``model_output`` (``FSDPEngineWithLMHead.prepare_model_outputs``,
remove-padding path, sequence parallel 1, no fused kernels). ``RlvrActorLoss`` answers that call with
the temperature-scaled logit of each next token (``SAMPLED_LOGIT_KEY``), so a trainer that sets
``distillation_use_topk=True`` on the actor-update batch gets logit-shaped weights.
"""
from __future__ import annotations

from typing import Any, Optional

import torch
from tensordict import TensorDict
from verl.trainer.ppo.core_algos import agg_loss, kl_penalty
from verl.utils import tensordict_utils as tu
from verl.utils.metric import AggregationType, Metric
from verl.workers.utils.padding import no_padding_2_padding

from rlvr.agents.config import WeightConfig
from rlvr.agents.losses import clipped_surrogate
from rlvr.agents.weights import lopti_masks, token_weights
from rlvr.integrations.verl_plugin import clip_settings

#: ``model_output`` key of the sampled token's logit (filled through verl's logits hook).
SAMPLED_LOGIT_KEY = "rlvr_sampled_logit"
#: Non-tensor batch key selecting the Lopti stage (``"low"`` or ``"high"``).
LOPTI_STAGE_KEY = "rlvr_lopti_stage"
SCHEMES = ("grpo", "grpo_sg", "reverse", "ar", "entropy_top", "lopti")


def sampled_token_logits(student_logits: torch.Tensor, data: TensorDict) -> torch.Tensor:
    """``(1, total_nnz)`` logit of the next token at every packed position (verl's label layout:
    the packed ``input_ids`` rolled left by one, as ``input_ids_rmpad_rolled``)."""
    input_ids = data["input_ids"]
    ids = input_ids.values() if input_ids.is_nested else input_ids.reshape(-1)
    logits = student_logits.reshape(-1, student_logits.shape[-1])
    if logits.shape[0] != ids.shape[0]:
        raise ValueError(
            f"student_logits: {logits.shape[0]} positions for {ids.shape[0]} tokens; the logit hook "
            "supports remove-padding without sequence parallelism only"
        )
    labels = torch.roll(ids, shifts=-1, dims=0).to(logits.device)
    return logits.gather(-1, labels.unsqueeze(-1)).squeeze(-1).unsqueeze(0)


class RlvrActorLoss:
    """verl actor loss with rlvr's token weights (module docstring). Picklable, so Ray can ship
    it to the workers: ``actor_rollout_wg.set_loss_fn(RlvrActorLoss(actor_config, "grpo_sg",
    shaping_input="logit"))``.

    ``config`` is verl's ``ActorConfig`` (the worker's ``omega_conf_to_dataclass(config.actor)``);
    ``params`` are ``WeightConfig`` fields (``shaping_input``, ``alpha``, ``tau``, ``mu``, ``lower``,
    ``upper``, ``ar_alpha``, ``fraction``, ``eta``); ``weight_position`` as in ``policy_loss``.
    """

    def __init__(self, config: Any, scheme: str = "grpo", *, stage: Optional[str] = None,
                 weight_position: str = "surrogate", **params: Any):
        if scheme not in SCHEMES:
            raise ValueError(f"scheme: {scheme!r} is not one of {list(SCHEMES)}")
        if stage not in (None, "low", "high"):
            raise ValueError(f"stage: {stage!r} is not one of [None, 'low', 'high']")
        self.config = config
        self.scheme = scheme
        self.stage = stage
        self.weight_position = weight_position
        self.weight_config = WeightConfig(scheme=scheme, **params)
        self.weight_config.params()  # validate names now, not on the worker

    # -- verl's logits hook ------------------------------------------------------------------
    def logits_outputs(self, student_logits: torch.Tensor, data: TensorDict) -> dict[str, torch.Tensor]:
        with torch.no_grad():
            return {SAMPLED_LOGIT_KEY: sampled_token_logits(student_logits, data)}

    # -- the loss ------------------------------------------------------------------------------
    def __call__(self, model_output=None, data: Optional[TensorDict] = None, dp_group=None,
                 student_logits: Optional[torch.Tensor] = None):
        if student_logits is not None:
            return self.logits_outputs(student_logits, data)
        return self.loss(model_output, data)

    def _weights(self, log_prob, old_log_prob, mask, entropy, logits, data) -> Optional[torch.Tensor]:
        scheme = self.scheme
        if scheme == "grpo":
            return None
        if scheme == "lopti":
            stage = tu.get_non_tensor_data(data=data, key=LOPTI_STAGE_KEY, default=None) or self.stage
            if stage not in ("low", "high"):
                raise ValueError(f"{LOPTI_STAGE_KEY}: Lopti needs the stage 'low' or 'high', got {stage!r}")
            low, high = lopti_masks(old_log_prob, mask, eta=self.weight_config.eta)
            return low if stage == "low" else high
        if scheme == "entropy_top" and entropy is None:
            raise ValueError("entropy: 80/20 needs verl's per-token entropy; set actor.calculate_entropy=True")
        params = self.weight_config.params()
        if params.get("shaping_input") == "logit" and logits is None:
            raise ValueError(
                f"{SAMPLED_LOGIT_KEY}: shaping_input='logit' needs the sampled-token logits; set the "
                "batch's non-tensor distillation_use_topk=True so verl calls this loss's logits hook"
            )
        return token_weights(scheme, logprobs=log_prob, mask=mask, logits=logits, old_logprobs=old_log_prob,
                             entropy=entropy, **params)

    def loss(self, model_output: dict, data: TensorDict):
        config = self.config
        log_prob = no_padding_2_padding(model_output["log_probs"], data)
        entropy = model_output.get("entropy", None)
        if entropy is not None:
            entropy = no_padding_2_padding(entropy, data)
        logits = model_output.get(SAMPLED_LOGIT_KEY, None)
        if logits is not None:
            logits = no_padding_2_padding(logits, data)

        # global batch info for aggregation, exactly as verl's ppo_loss sets it
        config.global_batch_info["dp_size"] = data["dp_size"]
        config.global_batch_info["batch_num_tokens"] = data["batch_num_tokens"]
        config.global_batch_info["global_batch_size"] = data["global_batch_size"]
        config.global_batch_info["loss_scale_factor"] = config.loss_scale_factor
        global_norm = (data["dp_size"] > 1 or data["batch_num_tokens"] is not None
                       or data["global_batch_size"] is not None or config.loss_scale_factor is not None)
        metric_aggregation = AggregationType.SUM if global_norm else AggregationType.MEAN

        fields = ["response_mask", "old_log_probs", "advantages"]
        fields += [k for k in ("rollout_is_weights", "ref_log_prob") if k in data]
        padded = data.select(*fields).to_padded_tensor()
        mask = padded["response_mask"].to(bool)
        old_log_prob = padded["old_log_probs"]
        advantages = padded["advantages"]
        rollout_is_weights = padded.get("rollout_is_weights", None)

        weights = self._weights(log_prob, old_log_prob, mask, entropy, logits, data)
        clip_low, clip_high, clip_c = clip_settings(config)
        terms = clipped_surrogate(log_prob, old_log_prob, advantages, weights=weights, clip_low=clip_low,
                                  clip_high=clip_high, dual_clip=clip_c, weight_position=self.weight_position)
        pg = terms["pg"]
        if rollout_is_weights is not None:
            pg = pg * rollout_is_weights
        # Lopti's stage is a loss mask (tokens outside it do not enter the update at all).
        pg_mask = mask if self.scheme != "lopti" else mask & weights.to(torch.bool)
        pg_loss = agg_loss(loss_mat=pg, loss_mask=pg_mask, loss_agg_mode=config.loss_agg_mode,
                           **config.global_batch_info)

        with torch.no_grad():
            n = mask.sum().clamp(min=1)
            w = torch.ones_like(log_prob) if weights is None else weights
            pg_metrics = {
                "actor/pg_clipfrac": float((terms["clipped"] & mask).sum() / n),
                "actor/ppo_kl": float(((old_log_prob - log_prob) * mask).sum() / n),
                "actor/pg_clipfrac_lower": float((terms["dual_clipped"] & mask).sum() / n),
                "actor/rlvr_weight_mean": float((w * mask).sum() / n),
                "actor/rlvr_kept_frac": float(((w != 0) & mask).sum() / n),
            }
        metrics = dict(Metric.from_dict(pg_metrics, aggregation=AggregationType.MEAN))
        metrics["actor/pg_loss"] = Metric(value=pg_loss, aggregation=metric_aggregation)
        policy_loss = pg_loss
        if entropy is not None:
            entropy_loss = agg_loss(loss_mat=entropy, loss_mask=mask, loss_agg_mode=config.loss_agg_mode,
                                    **config.global_batch_info)
            policy_loss = policy_loss - config.entropy_coeff * entropy_loss
            metrics["actor/entropy_loss"] = Metric(value=entropy_loss, aggregation=metric_aggregation)
        if config.use_kl_loss:
            kld = kl_penalty(logprob=log_prob, ref_logprob=padded["ref_log_prob"], kl_penalty=config.kl_loss_type)
            kl_loss = agg_loss(loss_mat=kld, loss_mask=mask, loss_agg_mode=config.loss_agg_mode,
                               **config.global_batch_info)
            policy_loss = policy_loss + kl_loss * config.kl_loss_coef
            metrics["kl_loss"] = Metric(value=kl_loss, aggregation=metric_aggregation)
            metrics["kl_coef"] = config.kl_loss_coef
        return policy_loss, metrics
