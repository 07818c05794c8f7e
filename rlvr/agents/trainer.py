"""The GRPO-family trainer: rollouts -> group advantages -> clipped token-weighted updates.

One step (DESIGN sections 5-6):

1. take the next ``prompts_per_step`` tasks of the train split (task ``i`` is
   ``env.reset(seed=seed + i, options={"index": i})``; the ``group_size`` env instances of a group
   reset to the same task);
2. play all episodes (``rollout.multiturn.run_episodes``), rewards from the envs;
3. ``A = group_advantages(r)`` per sequence;
4. ``ppo_epochs`` passes of mini-batch updates of ``policy_loss`` with the algorithm's token
   weights: ``grpo`` (none), ``grpo_sg``/``reverse`` (shaped on the sampled token's logit or
   probability), ``ar`` (old probabilities), ``entropy_top`` (policy loss on the top-entropy
   tokens only, KL on all), ``lopti`` (two optimizer steps per mini-batch, low-probability tokens
   first); AdamW, gradient clipping (the logged norm is the one before clipping), warm-up and
   schedule; a non-finite loss or gradient norm skips that optimizer step;
5. metrics to ``metrics.jsonl`` (+ TensorBoard), periodic evaluation, atomic checkpoints.

Same seed, same numbers: sampling uses seeded generators derived from ``(seed, step)``, mini-batch
order from ``(seed, step, epoch)``, and a checkpoint holds everything else (weights, optimizer,
scheduler, RNG states, data position), so a resumed run repeats an uninterrupted one exactly.
"""
from __future__ import annotations

import dataclasses
import importlib
import inspect
import json
import math
import random
import sys
import time
import warnings
from pathlib import Path
from typing import Any, Callable

import gymnasium as gym
import numpy as np
import torch

from rlvr.agents.advantages import group_advantages
from rlvr.agents.checkpoint import (check_resume_config, check_writable, find_resume_checkpoint,
                                    load_payload, preserve_metrics, rng_state, save_checkpoint,
                                    set_rng_state)
from rlvr.agents.losses import agg_loss, k3_kl, masked_mean, policy_loss
from rlvr.agents.memory import check_fits, estimate_training_memory
from rlvr.agents.policy import Policy, TokenStats
from rlvr.agents.rollout.base import RolloutBatch, SamplingParams, collate
from rlvr.agents.rollout.multiturn import Episode, run_episodes
from rlvr.agents.train_config import ENV_IDS, TrainConfig
from rlvr.agents.weights import lopti_stages, token_weights
from rlvr.config import ConfigError, dump_yaml

#: Minimum reward per env (DESIGN section 4): K&K totals lie in [-3, 3]; math and search QA
#: score 0/1. An episode whose env raised scores this.
ENV_MIN_REWARD = {"kk": -3.0, "math": 0.0, "searchqa": 0.0}
#: Tasks in a row whose ``env.reset`` may fail before the run stops (``Trainer._reset_group``).
MAX_RESET_SKIPS = 8

#: Metric keys that measure wall time; they differ between otherwise identical runs.
TIME_KEYS_PREFIXES = ("time/", "tokens/s", "perf/")


# ---------------------------------------------------------------------------------------------
# pure helpers


def lr_factor(step: int, *, warmup: int, total: int, schedule: str, min_ratio: float) -> float:
    """Multiplier of the base learning rate at optimizer-schedule step ``step`` (0-based).

    Linear warm-up over ``warmup`` steps, then ``constant``, ``linear`` decay or ``cosine``
    (Loshchilov & Hutter 2017) down to ``min_ratio`` at ``total``.
    """
    if warmup > 0 and step < warmup:
        return (step + 1) / warmup
    if schedule == "constant":
        return 1.0
    span = max(1, total - warmup)
    progress = min(1.0, max(0.0, (step - warmup) / span))
    if schedule == "linear":
        return min_ratio + (1.0 - min_ratio) * (1.0 - progress)
    if schedule == "cosine":
        return min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))
    raise ValueError(f"optim.schedule: unknown schedule {schedule!r}")


