"""verl 0.9.1 trainer running every rlvr algorithm: ``RlvrPPOTrainer(RayPPOTrainer)``.

A verl run selects the method with one top-level config section (read by ``read_rlvr``)::

    rlvr:
      algo: grpo_sg                 # a name of rlvr.agents.algorithms
      params: {shaping_input: logit, alpha: 2.75}   # rlvr.agents.algorithms.WeightConfig fields
      weight_position: surrogate    # or ratio
      searchqa: {...}               # read by rlvr.integrations.verl.agent_loop
      max_tool_failure_rate: 0.05   # stop past this share of failed searches (default 0.05)

What each algorithm needs is read from its registry entry (``rlvr.agents.algorithms``,
``Algorithm.verl_path``), not from its name:

- no weight, no selection, no stages (GRPO): verl's own ``vanilla`` policy loss;
- a weight of log-probs only (``Algorithm.policy_loss``: ``grpo_sg`` and ``reverse`` on the
  probability, ``ar``): ``actor.policy_loss.loss_mode=<algo>`` with ``RlvrPolicyLossConfig``
  (written into the config before the workers exist, so verl's own ``ppo_loss`` runs it);
- everything else (logit shaping, a token selection, stages): the whole actor loss
  ``RlvrActorLoss`` installed with ``actor_rollout_wg.set_loss_fn`` after the workers start;
  then on every actor-update batch the non-tensor flags the loss needs:
  ``distillation_use_topk=True`` when the weight reads the sampled token's logit (verl then calls
  the loss's logits hook inside the forward, ``verl.actor``), ``calculate_entropy=True`` when
  tokens are selected by entropy (80/20), and, for staged algorithms (Lopti), one
  ``update_actor`` call per stage in the registry's order with the stage's name in
  ``rlvr_lopti_stage``.

``needs_old_logprobs`` is always met: verl's ``fit`` computes old log-probs (or, in its rollout
correction's bypass mode, takes the rollout's) before every actor update.

verl 0.9.1 builds the actor-update batch and its flags inside ``RayPPOTrainer._update_actor``
(``verl/trainer/ppo/ray_trainer.py``), recomputing ``distillation_use_topk`` from the
distillation config just before ``self.actor_rollout_wg.update_actor(batch_td)``. The override
below runs verl's ``_update_actor`` unchanged, once per stage, with the worker group wrapped so
that ``update_actor`` receives the batch with our flags added (``_FlaggedUpdates``).

Lopti, as AR-Lopti's trainer (zhyang2226/AR-Lopti@b92ba16, ``verl/trainer/ppo/ray_trainer.py``
``fit``, ``seperate_updating``): the old log-probs are computed once, then ``update_actor`` runs
on the low stage (``pi_old < eta``) and then on the high stage; the two outputs' metrics are merged
as there (lists concatenated, numbers averaged). As there, each ``update_actor`` call steps verl's
learning-rate scheduler once, so the schedule advances two steps per batch.

Tool calls (search QA): each trajectory carries the env's count of searches and failed ones
(``rlvr.integrations.verl.agent_loop``); every generated batch, training or validation, is
checked against ``max_tool_failure_rate`` as soon as it comes back (``_CheckedRollouts``:
``ToolFailureError``, one line, before the batch is trained on), and each step's actor-update
metrics gain ``search/calls`` and ``search/failed`` (``rlvr.agents.metrics.tool_metrics``, as the
native trainer logs them). Before the workers start, a loopback ``rlvr.searchqa.retrieval_url``
on a Ray cluster of several CPU nodes is refused (``data.check_service_reachable``): verl
places agent-loop workers on every such node.

A run whose steps had no reward variance in any group (every advantage 0, so no
policy-gradient update) says how many after ``fit``, in one line (``no_variance_line``, as the
native trainer).

Logit shaping needs verl's remove-padding FSDP path without sequence parallelism, fused kernels
or static padding (the logits hook sees the packed ``(1, total_nnz, vocab)`` logits only there);
``read_rlvr`` rejects other settings with a one-line error naming the key.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from contextlib import contextmanager
from typing import Any, Optional

import ray
from omegaconf import DictConfig, OmegaConf, open_dict
from verl import DataProto
from verl.trainer.distillation.losses import is_distillation_enabled
from verl.trainer.ppo.ray_trainer import RayPPOTrainer
from verl.utils import tensordict_utils as tu
from verl.utils.config import omega_conf_to_dataclass

from rlvr.agents.algorithms import Algorithm, WeightConfig, get_algorithm
from rlvr.agents.metrics import (
    MAX_TOOL_FAILURE_RATE,
    check_failure_rate,
    check_tool_failures,
    no_variance_line,
    tool_metrics,
)
from rlvr.config import ConfigError
from rlvr.envs.base import TOOL_CALLS, TOOL_FAILURES
from rlvr.integrations.verl.actor import LOPTI_STAGE_KEY, RlvrActorLoss
from rlvr.integrations.verl.config import plugin_loss_config
from rlvr.integrations.verl.data import agent_loop_envs, check_service_reachable, service_key

#: Keys of the ``rlvr`` section, besides one section per environment whose agent loop reads one
#: (``EnvSpec.verl.section``: search QA's ``searchqa``).
RLVR_KEYS = ("algo", "params", "weight_position", "max_tool_failure_rate")
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

    def actor_loss(self, config: DictConfig) -> RlvrActorLoss:
        """``RlvrActorLoss`` for verl's actor config ``config.actor_rollout_ref.actor``."""
        actor_config = omega_conf_to_dataclass(OmegaConf.select(config, _ACTOR))
        fields = dataclasses.asdict(self.weight_config)
        return RlvrActorLoss(
            actor_config, self.algo, weight_position=self.weight_position, **fields
        )


