"""The ``rlvr`` section of a verl config: read, checked against the verl settings its path needs,
and applied (``RlvrSetup``) before the workers exist. ``rlvr.integrations.verl.trainer`` runs what
it sets up and documents the section's keys.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any, Optional

from omegaconf import DictConfig, OmegaConf, open_dict
from verl import DataProto
from verl.trainer.distillation.losses import is_distillation_enabled
from verl.utils.config import omega_conf_to_dataclass

from rlvr.agents.algorithms import Algorithm, WeightConfig, get_algorithm
from rlvr.agents.algorithms.base import CALIBRATED
from rlvr.agents.method_loss import KL_WEIGHTINGS
from rlvr.agents.metrics import MAX_TOOL_FAILURE_RATE, check_failure_rate
from rlvr.config import ConfigError
from rlvr.integrations.verl.actor import RlvrActorLoss
from rlvr.integrations.verl.config import plugin_loss_config
from rlvr.integrations.verl.data import agent_loop_envs

#: Keys of the ``rlvr`` section, besides one section per environment whose agent loop reads one
#: (``EnvSpec.verl.section``: search QA's ``searchqa``).
RLVR_KEYS = ("algo", "params", "weight_position", "kl_weighting", "max_tool_failure_rate")
#: ``rlvr.params`` keys: the fields of ``WeightConfig``.
PARAM_KEYS = tuple(f.name for f in dataclasses.fields(WeightConfig))
WEIGHT_POSITIONS = ("surrogate", "ratio")
_ACTOR = "actor_rollout_ref.actor"
_MODEL = "actor_rollout_ref.model"


class RlvrConfigError(ValueError):
    """A bad ``rlvr`` section or a verl setting the chosen algorithm cannot run with."""


@dataclasses.dataclass(frozen=True)
class RlvrSetup:
    """The validated ``rlvr`` section and what it installs in verl (module docstring)."""

    algo: str
    algorithm: Algorithm
    weight_config: WeightConfig
    #: ``algorithm.parameters(weight_config)``: the keyword parameters the method reads.
    params: dict
    weight_position: str
    #: How the loss reaches verl: ``vanilla`` (verl's own), ``policy_loss`` (a registered policy
    #: loss) or ``actor_loss`` (``RlvrActorLoss`` through ``set_loss_fn``).
    path: str
    #: Share of a generated batch's tool calls that may fail before the run stops.
    max_tool_failure_rate: float = MAX_TOOL_FAILURE_RATE
    #: How the weight enters the KL term (``rlvr.agents.method_loss.KL_WEIGHTINGS``).
    kl_weighting: str = "none"

    @property
    def needs_logits(self) -> bool:
        """The weight reads the sampled token's logit (GRPO-SG / Reverse, Eq. 20 on the logit)."""
        return self.algorithm.weight is not None and self.algorithm.needs_logits(self.params)

    def update_flags(self) -> dict[str, Any]:
        """Non-tensor flags every actor-update batch needs (beyond verl's own)."""
        flags: dict[str, Any] = {}
        if self.needs_logits:
            flags["distillation_use_topk"] = True
        if self.algorithm.select_tokens is not None:
            flags["calculate_entropy"] = True
        return flags

    def stage_names(self, batch: DataProto) -> list[Optional[str]]:
        """The stages of ``batch`` in update order (``[None]``: one update, no stages)."""
        if self.algorithm.stages is None:
            return [None]
        keys = batch.batch.keys()
        for key in ("old_log_probs", "response_mask"):
            if key not in keys:
                raise RlvrConfigError(f"{key}: {self.algo!r} needs it in the actor-update batch")
        stages = self.algorithm.stages(
            batch.batch["old_log_probs"], batch.batch["response_mask"].bool(), self.params
        )
        return [s.name for s in stages]

    def actor_loss(self, config: DictConfig, calibrated: Mapping | None = None) -> RlvrActorLoss:
        """``RlvrActorLoss`` for verl's actor config ``config.actor_rollout_ref.actor``, with the
        ``calibrated`` values of an earlier start of the run as numbers."""
        actor_config = omega_conf_to_dataclass(OmegaConf.select(config, _ACTOR))
        fields = {**dataclasses.asdict(self.weight_config), **(calibrated or {})}
        return RlvrActorLoss(
            actor_config,
            self.algo,
            weight_position=self.weight_position,
            kl_weighting=self.kl_weighting,
            **fields,
        )


def is_number(x: Any) -> bool:
    """A finite int or float (not a bool)."""
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _weight_config(params: Mapping) -> WeightConfig:
    for key, value in params.items():
        if key not in PARAM_KEYS:
            raise RlvrConfigError(f"rlvr.params.{key}: unknown; known: {list(PARAM_KEYS)}")
        if key == "shaping_input":
            if value not in ("logit", "prob"):
                raise RlvrConfigError(
                    f"rlvr.params.shaping_input: {value!r} is not one of ['logit', 'prob']"
                )
        elif key == "extra":
            if not isinstance(value, Mapping) or not all(is_number(v) for v in value.values()):
                raise RlvrConfigError("rlvr.params.extra: must map names to finite numbers")
        elif not (value is None or value == CALIBRATED or is_number(value)):
            raise RlvrConfigError(
                f"rlvr.params.{key}: must be a finite number or {CALIBRATED!r}, got {value!r}"
            )
    return WeightConfig(**{k: (dict(v) if k == "extra" else v) for k, v in params.items()})


