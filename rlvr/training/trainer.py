"""The GRPO-family trainer: setup, rollout, train step, train loop.

One step:

1. take the next ``prompts_per_step`` tasks of the train split (task ``i`` is
   ``env.reset(seed=seed + i, options={"index": i})``; the ``group_size`` env instances of a group
   reset to the same task);
2. play all episodes (``rollout.multiturn.run_episodes``), rewards from the envs;
3. ``A = group_advantages(r)`` per sequence;
4. the update of the algorithm ``cfg.algo`` (``rlvr.training.update``, ``rlvr.agents.algorithms``):
   its stages, ``ppo_epochs`` passes of mini-batch optimizer steps of the token-weighted clipped
   loss, AdamW with gradient clipping and a warm-up/schedule;
5. metrics to ``metrics.jsonl`` (``rlvr.agents.metrics``), periodic evaluation, atomic checkpoints.

Same seed, same numbers: sampling uses generators seeded from ``(seed, step)``, mini-batches go
in order, and a checkpoint holds the rest (weights, optimizer, scheduler, RNG states, data
position, calibration: ``calibration.json``), so a resumed run repeats an uninterrupted one.
"""

from __future__ import annotations

import json
import random
import sys
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from rlvr.agents.advantages import compute_advantages
from rlvr.agents.algorithms import get_algorithm
from rlvr.agents.checkpoint import check_writable, write_failure
from rlvr.agents.memory import check_fits, estimate_for_config
from rlvr.agents.metrics import (  # noqa: F401  (read_metrics, strip_time: public API here too)
    MetricsLog,
    check_tool_failures,
    is_time_key,
    read_metrics,
    rollout_metrics,
    say_no_variance,
    strip_time,
    tool_metrics,
)
from rlvr.agents.policy import Policy
from rlvr.agents.rollout import check_backend_present
from rlvr.agents.rollout.base import RolloutBatch, SamplingParams, collate
from rlvr.agents.rollout.chat import model_prompt
from rlvr.agents.rollout.multiturn import Episode, run_episodes
from rlvr.config import ConfigError, dump_yaml, to_dict
from rlvr.device import resolve_device
from rlvr.envs import env_spec, make_env
from rlvr.files import write_text_atomic
from rlvr.locks import LOCK_FILE, hold
from rlvr.models import load_model
from rlvr.prompt_format import write_format
from rlvr.repro import set_threads
from rlvr.training.live_eval import evaluate_live
from rlvr.training.optim import Precision, lr_factor, optimizer_steps_per_batch
from rlvr.training.preflight import preflight
from rlvr.training.progress import StepBar
from rlvr.training.run_state import restore_state, save_state, write_calibration
from rlvr.training.trackers import make_trackers, tracker_names
from rlvr.training.train_config import TrainConfig, periodic_eval_config
from rlvr.training.update import Updater

#: Tasks in a row whose ``env.reset`` may fail before the run stops (``Trainer._reset_group``).
MAX_RESET_SKIPS = 8

# ---------------------------------------------------------------------------------------------
# pure helpers


def episodes_to_batch(episodes: list[Episode], pad_id: int) -> RolloutBatch:
    return collate(
        [e.prompt_ids for e in episodes],
        [e.response_ids for e in episodes],
        [e.loss_mask for e in episodes],
        [e.logprobs for e in episodes],
        [e.finish_reason for e in episodes],
        pad_id,
    )