def _is_number(x: Any) -> bool:
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
            if not isinstance(value, Mapping) or not all(_is_number(v) for v in value.values()):
                raise RlvrConfigError("rlvr.params.extra: must map names to finite numbers")
        elif not (value is None or _is_number(value)):
            raise RlvrConfigError(f"rlvr.params.{key}: must be a finite number, got {value!r}")
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
        path=algorithm.verl_path(resolved),
        max_tool_failure_rate=rate,
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


def merge_update_metrics(outputs: list[DataProto]) -> DataProto:
    """One actor output from several ``_update_actor`` outputs, as AR-Lopti merges its two
    updates: list values concatenated, numbers averaged."""
    merged: dict[str, Any] = {}
    for key in outputs[0].meta_info["metrics"]:
        values = [out.meta_info["metrics"][key] for out in outputs]
        if all(isinstance(v, list) for v in values):
            merged[key] = [x for v in values for x in v]
        elif all(_is_number(v) for v in values):
            merged[key] = sum(values) / len(values)
        else:
            merged[key] = values[-1]
    return DataProto.from_single_dict(data={}, meta_info={"metrics": merged})


class _FlaggedUpdates:
    """The actor worker group, with ``flags`` added to the batch of every ``update_actor``."""

    def __init__(self, worker_group, flags: dict[str, Any]):
        self._worker_group = worker_group
        self._flags = flags

    def update_actor(self, data):
        tu.assign_non_tensor(data, **self._flags)
        return self._worker_group.update_actor(data)

    def __getattr__(self, name):
        return getattr(self._worker_group, name)


def tool_infos(batch: DataProto) -> list[dict]:
    """Each trajectory's tool calls and failures (the agent loop's extra fields) as env infos."""
    nt = batch.non_tensor_batch
    if TOOL_CALLS not in nt:
        return []
    failures = nt.get(TOOL_FAILURES, [None] * len(nt[TOOL_CALLS]))
    return [{TOOL_CALLS: c or {}, TOOL_FAILURES: f or {}} for c, f in zip(nt[TOOL_CALLS], failures)]