def _select(config: DictConfig, key: str, default: Any = None) -> Any:
    return OmegaConf.select(config, key, default=default)


def _check_engine(config: DictConfig, setup: RlvrSetup) -> None:
    """verl settings the chosen path cannot run with (one-line errors naming the key)."""
    loss_mode = _select(config, f"{_ACTOR}.policy_loss.loss_mode", "vanilla")
    wanted = setup.algo if setup.path == "policy_loss" else "vanilla"
    if loss_mode not in ("vanilla", wanted):
        raise RlvrConfigError(
            f"{_ACTOR}.policy_loss.loss_mode: {loss_mode!r} conflicts with "
            f"rlvr.algo={setup.algo!r} (leave it 'vanilla': rlvr sets the loss)"
        )
    if setup.path != "actor_loss":
        return
    if is_distillation_enabled(config.get("distillation")):
        raise RlvrConfigError(
            f"distillation.enabled: rlvr.algo={setup.algo!r} replaces verl's actor loss, "
            "distillation included; turn one off"
        )
    strategy = _select(config, f"{_ACTOR}.strategy", "fsdp")
    if strategy not in ("fsdp", "fsdp2"):
        raise RlvrConfigError(
            f"{_ACTOR}.strategy: rlvr's actor loss is tested on the FSDP engine, got {strategy!r}"
        )
    if not setup.needs_logits:
        return
    why = f"logit shaping (rlvr.algo={setup.algo!r}, shaping_input=logit) reads the packed logits"
    checks = [
        (f"{_MODEL}.use_remove_padding", True),
        (f"{_MODEL}.use_fused_kernels", False),
        (f"{_ACTOR}.fsdp_config.use_fused_kernels", False),
        (f"{_ACTOR}.ulysses_sequence_parallel_size", 1),
        (f"{_ACTOR}.fsdp_config.ulysses_sequence_parallel_size", 1),
        (f"{_ACTOR}.pad_to_length", False),
        (f"{_ACTOR}.fsdp_config.pad_to_length", False),
    ]
    for key, need in checks:
        value = _select(config, key, need)
        if value != need:
            raise RlvrConfigError(f"{key}: must be {need} for {why}, got {value!r}")


def read_rlvr(config: DictConfig) -> Optional[RlvrSetup]:
    """The validated ``rlvr`` section of a verl config (``None`` when there is none)."""
    section = config.get("rlvr") if isinstance(config, DictConfig) else None
    if section is None:
        return None
    known = [*RLVR_KEYS, *(s.name for s in agent_loop_envs())]
    if not isinstance(section, DictConfig):
        raise RlvrConfigError(f"rlvr: must be a mapping with keys {known}")
    raw = OmegaConf.to_container(section, resolve=True)
    for key in raw:
        if key not in known:
            raise RlvrConfigError(f"rlvr.{key}: unknown key; known: {known}")
    algo = raw.get("algo")
    if not isinstance(algo, str):
        raise RlvrConfigError(f"rlvr.algo: required, a registered algorithm name; got {algo!r}")
    try:
        algorithm = get_algorithm(algo)
    except ValueError as e:
        raise RlvrConfigError(f"rlvr.{e}") from None
    params = raw.get("params") or {}
    if not isinstance(params, Mapping):
        raise RlvrConfigError(f"rlvr.params: must be a mapping of {list(PARAM_KEYS)}")
    position = raw.get("weight_position", "surrogate")
    if position not in WEIGHT_POSITIONS:
        raise RlvrConfigError(
            f"rlvr.weight_position: {position!r} is not one of {list(WEIGHT_POSITIONS)}"
        )
    kl_weighting = raw.get("kl_weighting", "none")
    if kl_weighting not in KL_WEIGHTINGS:
        raise RlvrConfigError(
            f"rlvr.kl_weighting: {kl_weighting!r} is not one of {list(KL_WEIGHTINGS)}"
        )
    try:
        rate = check_failure_rate(
            raw.get("max_tool_failure_rate", MAX_TOOL_FAILURE_RATE), "max_tool_failure_rate"
        )
    except ConfigError as e:
        raise RlvrConfigError(f"rlvr.{e}") from None
    wc = _weight_config(params)
    try:  # every check of the method's parameters, here on the driver rather than on a worker
        resolved = algorithm.parameters(wc)
    except ValueError as e:
        raise RlvrConfigError(f"rlvr.params.{e}") from None
    setup = RlvrSetup(
        algo=algo,
        algorithm=algorithm,
        weight_config=wc,
        params=resolved,
        weight_position=position,
        path=algorithm.verl_path(resolved, kl_weighting),
        max_tool_failure_rate=rate,
        kl_weighting=kl_weighting,
    )
    _check_engine(config, setup)
    return setup


def apply_rlvr(config: DictConfig) -> Optional[RlvrSetup]:
    """Validate the ``rlvr`` section and write the policy-loss settings of the ``policy_loss``
    path into ``config`` (idempotent; before the workers are built). Returns the setup."""
    setup = read_rlvr(config)
    if setup is None or setup.path != "policy_loss":
        return setup
    keys = plugin_loss_config(setup.algo, setup.weight_config, setup.weight_position)
    policy_loss = OmegaConf.select(config, f"{_ACTOR}.policy_loss")
    with open_dict(policy_loss):
        for key, value in keys.items():
            policy_loss[key] = value
    return setup