def is_time_key(key: str) -> bool:
    return key.startswith(TIME_KEYS_PREFIXES)


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def env_accepts(env_id: str, kwarg: str) -> bool:
    """Whether the env registered as ``env_id`` takes keyword ``kwarg`` (e.g. ``split``)."""
    entry = gym.spec(env_id).entry_point
    if isinstance(entry, str):
        module, name = entry.split(":")
        entry = getattr(importlib.import_module(module), name)
    params = inspect.signature(entry).parameters
    return kwarg in params or any(p.kind is p.VAR_KEYWORD for p in params.values())


def episodes_to_batch(episodes: list[Episode], pad_id: int) -> RolloutBatch:
    return collate([e.prompt_ids for e in episodes], [e.response_ids for e in episodes],
                   [e.loss_mask for e in episodes], [e.logprobs for e in episodes],
                   [e.finish_reason for e in episodes], pad_id)


def combine_metrics(parts: list[dict[str, float]]) -> dict[str, float]:
    """Merge per-micro-batch loss metrics: ``/min`` by min, ``/max`` by max, the rest averaged
    with each part weighted by its token count."""
    if not parts:
        return {}
    weights = [max(p.get("n_tokens", 1.0), 0.0) for p in parts]
    total = sum(weights) or float(len(parts))
    weights = weights if sum(weights) else [1.0] * len(parts)
    out = {}
    for key in parts[0]:
        vals = [p[key] for p in parts if key in p]
        if key.endswith("/min"):
            out[key] = min(vals)
        elif key.endswith("/max"):
            out[key] = max(vals)
        elif key == "n_tokens":
            out[key] = sum(vals)
        else:
            out[key] = sum(w * p[key] for w, p in zip(weights, parts) if key in p) / total
    return out


def rollout_metrics(episodes: list[Episode], group_size: int) -> dict[str, float]:
    """Reward, accuracy, length and finish statistics of a batch of episodes (DESIGN section 5)."""
    n = len(episodes)
    rewards = np.array([e.reward for e in episodes], dtype=np.float64)
    out: dict[str, float] = {
        "reward/mean": float(rewards.mean()),
        "reward/std": float(rewards.std()),
        "reward/min": float(rewards.min()),
        "reward/max": float(rewards.max()),
        "accuracy": float(np.mean([bool(e.info.get("correct", False)) and e.error is None
                                   for e in episodes])),
        "response_length": float(np.mean([len(e.response_ids) for e in episodes])),
        "response_length/max": float(max(len(e.response_ids) for e in episodes)),
        "response_length/generated": float(np.mean([e.n_generated for e in episodes])),
        "turns/mean": float(np.mean([e.turns for e in episodes])),
        "episodes/errors": float(sum(e.error is not None for e in episodes)),
        "prompt/truncated": float(sum(bool(e.info.get("prompt_truncated")) for e in episodes)),
        "prompt_length": float(np.mean([len(e.prompt_ids) for e in episodes])),
    }
    for reason in ("eos", "stop", "length"):
        out[f"finish/{reason}"] = sum(e.finish_reason == reason for e in episodes) / n
    components: dict[str, list[float]] = {}
    for e in episodes:
        for k, v in (e.info.get("reward_components") or {}).items():
            if isinstance(v, (int, float)):
                components.setdefault(k, []).append(float(v))
    for k, vals in sorted(components.items()):
        out[f"reward/{k}"] = float(np.mean(vals))
    groups = rewards.reshape(-1, group_size)
    out["groups/zero_std"] = float(np.mean(groups.std(axis=1) == 0))
    return out


def token_prob_metrics(logprobs: torch.Tensor, entropy: torch.Tensor,
                       mask: torch.Tensor) -> dict[str, float]:
    """Summaries of the sampled tokens' probabilities and the policy entropy on the loss mask."""
    valid = mask.bool()
    if not bool(valid.any()):
        return {"entropy": 0.0, "prob/mean": 0.0, "prob/low_frac": 0.0, "prob/p10": 0.0,
                "prob/median": 0.0, "logprob/mean": 0.0}
    p = logprobs[valid].exp().double()
    q = torch.quantile(p, torch.tensor([0.1, 0.5], dtype=torch.float64))
    return {
        "entropy": float(masked_mean(entropy, valid)),
        "prob/mean": float(p.mean()),
        "prob/low_frac": float((p < 0.5).double().mean()),
        "prob/p10": float(q[0]),
        "prob/median": float(q[1]),
        "logprob/mean": float(masked_mean(logprobs, valid)),
    }