def has_advantage(batch: DataProto) -> bool:
    """Whether any response token of the actor-update batch has a non-zero advantage."""
    adv = batch.batch["advantages"]
    keys = batch.batch.keys()
    mask = batch.batch["response_mask"].bool() if "response_mask" in keys else adv != 0
    return bool((adv[mask] != 0).any())


class _CheckedRollouts:
    """verl's agent-loop manager, with every generated batch checked for failed tool calls."""

    def __init__(self, manager, max_rate: float, trainer):
        self._manager, self._max_rate, self._trainer = manager, max_rate, trainer

    def generate_sequences(self, prompts):
        output = self._manager.generate_sequences(prompts)
        meta = getattr(prompts, "meta_info", None) or {}
        kind = "validation" if meta.get("validate") else "rollout"
        where = f"{kind} at step {getattr(self._trainer, 'global_steps', 0)}"
        check_tool_failures(tool_infos(output), self._max_rate, where)
        return output

    def __getattr__(self, name):
        return getattr(self._manager, name)


def check_cluster(config: DictConfig, nodes: list[dict]) -> None:
    """``RlvrConfigError`` for a loopback URL of a service an agent loop calls (search QA's
    retrieval service) when ``nodes`` (``ray.nodes()``) give verl several nodes to place
    agent-loop workers on (``data.check_service_reachable``)."""
    for spec in agent_loop_envs():
        if spec.verl.service is None:
            continue
        url = OmegaConf.select(config, service_key(spec), default=None)
        if url:
            try:
                check_service_reachable(spec.name, str(url), nodes)
            except ValueError as e:
                raise RlvrConfigError(str(e)) from None


class RlvrPPOTrainer(RayPPOTrainer):
    """verl's ``RayPPOTrainer`` running the algorithm of ``config.rlvr`` (module docstring).

    Without an ``rlvr`` section it is verl's trainer unchanged.
    """

    def __init__(self, config, *args, **kwargs):
        self.rlvr = apply_rlvr(config)
        super().__init__(config, *args, **kwargs)

    def init_workers(self):
        check_cluster(self.config, ray.nodes() if ray.is_initialized() else [])
        super().init_workers()
        if self.rlvr is not None and self.rlvr.path == "actor_loss":
            self.actor_rollout_wg.set_loss_fn(self.rlvr.actor_loss(self.config))
        rate = MAX_TOOL_FAILURE_RATE if self.rlvr is None else self.rlvr.max_tool_failure_rate
        manager = getattr(self, "async_rollout_manager", None)
        if manager is not None:
            self.async_rollout_manager = _CheckedRollouts(manager, rate, self)

    @contextmanager
    def _flagged_updates(self, flags: dict[str, Any]):
        worker_group = self.actor_rollout_wg
        self.actor_rollout_wg = _FlaggedUpdates(worker_group, flags)
        try:
            yield
        finally:
            self.actor_rollout_wg = worker_group

    #: Actor updates of this trainer, and those whose advantages were all 0 (no group had
    #: reward variance: no policy-gradient update), for ``no_variance_line``.
    updates = flat_updates = 0

    def fit(self):
        super().fit()
        line = no_variance_line(self.flat_updates, self.updates, engine="rlvr verl")
        if line:
            print(line, flush=True)

    def _update_actor(self, batch: DataProto) -> DataProto:
        self.updates += 1
        self.flat_updates += not has_advantage(batch)
        output = self._update_stages(batch)
        metrics = tool_metrics(tool_infos(batch))
        if metrics:
            output.meta_info.setdefault("metrics", {}).update(metrics)
        return output

    def _update_stages(self, batch: DataProto) -> DataProto:
        if self.rlvr is None or self.rlvr.path != "actor_loss":
            return super()._update_actor(batch)
        outputs = []
        for stage in self.rlvr.stage_names(batch):
            flags = self.rlvr.update_flags()
            if stage is not None:
                flags[LOPTI_STAGE_KEY] = stage
            with self._flagged_updates(flags):
                outputs.append(super()._update_actor(batch))
        return outputs[0] if len(outputs) == 1 else merge_update_metrics(outputs)
