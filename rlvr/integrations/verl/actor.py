"""A whole actor loss for verl's ``set_loss_fn``: the schemes a policy loss cannot express.

verl's registered policy losses (``rlvr.integrations.verl.plugin``) see only log-probs. verl 0.9.1's
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
- ``entropy_top`` (80/20): the surrogate on the top ``fraction`` of each forward's response tokens
  by the current entropy, the kept tokens' sum divided by ``ceil(fraction * batch_num_tokens)``
  (verl's global token count of the mini-batch), KL on all tokens: the number the native update
  divides by (``rlvr/agents/algorithms/entropy_top.py``; ``docs/algorithms.md``, "Normalisers").
- ``lopti`` (any algorithm with ``stages`` in the registry): one stage per update, ``low``
  (``p_old < eta``) or ``high``, named by the batch's non-tensor ``rlvr_lopti_stage`` (or the
  ``stage`` argument). Lopti's two optimizer steps per batch are two ``update_actor`` calls, low
  first (``rlvr.integrations.verl.trainer``). As AR-Lopti's ``dp_actor.py``: the advantage is
  zeroed outside the stage, KL and entropy are multiplied by the stage mask, and every term keeps
  verl's global token count of the whole mini-batch as its denominator.

The sampled token's *logit* (needed by ``shaping_input="logit"``) is not in verl's
``model_output``. verl calls the loss function a second way,
``loss_fn(student_logits=..., data=...)``, from inside the forward pass when the batch's
non-tensor ``distillation_use_topk`` is True, and stores each returned ``(1, total_nnz)`` tensor
in ``model_output`` (``FSDPEngineWithLMHead.prepare_model_outputs``, remove-padding path,
sequence parallel 1, no fused kernels). verl has divided those logits by the
rollout temperature; ``RlvrActorLoss`` answers that call with the raw logit of each next token
(``SAMPLED_LOGIT_KEY``, multiplied back by the temperature: the convention of the native trainer,
``docs/algorithms.md``), so a trainer that sets ``distillation_use_topk=True`` on the
actor-update batch gets logit-shaped weights.
"""

from __future__ import annotations

from typing import Any, Optional

import torch
from tensordict import TensorDict
from verl.trainer.ppo.core_algos import agg_loss, kl_penalty
from verl.utils import tensordict_utils as tu
from verl.utils.metric import AggregationType, Metric
from verl.workers.utils.padding import no_padding_2_padding

from rlvr.agents.algorithms import WeightConfig, get_algorithm
from rlvr.agents.method_loss import LossInputs, method_loss
from rlvr.integrations.verl.plugin import clip_settings

#: ``model_output`` key of the sampled token's logit (filled through verl's logits hook).
SAMPLED_LOGIT_KEY = "rlvr_sampled_logit"
#: Non-tensor batch key selecting the Lopti stage (``"low"`` or ``"high"``).
LOPTI_STAGE_KEY = "rlvr_lopti_stage"


def _temperature(data: TensorDict) -> float:
    """The one sampling temperature of ``data`` (verl keeps it as a scalar or per-row tensor)."""
    t = tu.get_non_tensor_data(data=data, key="temperature", default=None)
    if t is None and "temperature" in data.keys():
        t = data["temperature"]
    if t is None:
        return 1.0
    if isinstance(t, torch.Tensor):
        values = t.values() if t.is_nested else t
        values = values.reshape(-1).float()
        if values.numel() and not bool((values == values[0]).all()):
            raise ValueError("temperature: logit shaping needs one temperature per batch")
        return float(values[0]) if values.numel() else 1.0
    return float(t)