# ---------------------------------------------------------------------------------------------
# the trainer


class Trainer:
    """Owns the model, envs, optimizer and run directory; ``train()`` runs ``cfg.steps`` steps.

    ``model``/``tokenizer`` may be passed in (else loaded from ``cfg.model``); ``make_env(split)``
    may replace the registered env (tests use it to inject faults).
    """

    #: Resume although the configuration differs from the checkpoint's (``--allow-config-change``).
    allow_config_change = False

    def __init__(self, cfg: TrainConfig, *, model=None, tokenizer=None,
                 make_env: Callable[[str], Any] | None = None):
        cfg.validate()
        self.cfg = cfg
        self.out = Path(cfg.out)
        self.device = resolve_device(cfg.device)
        if cfg.num_threads:
            torch.set_num_threads(cfg.num_threads)
        self._seed_everything(cfg.seed)
        if model is None:
            from rlvr.models import load_model

            dtype = getattr(torch, cfg.dtype)
            model, tokenizer = load_model(cfg.model, seed=cfg.seed, dtype=dtype)
        model = model.to(self.device, dtype=getattr(torch, cfg.dtype))
        if cfg.gradient_checkpointing:
            model.gradient_checkpointing_enable()
        self.tokenizer = tokenizer
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        self.with_reference = cfg.loss.kl_coef > 0 or cfg.track_kl
        if cfg.memory_check:
            self._check_memory(model)
        self.policy = Policy(model, tokenizer, with_reference=self.with_reference,
                             chunk_size=cfg.logprob_chunk_size,
                             temperature=cfg.rollout.temperature or 1.0)
        self.backend = self._make_backend()
        self.make_env = make_env or self._make_registered_env
        n = cfg.prompts_per_step * cfg.group_size
        self.envs = [self.make_env("train") for _ in range(n)]
        self._eval_envs: list | None = None
        self.optimizer = torch.optim.AdamW(
            [p for p in model.parameters() if p.requires_grad], lr=cfg.optim.lr,
            betas=(cfg.optim.beta1, cfg.optim.beta2), eps=cfg.optim.eps,
            weight_decay=cfg.optim.weight_decay)
        o = cfg.optim
        total = cfg.steps * self.optimizer_steps_per_batch()
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda s: lr_factor(s, warmup=o.warmup_steps, total=total,
                                                schedule=o.schedule, min_ratio=o.min_lr_ratio))
        self.step = 0
        self.data_position = 0
        self.reset_errors = 0  # tasks skipped because env.reset raised (counted since start)
        self.error_reward = (cfg.error_reward if cfg.error_reward is not None
                             else ENV_MIN_REWARD[cfg.env])
        self.sampling = SamplingParams(
            max_new_tokens=cfg.rollout.max_turn_tokens or cfg.rollout.max_response_tokens,
            temperature=cfg.rollout.temperature,
            top_p=cfg.rollout.top_p, top_k=cfg.rollout.top_k, stop=tuple(cfg.rollout.stop))
        self._tb = None

    # -- setup ---------------------------------------------------------------------------------
    @property
    def model(self):
        return self.policy.model

    @staticmethod
    def _seed_everything(seed: int) -> None:
        random.seed(seed)
        np.random.seed(seed % (2 ** 32))
        torch.manual_seed(seed)

    def _make_registered_env(self, split: str):
        env_id = ENV_IDS[self.cfg.env]
        kwargs = dict(self.cfg.env_kwargs)
        if split != "train" or "split" in kwargs:
            if not env_accepts(env_id, "split"):
                raise ValueError(f"env {self.cfg.env!r} has no 'split' argument; evaluation "
                                 "needs a held-out split (set eval.every=0)")
            kwargs["split"] = split if split != "train" else kwargs["split"]
        try:
            return gym.make(env_id, **kwargs)
        except (TypeError, ValueError) as e:  # a bad env_kwargs value: one line naming it
            key = "env_kwargs" if split == "train" else "env_kwargs or eval.split"
            raise ConfigError(f"{key}: {env_id} rejected {kwargs}: {e}") from None

    def _make_backend(self):
        if self.cfg.rollout.backend == "vllm":
            from rlvr.agents.rollout.vllm import VLLMBackend

            return VLLMBackend.from_model(
                self.model, self.tokenizer,
                gpu_memory_utilization=self.cfg.rollout.vllm_gpu_memory_utilization,
                enforce_eager=self.cfg.rollout.vllm_enforce_eager, seed=self.cfg.seed)
        from rlvr.agents.rollout.hf import HFBackend

        return HFBackend(self.model, self.tokenizer)

    def _check_memory(self, model) -> None:
        cfg = self.cfg
        batch = cfg.prompts_per_step * cfg.group_size
        rows = cfg.micro_batch_size or cfg.mini_batch_size or batch
        est = estimate_training_memory(
            model, rollout_rows=batch, train_rows=rows,
            prompt_tokens=cfg.rollout.max_prompt_tokens,
            response_tokens=cfg.rollout.max_response_tokens, chunk_size=cfg.logprob_chunk_size,
            with_reference=self.with_reference,
            gradient_checkpointing=cfg.gradient_checkpointing, device=self.device)
        check_fits(est)

    def optimizer_steps_per_batch(self) -> int:
        cfg = self.cfg
        batch = cfg.prompts_per_step * cfg.group_size
        per_epoch = batch // (cfg.mini_batch_size or batch)
        return cfg.ppo_epochs * per_epoch * (2 if cfg.algo == "lopti" else 1)

    # -- rollouts ------------------------------------------------------------------------------
    def _reset_group(self, envs: list, index: int) -> list[str]:
        """Reset a group's envs to task ``index`` (modulo the size of a finite dataset).

        A task whose ``reset`` raises (a malformed dataset row, a tool that cannot start) is
        skipped for the next index, with a warning and a count in ``self.reset_errors``; after
        ``MAX_RESET_SKIPS`` failing tasks in a row the error is raised, naming the task.
        """
        size = len(envs[0].unwrapped) if hasattr(type(envs[0].unwrapped), "__len__") else None
        for skip in range(MAX_RESET_SKIPS + 1):
            task = (index + skip) % size if size else index + skip
            try:
                return [env.reset(seed=self.cfg.seed + task, options={"index": task})[0] for env in envs]
            except Exception as e:  # noqa: BLE001 - any env failure: skip the task, keep the run
                self.reset_errors += 1
                if skip == MAX_RESET_SKIPS:
                    raise RuntimeError(f"env.reset failed on {MAX_RESET_SKIPS + 1} tasks in a row "
                                       f"(last: task {task}): {type(e).__name__}: {e}") from e
                print(f"[rlvr train] env.reset failed on task {task} ({type(e).__name__}: {e}); "
                      "skipping to the next task", file=sys.stderr)
        raise AssertionError("unreachable")

    def rollout(self, step: int) -> list[Episode]:
        """Play the step's episodes: G env instances per task, all tasks at once."""
        cfg = self.cfg
        g = cfg.group_size
        prompts = []
        for k in range(cfg.prompts_per_step):
            index = self.data_position + k
            prompts += self._reset_group(self.envs[k * g:(k + 1) * g], index)
        return run_episodes(self.backend, self.tokenizer, self.envs, prompts, self.sampling,
                            max_response_tokens=cfg.rollout.max_response_tokens,
                            seed=cfg.seed * 7919 + step, error_reward=self.error_reward,
                            max_prompt_tokens=cfg.rollout.max_prompt_tokens)

    # -- update --------------------------------------------------------------------------------
    def _stats(self, batch: RolloutBatch) -> TokenStats:
        b = batch.to(self.device)
        return self.policy.token_stats(b.input_ids, b.attention_mask, b.n_response)

    @torch.no_grad()
    def _no_grad_stats(self, batch: RolloutBatch, rows: int, reference: bool = False):
        """Old-policy (or reference) statistics over the whole batch, ``rows`` at a time."""
        parts = []
        for start in range(0, len(batch), rows):
            mb = batch.select(list(range(start, min(start + rows, len(batch)))))
            b = mb.to(self.device)
            if reference:
                lp = self.policy.reference_logprobs(b.input_ids, b.attention_mask, b.n_response)
                parts.append(TokenStats(lp, torch.zeros_like(lp), torch.zeros_like(lp)))
            else:
                parts.append(self.policy.token_stats(b.input_ids, b.attention_mask, b.n_response))
        width = batch.n_response

        def pad(x):
            return torch.nn.functional.pad(x, (0, width - x.shape[1]))

        return TokenStats(*(torch.cat([pad(getattr(s, f)) for s in parts])
                            for f in ("logprobs", "logits", "entropy")))

    def _weights(self, stats: TokenStats, old_lp: torch.Tensor, mask: torch.Tensor):
        scheme = self.cfg.algo
        if scheme in ("grpo", "lopti", "entropy_top"):
            return None
        return token_weights(scheme, logprobs=stats.logprobs, mask=mask, logits=stats.logits,
                             old_logprobs=old_lp, entropy=stats.entropy,
                             **self.cfg.weights.params(scheme))

    def _micro_loss(self, stats: TokenStats, old_lp, ref_lp, adv, loss_mask, pg_mask,
                    n_tokens_pg: float, n_tokens_all: float, n_seqs: float):
        """Loss of one micro-batch, normalised by the mini-batch's token/sequence counts."""
        lc = self.cfg.loss
        kw = dict(clip_low=lc.clip_low, clip_high=lc.clip_high, dual_clip=lc.dual_clip,
                  agg=lc.agg, weight_position=lc.weight_position,
                  loss_scale_factor=lc.loss_scale_factor, global_batch_size=n_seqs)
        weights = self._weights(stats, old_lp, pg_mask)
        if pg_mask is loss_mask:  # KL and surrogate share the mask
            return policy_loss(stats.logprobs, old_lp, adv, loss_mask, weights=weights,
                               ref_logprobs=ref_lp, kl_coef=lc.kl_coef,
                               batch_num_tokens=n_tokens_all, **kw)
        # 80/20 and Lopti stages: surrogate on a subset, KL (if any) on all response tokens.
        loss, metrics = policy_loss(stats.logprobs, old_lp, adv, pg_mask, weights=weights,
                                    batch_num_tokens=n_tokens_pg, **kw)
        if ref_lp is not None:
            kl_tok = k3_kl(stats.logprobs, ref_lp)
            kl_loss = agg_loss(kl_tok, loss_mask.bool(), lc.agg,
                               loss_scale_factor=lc.loss_scale_factor,
                               batch_num_tokens=n_tokens_all, global_batch_size=n_seqs)
            if lc.kl_coef > 0:
                loss = loss + lc.kl_coef * kl_loss
            metrics["kl"] = float(masked_mean(kl_tok.detach(), loss_mask.bool()))
            metrics["kl_loss"] = float(kl_loss.detach())
            metrics["loss"] = float(loss.detach())
        return loss, metrics

    def _optimizer_step(self, losses_finite: bool) -> tuple[float, bool]:
        clip = self.cfg.optim.grad_clip
        params = [p for p in self.model.parameters() if p.requires_grad]
        norm = torch.nn.utils.clip_grad_norm_(params, clip if clip > 0 else float("inf"))
        norm = float(norm)
        if losses_finite and math.isfinite(norm):
            self.optimizer.step()
            skipped = False
        else:
            skipped = True
        self.optimizer.zero_grad(set_to_none=True)
        with warnings.catch_warnings():  # a skipped step still advances the schedule
            warnings.simplefilter("ignore", UserWarning)
            self.scheduler.step()
        return norm, skipped

    def update(self, batch: RolloutBatch, advantages: torch.Tensor, step: int) -> dict[str, float]:
        """All optimizer steps of one batch; returns the update metrics."""
        cfg = self.cfg
        n = len(batch)
        mini = cfg.mini_batch_size or n
        micro = cfg.micro_batch_size or mini
        loss_mask_all = batch.response_mask.to(self.device)
        adv_all = advantages.to(self.device, torch.float32)
        on_policy_shortcut = (cfg.ppo_epochs == 1 and mini == n and micro == n
                              and cfg.algo != "lopti" and cfg.old_logprobs == "recompute")
        old = None if on_policy_shortcut else self._no_grad_stats(batch, micro)
        if old is not None and cfg.old_logprobs == "rollout":
            old = TokenStats(batch.rollout_logprobs.to(self.device), old.logits, old.entropy)
        ref = (self._no_grad_stats(batch, micro, reference=True).logprobs
               if self.with_reference else None)
        parts: list[dict[str, float]] = []
        norms: list[float] = []
        skipped = 0
        prob_stats: dict[str, float] = {}
        if old is not None:
            prob_stats = token_prob_metrics(old.logprobs, old.entropy, loss_mask_all)
        gen = torch.Generator().manual_seed(cfg.seed * 104_729 + step)
        for epoch in range(cfg.ppo_epochs):
            order = torch.randperm(n, generator=gen) if mini < n else torch.arange(n)
            for start in range(0, n, mini):
                mb_idx = order[start:start + mini]
                mb_mask = loss_mask_all[mb_idx]
                stages: list[tuple[str, torch.Tensor | None]] = [("all", None)]
                if cfg.algo == "lopti":
                    stages = lopti_stages(old.logprobs[mb_idx], mb_mask, cfg.weights.eta)
                elif cfg.algo == "entropy_top" and old is not None:
                    top = token_weights("entropy_top", logprobs=old.logprobs[mb_idx],
                                        mask=mb_mask, entropy=old.entropy[mb_idx],
                                        fraction=cfg.weights.fraction)
                    stages = [("top", top)]
                for _, stage_mask in stages:
                    r = self._minibatch_step(batch, mb_idx, micro, stage_mask, mb_mask, old, ref,
                                             adv_all, on_policy_shortcut, prob_stats)
                    part, norm, skip = r
                    parts.extend(part)
                    norms.append(norm)
                    skipped += int(skip)
        self.backend.sync_weights(self.model)
        out = combine_metrics(parts)
        out.pop("n_tokens", None)
        out.update(prob_stats)
        finite = [x for x in norms if math.isfinite(x)]
        out["grad_norm"] = float(np.mean(finite)) if finite else float("nan")
        out["grad_norm/max"] = float(max(finite)) if finite else float("nan")
        out["update/optimizer_steps"] = float(len(norms) - skipped)
        out["update/skipped"] = float(skipped)
        out["lr"] = float(self.optimizer.param_groups[0]["lr"])
        return out

    def _minibatch_step(self, batch, mb_idx, micro, stage_mask, mb_mask, old, ref, adv_all,
                        shortcut, prob_stats):
        """Forward/backward over the micro-batches of one mini-batch, then one optimizer step."""
        pg_mask_full = mb_mask if stage_mask is None else stage_mask
        n_pg = float(pg_mask_full.sum())
        n_all = float(mb_mask.sum())
        n_seqs = float((mb_mask.sum(-1) > 0).sum())
        parts = []
        finite = True
        for s in range(0, len(mb_idx), micro):
            rows = mb_idx[s:s + micro]
            local = slice(s, s + micro)
            mb = batch.select(rows)
            width = mb.n_response
            stats = self._stats(mb)
            loss_mask = mb.response_mask.to(self.device)
            pg_mask = loss_mask if stage_mask is None else pg_mask_full[local, :width]
            if shortcut:
                old_lp = stats.logprobs.detach()
                if self.cfg.algo == "entropy_top":
                    pg_mask = token_weights("entropy_top", logprobs=old_lp, mask=loss_mask,
                                            entropy=stats.entropy, fraction=self.cfg.weights.fraction)
                    n_pg = float(pg_mask.sum())
                if not prob_stats:
                    prob_stats.update(token_prob_metrics(old_lp, stats.entropy, loss_mask))
            else:
                old_lp = old.logprobs[rows, :width]
            ref_lp = ref[rows, :width] if ref is not None else None
            loss, metrics = self._micro_loss(stats, old_lp, ref_lp, adv_all[rows], loss_mask,
                                             pg_mask, n_pg, n_all, n_seqs)
            metrics["entropy"] = float(masked_mean(stats.entropy, loss_mask.bool()))
            metrics["pg_token_frac"] = float(pg_mask.sum()) / max(float(loss_mask.sum()), 1.0)
            if torch.isfinite(loss):
                loss.backward()
            else:
                finite = False
            parts.append(metrics)
        norm, skipped = self._optimizer_step(finite)
        return parts, norm, skipped

    # -- evaluation ----------------------------------------------------------------------------
    def evaluate(self, step: int) -> dict[str, float]:
        """Greedy and sampled accuracy on the first ``eval.n_prompts`` held-out tasks."""
        ec = self.cfg.eval
        n = ec.n_prompts * max(1, ec.samples)
        if self._eval_envs is None or len(self._eval_envs) != n:
            self._eval_envs = [self.make_env(ec.split) for _ in range(n)]
        out: dict[str, float] = {}
        t0 = time.perf_counter()
        greedy = dataclasses.replace(self.sampling, temperature=0.0)
        for name, params, k in (("greedy", greedy, 1), ("sampled", self.sampling, ec.samples)):
            envs = self._eval_envs[:ec.n_prompts * k]
            prompts = []
            for i in range(ec.n_prompts):
                prompts += self._reset_group(envs[i * k:(i + 1) * k], i)
            eps = run_episodes(self.backend, self.tokenizer, envs, prompts, params,
                               max_response_tokens=self.cfg.rollout.max_response_tokens,
                               seed=self.cfg.seed * 15_485_863 + step,
                               error_reward=self.error_reward,
                               max_prompt_tokens=self.cfg.rollout.max_prompt_tokens)
            out[f"eval/{name}_accuracy"] = float(np.mean([bool(e.info.get("correct")) and
                                                          e.error is None for e in eps]))
            out[f"eval/{name}_reward"] = float(np.mean([e.reward for e in eps]))
        out["time/eval_s"] = time.perf_counter() - t0
        return out

    # -- checkpoints ---------------------------------------------------------------------------
    @property
    def checkpoint_root(self) -> Path:
        return self.out / "checkpoints"

    def save(self) -> Path:
        payload = {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                   "scheduler": self.scheduler.state_dict(), "rng": rng_state()}
        if self.policy.reference is not None:
            payload["reference"] = self.policy.reference.state_dict()
        meta = {"step": self.step, "data_position": self.data_position,
                "config": dataclasses.asdict(self.cfg)}
        return save_checkpoint(self.checkpoint_root, self.step, payload, meta,
                               keep=self.cfg.keep_checkpoints)

    def restore(self) -> bool:
        """Load the newest valid checkpoint; False when there is none. Refuses (``CheckpointError``)
        a changed configuration, checkpoints that are all corrupt, and unsafe file content."""
        found = find_resume_checkpoint(self.checkpoint_root)
        if found is None:
            return False
        path, manifest = found
        check_resume_config(manifest["meta"]["config"], dataclasses.asdict(self.cfg),
                            allow=self.allow_config_change,
                            defaults=dataclasses.asdict(type(self.cfg)()))
        state = load_payload(path, manifest, map_location=self.device)
        self.model.load_state_dict(state["model"])
        if "reference" in state and self.policy.reference is not None:
            self.policy.reference.load_state_dict(state["reference"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        set_rng_state(state["rng"])
        self.step = int(manifest["meta"]["step"])
        self.data_position = int(manifest["meta"]["data_position"])
        self.backend.sync_weights(self.model)
        return True

    # -- logging -------------------------------------------------------------------------------
    @property
    def metrics_path(self) -> Path:
        return self.out / "metrics.jsonl"

    def _log(self, record: dict[str, Any]) -> None:
        # Non-finite floats become null: NaN/Infinity are not JSON.
        clean = {k: (None if isinstance(v, float) and not math.isfinite(v) else v)
                 for k, v in record.items()}
        with open(self.metrics_path, "a") as f:
            f.write(json.dumps(clean, sort_keys=False) + "\n")
            f.flush()
        if self._tb is not None:
            for k, v in record.items():
                if k != "step" and isinstance(v, (int, float)) and math.isfinite(v):
                    self._tb.add_scalar(k, v, record["step"])

    def _open_tensorboard(self) -> None:
        if not self.cfg.tensorboard:
            return
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError as e:
            raise ImportError("tensorboard=true needs the tensorboard package "
                              "(pip install tensorboard)") from e
        self._tb = SummaryWriter(str(self.out / "tensorboard"))

    # -- the loop ------------------------------------------------------------------------------
    def train_step(self) -> dict[str, Any]:
        cfg = self.cfg
        step = self.step + 1
        t0 = time.perf_counter()
        episodes = self.rollout(step)
        t1 = time.perf_counter()
        rewards = torch.tensor([e.reward for e in episodes], dtype=torch.float32)
        scale = "none" if cfg.loss.advantage == "drgrpo" else "std"
        adv = group_advantages(rewards, cfg.group_size, scale=scale, eps=cfg.loss.adv_eps)
        batch = episodes_to_batch(episodes, self.pad_id)
        t2 = time.perf_counter()
        upd = self.update(batch, adv, step)
        t3 = time.perf_counter()
        self.step = step
        self.data_position += cfg.prompts_per_step
        record: dict[str, Any] = {"step": step}
        record.update(rollout_metrics(episodes, cfg.group_size))
        record.update(upd)
        record["episodes/reset_errors"] = float(self.reset_errors)
        record["advantage/mean"] = float(adv.mean())
        record["advantage/abs_mean"] = float(adv.abs().mean())
        generated = sum(e.n_generated for e in episodes)
        trained = int(batch.attention_mask.sum())
        record["time/rollout_s"] = t1 - t0
        record["time/update_s"] = t3 - t2
        record["tokens/s"] = generated / max(t1 - t0, 1e-9)
        record["perf/update_tokens_s"] = trained / max(t3 - t2, 1e-9)
        if cfg.eval.every and step % cfg.eval.every == 0 or (cfg.eval.at_end and step == cfg.steps):
            record.update(self.evaluate(step))
        record["time/step_s"] = time.perf_counter() - t0
        errors = [e.error for e in episodes if e.error]
        if errors:
            print(f"[rlvr train] step {step}: {len(errors)} episode(s) raised; first: "
                  f"{errors[0].splitlines()[0]}", file=sys.stderr)
        if record["update/skipped"]:
            print(f"[rlvr train] step {step}: skipped {int(record['update/skipped'])} "
                  "optimizer step(s) with a non-finite loss or gradient norm", file=sys.stderr)
        return record

    def train(self) -> list[dict[str, Any]]:
        cfg = self.cfg
        check_writable(self.out, self.checkpoint_root)
        resumed = False
        if cfg.resume:
            resumed = self.restore()
        elif any(self.checkpoint_root.glob("step_*")):
            raise FileExistsError(f"{self.out} already holds checkpoints: pass --resume "
                                  "(resume=true) to continue, or choose another out=DIR")
        moved = preserve_metrics(self.metrics_path, self.step if resumed else None)
        if moved is not None:
            print(f"[rlvr train] metrics lines this run replaces were moved to {moved}",
                  file=sys.stderr)
        dump_yaml(cfg, self.out / "config.yaml")
        self._open_tensorboard()
        records = []
        from tqdm.auto import tqdm

        bar = tqdm(total=cfg.steps, initial=self.step, disable=not cfg.progress,
                   desc=f"{cfg.algo} {cfg.env}", dynamic_ncols=True)
        try:
            while self.step < cfg.steps:
                record = self.train_step()
                self._log(record)
                records.append(record)
                bar.update(1)
                bar.set_postfix(reward=f"{record['reward/mean']:.3f}",
                                acc=f"{record['accuracy']:.3f}")
                if cfg.save_every and self.step % cfg.save_every == 0:
                    self.save()
        finally:
            bar.close()
            if self._tb is not None:
                self._tb.close()
        if self.step == cfg.steps and (not cfg.save_every or self.step % cfg.save_every):
            self.save()
        final = self.out / "final"
        self.model.save_pretrained(final)
        self.tokenizer.save_pretrained(final)
        return records


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    """The records of a ``metrics.jsonl``."""
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def strip_time(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Records without wall-time fields (for comparing runs)."""
    return [{k: v for k, v in r.items() if not is_time_key(k)} for r in records]
