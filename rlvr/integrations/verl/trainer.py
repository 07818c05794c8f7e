"""verl 0.9.1 trainer running every rlvr algorithm: ``RlvrPPOTrainer(RayPPOTrainer)``.

A verl run selects the method with one top-level config section (read by ``read_rlvr``)::

    rlvr:
      algo: grpo_sg                 # a name of rlvr.agents.algorithms
      params: {shaping_input: logit, alpha: 2.75}   # rlvr.agents.algorithms.WeightConfig fields
      weight_position: surrogate    # or ratio
      kl_weighting: none            # or term, ratio (rlvr.agents.method_loss.KL_WEIGHTINGS)
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

A method with calibrated parameters (``"calibrated"`` in ``rlvr.params``: GRPO-SG, TR-GRPO,
Reverse by default) runs on the actor-loss path: ``RlvrActorLoss`` calibrates at its first call
and reports the values, which ``_update_actor`` writes to ``<trainer.default_local_dir>/
rlvr_calibration.json`` (``CALIBRATION_FILE``); a resumed run reads them back and the loss gets
them as numbers, never calibrating again. A weighted KL term (``kl_weighting``) also needs the
actor loss: verl adds its own KL outside a registered policy loss.

A run whose steps had no reward variance in any group (every advantage 0, so no
policy-gradient update) says how many after ``fit``, in one line (``no_variance_line``, as the
native trainer).

Logit shaping needs verl's remove-padding FSDP path without sequence parallelism, fused kernels
or static padding (the logits hook sees the packed ``(1, total_nnz, vocab)`` logits only there);
``read_rlvr`` rejects other settings with a one-line error naming the key.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import ray
from omegaconf import DictConfig, OmegaConf
from verl import DataProto
from verl.trainer.ppo.ray_trainer import RayPPOTrainer
from verl.utils import tensordict_utils as tu

from rlvr.agents.metrics import (
    MAX_TOOL_FAILURE_RATE,
    check_tool_failures,
    no_variance_line,
    tool_metrics,
)
from rlvr.envs.base import TOOL_CALLS, TOOL_FAILURES
from rlvr.files import write_json_atomic
from rlvr.integrations.verl.actor import CALIBRATION_METRIC, LOPTI_STAGE_KEY
from rlvr.integrations.verl.data import agent_loop_envs, check_service_reachable, service_key
from rlvr.integrations.verl.section import RlvrConfigError, apply_rlvr, is_number

#: The run folder's record of the calibrated values (under ``trainer.default_local_dir``).
CALIBRATION_FILE = "rlvr_calibration.json"


def merge_update_metrics(outputs: list[DataProto]) -> DataProto:
    """One actor output from several ``_update_actor`` outputs, as AR-Lopti merges its two
    updates: list values concatenated, numbers averaged."""
    merged: dict[str, Any] = {}
    for key in outputs[0].meta_info["metrics"]:
        values = [out.meta_info["metrics"][key] for out in outputs]
        if all(isinstance(v, list) for v in values):
            merged[key] = [x for v in values for x in v]
        elif all(is_number(v) for v in values):
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
            saved = self._calibration_file()
            values = json.loads(saved.read_text())["values"] if saved.exists() else None
            self.actor_rollout_wg.set_loss_fn(self.rlvr.actor_loss(self.config, values))
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

    def _calibration_file(self) -> Path:
        return Path(OmegaConf.select(self.config, "trainer.default_local_dir")) / CALIBRATION_FILE

    def _update_actor(self, batch: DataProto) -> DataProto:
        self.updates += 1
        self.flat_updates += not has_advantage(batch)
        output = self._update_stages(batch)
        metrics = tool_metrics(tool_infos(batch))
        if metrics:
            output.meta_info.setdefault("metrics", {}).update(metrics)
        self._keep_calibration(output.meta_info.get("metrics", {}))
        return output

    def _keep_calibration(self, metrics: Mapping) -> None:
        """Write the values the actor loss calibrated (its first call reports them) to the run
        folder, once: a resumed run reads them back (``init_workers``)."""
        values = {
            k[len(CALIBRATION_METRIC) :]: v[0] if isinstance(v, (list, tuple)) else v
            for k, v in metrics.items()
            if k.startswith(CALIBRATION_METRIC)
        }
        path = self._calibration_file()
        if values and not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            record = {"algo": self.rlvr.algo, "values": {k: float(v) for k, v in values.items()}}
            write_json_atomic(path, record, indent=2)

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