def sampled_token_logits(student_logits: torch.Tensor, data: TensorDict) -> torch.Tensor:
    """``(1, total_nnz)`` raw logit of the next token at every packed position (verl's label
    layout: the packed ``input_ids`` rolled left by one, as ``input_ids_rmpad_rolled``); verl's
    temperature-divided logits are multiplied back by the temperature."""
    input_ids = data["input_ids"]
    ids = input_ids.values() if input_ids.is_nested else input_ids.reshape(-1)
    logits = student_logits.reshape(-1, student_logits.shape[-1])
    if logits.shape[0] != ids.shape[0]:
        raise ValueError(
            f"student_logits: {logits.shape[0]} positions for {ids.shape[0]} tokens; "
            "the logit hook supports remove-padding without sequence parallelism only"
        )
    labels = torch.roll(ids, shifts=-1, dims=0).to(logits.device)
    picked = logits.gather(-1, labels.unsqueeze(-1)).squeeze(-1).unsqueeze(0)
    return picked * _temperature(data)


class RlvrActorLoss:
    """verl actor loss with rlvr's token weights (module docstring). Picklable, so Ray can ship
    it to the workers: ``actor_rollout_wg.set_loss_fn(RlvrActorLoss(actor_config, "grpo_sg",
    shaping_input="logit"))``.

    ``config`` is verl's ``ActorConfig`` (the worker's ``omega_conf_to_dataclass(config.actor)``);
    ``params`` are ``WeightConfig`` fields (``shaping_input``, ``alpha``, ``tau``, ``mu``,
    ``lower``, ``upper``, ``ar_alpha``, ``fraction``, ``eta``); ``weight_position`` as in
    ``policy_loss``.
    """

    def __init__(
        self,
        config: Any,
        scheme: str = "grpo",
        *,
        stage: Optional[str] = None,
        weight_position: str = "surrogate",
        **params: Any,
    ):
        try:
            self.algorithm = get_algorithm(scheme)
        except ValueError:
            raise ValueError(f"scheme: {scheme!r} is not a registered algorithm") from None
        if stage is not None and self.algorithm.stages is None:
            raise ValueError(f"stage: {scheme!r} has no stages, got {stage!r}")
        self.config = config
        self.scheme = scheme
        self.stage = stage
        self.weight_position = weight_position
        self.weight_config = WeightConfig(**params)
        self.params = self.algorithm.parameters(self.weight_config)  # checked now, not on a worker

    # -- pickling (Ray ships the loss to every worker) ------------------------------------------
    def __getstate__(self) -> dict:
        # the registry entry holds lambdas: send its name, look it up again on the worker
        return {k: v for k, v in self.__dict__.items() if k != "algorithm"}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self.algorithm = get_algorithm(self.scheme)

    # -- verl's logits hook ------------------------------------------------------------------
    def logits_outputs(
        self, student_logits: torch.Tensor, data: TensorDict
    ) -> dict[str, torch.Tensor]:
        with torch.no_grad():
            return {SAMPLED_LOGIT_KEY: sampled_token_logits(student_logits, data)}

    # -- the loss ------------------------------------------------------------------------------
    def __call__(
        self,
        model_output=None,
        data: Optional[TensorDict] = None,
        dp_group=None,
        student_logits: Optional[torch.Tensor] = None,
    ):
        if student_logits is not None:
            return self.logits_outputs(student_logits, data)
        return self.loss(model_output, data)

    def _stage(self, old_log_prob, mask, data) -> torch.Tensor:
        """The tokens (bool ``[B, T]``) of the stage the batch names (Lopti: low or high)."""
        name = tu.get_non_tensor_data(data=data, key=LOPTI_STAGE_KEY, default=None) or self.stage
        stages = self.algorithm.stages(old_log_prob, mask, self.params)
        for stage in stages:
            if stage.name == name:
                return stage.tokens.to(torch.bool)
        raise ValueError(
            f"{LOPTI_STAGE_KEY}: {self.scheme!r} needs one of the stages "
            f"{[s.name for s in stages]}, got {name!r}"
        )

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
        global_norm = (
            data["dp_size"] > 1
            or data["batch_num_tokens"] is not None
            or data["global_batch_size"] is not None
            or config.loss_scale_factor is not None
        )
        metric_aggregation = AggregationType.SUM if global_norm else AggregationType.MEAN

        fields = ["response_mask", "old_log_probs", "advantages"]
        fields += [k for k in ("rollout_is_weights", "ref_log_prob") if k in data]
        padded = data.select(*fields).to_padded_tensor()
        mask = padded["response_mask"].to(bool)
        old_log_prob = padded["old_log_probs"]
        if self.algorithm.weight is not None and self.algorithm.needs_logits(self.params):
            if logits is None:
                raise ValueError(
                    f"{SAMPLED_LOGIT_KEY}: shaping_input='logit' needs the sampled-token logits; "
                    "set the batch's non-tensor distillation_use_topk=True so verl calls this "
                    "loss's logits hook"
                )
        if self.algorithm.select_tokens is not None and entropy is None:
            raise ValueError(
                "entropy: 80/20 needs verl's per-token entropy; set actor.calculate_entropy=True"
            )
        stage = self._stage(old_log_prob, mask, data) if self.algorithm.stages else None
        pg_batch_info = dict(config.global_batch_info)
        if (
            self.algorithm.select_tokens is not None
            and pg_batch_info["batch_num_tokens"] is not None
        ):
            total = int(pg_batch_info["batch_num_tokens"])  # the kept tokens' count
            pg_batch_info["batch_num_tokens"] = self.algorithm.selected(self.params, total)

        def aggregate(loss_mat, tokens, surrogate: bool):
            info = pg_batch_info if surrogate else config.global_batch_info
            return agg_loss(
                loss_mat=loss_mat, loss_mask=tokens, loss_agg_mode=config.loss_agg_mode, **info
            )

        clip_low, clip_high, clip_c = clip_settings(config)
        inputs = LossInputs(
            log_prob,
            old_log_prob,
            padded["advantages"],
            mask,
            entropy=entropy,
            logits=logits,
            ref_logprobs=padded["ref_log_prob"] if config.use_kl_loss else None,
            stage=stage,
            rollout_weights=padded.get("rollout_is_weights", None),
        )
        out = method_loss(
            self.algorithm,
            self.params,
            inputs,
            aggregate=aggregate,
            kl_penalty=lambda lp, ref: kl_penalty(
                logprob=lp, ref_logprob=ref, kl_penalty=config.kl_loss_type
            ),
            clip_low=clip_low,
            clip_high=clip_high,
            dual_clip=clip_c,
            weight_position=self.weight_position,
            kl_coef=config.kl_loss_coef if config.use_kl_loss else 0.0,
            entropy_coef=config.entropy_coeff,
        )
        with torch.no_grad():
            n = mask.sum().clamp(min=1)
            w = torch.ones_like(log_prob) if out.weights is None else out.weights
            kept = out.pg_mask if stage is None else stage
            terms = out.terms
            pg_metrics = {
                "actor/pg_clipfrac": float((terms["clipped"] & mask).sum() / n),
                "actor/ppo_kl": float(((old_log_prob - log_prob) * mask).sum() / n),
                "actor/pg_clipfrac_lower": float((terms["dual_clipped"] & mask).sum() / n),
                "actor/rlvr_weight_mean": float((w * mask).sum() / n),
                "actor/rlvr_kept_frac": float(((w != 0) & kept).sum() / n),
            }
        metrics = dict(Metric.from_dict(pg_metrics, aggregation=AggregationType.MEAN))
        metrics["actor/pg_loss"] = Metric(value=out.pg_loss, aggregation=metric_aggregation)
        if out.entropy_loss is not None:
            metrics["actor/entropy_loss"] = Metric(
                value=out.entropy_loss, aggregation=metric_aggregation
            )
        if config.use_kl_loss:
            metrics["kl_loss"] = Metric(value=out.kl_loss, aggregation=metric_aggregation)
            metrics["kl_coef"] = config.kl_loss_coef
        return out.loss, metrics