class Trainer:
    """Owns the model, envs, optimizer and run directory; ``train()`` runs ``cfg.steps`` steps.

    ``model``/``tokenizer`` may be passed in (else loaded from ``cfg.model``); ``make_env(split)``
    may replace the registered env (tests use it to inject faults).
    """

    #: Resume although the configuration differs from the checkpoint's (``--allow-config-change``).
    allow_config_change = False
    #: Told what a step is doing (``step 3: rollout``, ``update``, ``evaluation``): the bar.
    on_phase: Callable[[str], None] | None = None

    def __init__(
        self,
        cfg: TrainConfig,
        *,
        model=None,
        tokenizer=None,
        make_env: Callable[[str], Any] | None = None,
    ):
        cfg.validate()
        check_backend_present(cfg.rollout.backend)  # before the model loads
        self.cfg = cfg
        self.out = Path(cfg.out)
        self.device = resolve_device(cfg.device)
        self.algorithm = get_algorithm(cfg.algo)
        set_threads(cfg.num_threads)
        self._seed_everything(cfg.seed)
        self.make_env = make_env or self._make_registered_env
        preflight(cfg, self.make_env, loads_model=model is None)  # one line, before any load
        if model is None:
            model, tokenizer = load_model(cfg.model, seed=cfg.seed, dtype=torch.float32)
        self.with_reference = cfg.loss.kl_coef > 0 or cfg.track_kl
        if cfg.memory_check:
            self._check_memory(model)
        # Master weights and optimizer state in float32; ``dtype`` is the autocast dtype.
        model = model.to(self.device, dtype=torch.float32)
        if cfg.gradient_checkpointing:
            model.gradient_checkpointing_enable(
                gradient_checkpointing_kwargs={"use_reentrant": False}
            )
        self.tokenizer = tokenizer
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        self.precision = Precision(cfg.dtype, self.device)
        self.policy = Policy(
            model,
            tokenizer,
            with_reference=self.with_reference,
            chunk_size=cfg.logprob_chunk_size,
            temperature=cfg.rollout.temperature or 1.0,
            reference_dtype=self.precision.dtype,
        )
        self.backend = self._make_backend()
        n = cfg.prompts_per_step * cfg.group_size
        self.envs = [self.make_env("train") for _ in range(n)]
        self._eval_envs: list | None = None
        self.optimizer = torch.optim.AdamW(
            [p for p in model.parameters() if p.requires_grad],
            lr=cfg.optim.lr,
            betas=(cfg.optim.beta1, cfg.optim.beta2),
            eps=cfg.optim.eps,
            weight_decay=cfg.optim.weight_decay,
        )
        o = cfg.optim
        total = cfg.steps * optimizer_steps_per_batch(cfg, self.algorithm)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer,
            lambda s: lr_factor(
                s, warmup=o.warmup_steps, total=total, schedule=o.schedule, min_ratio=o.min_lr_ratio
            ),
        )
        self.updater = Updater(
            cfg,
            self.policy,
            self.optimizer,
            self.scheduler,
            self.algorithm,
            self.device,
            self.precision,
        )
        self.step = 0
        self.data_position = 0
        self.reset_errors = 0  # tasks skipped because env.reset raised (counted since start)
        #: What an episode whose env raised scores (default: the env's minimum reward).
        self.error_reward = (
            cfg.error_reward if cfg.error_reward is not None else env_spec(cfg.env).min_reward
        )
        self.sampling = SamplingParams(
            max_new_tokens=cfg.rollout.max_turn_tokens or cfg.rollout.max_response_tokens,
            temperature=cfg.rollout.temperature,
            top_p=cfg.rollout.top_p,
            top_k=cfg.rollout.top_k,
            stop=tuple(cfg.rollout.stop),
        )
        self.metrics_log = MetricsLog(self.metrics_path)

    # -- setup ---------------------------------------------------------------------------------
    @property
    def model(self):
        return self.policy.model

    @staticmethod
    def _seed_everything(seed: int) -> None:
        random.seed(seed)
        np.random.seed(seed % (2**32))
        torch.manual_seed(seed)

    def _make_registered_env(self, split: str):
        kwargs = dict(self.cfg.env_kwargs)
        if split != "train" or "split" in kwargs:
            if not env_spec(self.cfg.env).accepts("split"):
                raise ConfigError(
                    f"env {self.cfg.env!r} has no 'split' argument; evaluation "
                    "needs a held-out split (set eval.every=0)"
                )
            kwargs["split"] = split if split != "train" else kwargs["split"]
        try:
            return make_env(self.cfg.env, **kwargs)
        except (TypeError, ValueError, OSError) as e:  # a bad value, a missing dataset: one line
            key = "env_kwargs" if split == "train" else "env_kwargs or eval.split"
            first = (str(e).strip().splitlines() or [type(e).__name__])[0]
            raise ConfigError(f"{key}: env {self.cfg.env!r} rejected {kwargs}: {first}") from None

    def _make_backend(self):
        if self.cfg.rollout.backend == "vllm":
            from rlvr.agents.rollout.vllm import VLLMBackend

            return VLLMBackend.from_model(
                self.model,
                self.tokenizer,
                rollout=self.cfg.rollout,
                dtype=self.cfg.dtype,
                seed=self.cfg.seed,
            )
        from rlvr.agents.rollout.hf import HFBackend

        return HFBackend(self.model, self.tokenizer)

    def _check_memory(self, model) -> None:
        """Refuse settings that do not fit the device (checked before the model moves there, so
        its free memory does not already exclude the weights)."""
        check_fits(estimate_for_config(model, self.cfg, self.device))

    def optimizer_steps_per_batch(self) -> int:
        return optimizer_steps_per_batch(self.cfg, self.algorithm)

    # -- rollouts ------------------------------------------------------------------------------
    def _reset_group(self, envs: list, index: int) -> list[str]:
        """Reset a group's envs to task ``index``, modulo the env's ``num_tasks`` when it has a
        finite task list (a dataset; None or absent: an unbounded generator).

        A task whose ``reset`` raises (a malformed dataset row, a tool that cannot start) is
        skipped for the next index, with a warning and a count in ``self.reset_errors``; after
        ``MAX_RESET_SKIPS`` failing tasks in a row the error is raised, naming the task.
        """
        size = getattr(envs[0].unwrapped, "num_tasks", None)
        for skip in range(MAX_RESET_SKIPS + 1):
            task = (index + skip) % size if size else index + skip
            try:
                resets = [
                    env.reset(seed=self.cfg.seed + task, options={"index": task}) for env in envs
                ]
            except Exception as e:  # noqa: BLE001 - any env failure: skip the task, keep the run
                self.reset_errors += 1
                if skip == MAX_RESET_SKIPS:
                    raise RuntimeError(
                        f"env.reset failed on {MAX_RESET_SKIPS + 1} tasks in a row "
                        f"(last: task {task}): {type(e).__name__}: {e}"
                    ) from e
                print(
                    f"[rlvr train] env.reset failed on task {task} ({type(e).__name__}: {e}); "
                    "skipping to the next task",
                    file=sys.stderr,
                )
                continue
            return [
                model_prompt(self.tokenizer, env, prompt, info)
                for env, (prompt, info) in zip(envs, resets)
            ]
        raise AssertionError("unreachable")

    def rollout(self, step: int) -> list[Episode]:
        """Play the step's episodes: G env instances per task, all tasks at once."""
        cfg = self.cfg
        g = cfg.group_size
        prompts = []
        for k in range(cfg.prompts_per_step):
            index = self.data_position + k
            prompts += self._reset_group(self.envs[k * g : (k + 1) * g], index)
        with self.precision.autocast():
            return run_episodes(
                self.backend,
                self.tokenizer,
                self.envs,
                prompts,
                self.sampling,
                max_response_tokens=cfg.rollout.max_response_tokens,
                seed=cfg.seed * 7919 + step,
                error_reward=self.error_reward,
                max_prompt_tokens=cfg.rollout.max_prompt_tokens,
            )

    def update(self, batch: RolloutBatch, advantages: torch.Tensor, step: int) -> dict[str, float]:
        """The algorithm's optimizer steps on ``batch``, then the rollout engine's weights."""
        out = self.updater.update(batch, advantages, step)
        if any(k.startswith("calibration/") for k in out):  # this update calibrated
            write_calibration(self.out, self.cfg.algo, step, self.updater.calibration)
        self.backend.sync_weights(self.model)
        return out

    # -- evaluation ----------------------------------------------------------------------------
    def evaluate(self, step: int) -> dict[str, float]:
        """The periodic evaluation after step ``step`` (``rlvr.training.live_eval``) on the live
        policy and a reused pool of held-out envs."""
        ecfg = periodic_eval_config(self.cfg)
        n = ecfg.n_items * max(1, ecfg.k)
        if self._eval_envs is None or len(self._eval_envs) != n:
            self._eval_envs = [self.make_env(ecfg.split) for _ in range(n)]
        return evaluate_live(
            self.cfg,
            ecfg,
            step,
            backend=self.backend,
            tokenizer=self.tokenizer,
            precision=self.precision,
            sampling=self.sampling,
            envs=self._eval_envs,
            reset_group=self._reset_group,
            error_reward=self.error_reward,
        )

    # -- checkpoints ---------------------------------------------------------------------------
    @property
    def checkpoint_root(self) -> Path:
        return self.out / "checkpoints"

    def save(self) -> Path:
        """Checkpoint the run (``rlvr.training.run_state.save_state``)."""
        return save_state(self)

    def restore(self) -> bool:
        """Resume from the newest valid checkpoint (``rlvr.training.run_state.restore_state``);
        False when there is none."""
        return restore_state(self)

    @property
    def metrics_path(self) -> Path:
        return self.out / "metrics.jsonl"

    # -- the loop ------------------------------------------------------------------------------
    def train_step(self) -> dict[str, Any]:
        cfg = self.cfg
        step = self.step + 1
        t0 = time.perf_counter()
        self._phase("rollout", step)
        episodes = self.rollout(step)
        t1 = time.perf_counter()
        # before the update: a batch whose searches failed is not trained on
        check_tool_failures([e.info for e in episodes], cfg.max_tool_failure_rate, f"step {step}")
        rewards = torch.tensor([e.reward for e in episodes], dtype=torch.float32)
        adv = compute_advantages(cfg.loss.advantage, rewards, cfg.group_size, eps=cfg.loss.adv_eps)
        batch = episodes_to_batch(episodes, self.pad_id)
        t2 = time.perf_counter()
        self._phase("update", step)
        upd = self.update(batch, adv, step)
        t3 = time.perf_counter()
        self.step = step
        self.data_position += cfg.prompts_per_step
        record: dict[str, Any] = {"step": step}
        record.update(rollout_metrics(episodes, cfg.group_size))
        record.update(tool_metrics([e.info for e in episodes]))
        record.update(upd)
        record["episodes/reset_errors"] = float(self.reset_errors)
        record["advantage/mean"] = float(adv.mean())
        record["advantage/abs_mean"] = float(adv.abs().mean())
        generated = sum(e.n_generated for e in episodes)
        trained = int(batch.attention_mask.sum())
        record["tokens/update"] = float(trained)  # the work measure of equal-compute references
        record["time/rollout_s"] = t1 - t0
        record["time/update_s"] = t3 - t2
        record["tokens/s"] = generated / max(t1 - t0, 1e-9)
        record["perf/update_tokens_s"] = trained / max(t3 - t2, 1e-9)
        if cfg.eval.due(step, cfg.steps):
            self._phase("evaluation", step)
            record.update(self.evaluate(step))
        record["time/step_s"] = time.perf_counter() - t0
        errors = [e.error for e in episodes if e.error]
        if errors:
            print(
                f"[rlvr train] step {step}: {len(errors)} episode(s) raised; first: "
                f"{errors[0].splitlines()[0]}",
                file=sys.stderr,
            )
        if record["update/skipped"]:
            print(
                f"[rlvr train] step {step}: skipped {int(record['update/skipped'])} "
                "optimizer step(s) with a non-finite loss or gradient norm",
                file=sys.stderr,
            )
        return record

    def _phase(self, name: str, step: int) -> None:
        if self.on_phase is not None:
            self.on_phase(f"step {step}: {name}")

    def train(self) -> list[dict[str, Any]]:
        """Run to ``cfg.steps``, holding the run folder's lock throughout: a second trainer on
        the same ``out`` is refused (``FolderInUse``) before it writes anything."""
        check_writable(self.out, self.checkpoint_root)
        with hold(self.out / LOCK_FILE, wait=False, what=f"out={self.out}"):
            try:
                return self._train()
            finally:
                self.backend.close()  # vLLM's temporary model copies

    def _train(self) -> list[dict[str, Any]]:
        cfg = self.cfg
        resumed = False
        if cfg.resume:
            resumed = self.restore()
        elif any(self.checkpoint_root.glob("step_*")):
            raise FileExistsError(
                f"{self.out} already holds checkpoints: pass --resume "
                "(resume=true) to continue, or choose another out=DIR"
            )
        if tracker_names(cfg):
            trackers = make_trackers(tracker_names(cfg), self.out, to_dict(cfg), resume=resumed)
            self.metrics_log = MetricsLog(self.metrics_path, trackers)
        moved = self.metrics_log.prepare(self.step if resumed else None)
        if moved is not None:
            print(
                f"[rlvr train] metrics lines this run replaces were moved to {moved}",
                file=sys.stderr,
            )
        dump_yaml(cfg, self.out / "config.yaml")
        engine = getattr(self.backend, "engine_record", None)
        if engine:  # the vLLM engine's settings, hf_overrides included (rollout/vllm.py)
            write_text_atomic(self.out / "vllm_engine.json", json.dumps(engine, indent=2) + "\n")
        records = []
        bar = StepBar(cfg, initial=self.step)
        self.on_phase, self.backend.on_step = bar.enter, bar.generating
        try:
            while self.step < cfg.steps:
                record = self.train_step()
                self.metrics_log.append(record)
                records.append(record)
                bar.done(record)
                if cfg.save_every and self.step % cfg.save_every == 0:
                    self.save()
        finally:
            self.on_phase = self.backend.on_step = None
            bar.close()
            self.metrics_log.close()
        say_no_variance(records)
        if self.step == cfg.steps and (not cfg.save_every or self.step % cfg.save_every):
            self.save()
        final = self.out / "final"
        try:
            self.model.save_pretrained(final)
            self.tokenizer.save_pretrained(final)
            write_format(final, cfg.env, cfg.env_kwargs, base=cfg.model)
        except Exception as e:  # noqa: BLE001 - safetensors' errors are not OSErrors
            raise write_failure(final, e) from None
        return records
