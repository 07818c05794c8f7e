"""One batch's policy update: stages, epochs, mini-batches, micro-batches and the loss of each.

``Updater.update(batch, advantages, step)`` runs, for the algorithm ``cfg.algo``
(``rlvr.agents.algorithms``)::

    old = old-policy statistics of the batch (skipped when the update is on-policy)
    ref = reference log-probs (when KL is on or tracked)
    for stage in algorithm.stages(old) or [all tokens]:      # Lopti: low, then high
        for epoch in range(ppo_epochs):
            for mini_batch in split(batch):                   # Lopti: in order; else shuffled
                for micro_batch in mini_batch:                # gradient accumulation
                    loss(micro_batch).backward()
                optimizer step                                # clip, skip if not finite

A staged algorithm (Lopti) splits the batch in order, the same mini-batches in every stage, as
AR-Lopti does (zhyang2226/AR-Lopti@cbeb333 ``verl/workers/actor/dp_actor.py`` ``update_policy``:
``batch.split(ppo_mini_batch_size)`` in each of the two ``update_actor`` calls); the others draw
a permutation per epoch.

Every loss is normalised by its mini-batch's token / sequence counts, so the micro-batches of a
mini-batch add up to the mini-batch loss whatever the micro-batch size (``losses.agg_loss``; verl
0.9.1's global-batch ``agg_loss``). AR-Lopti's old verl instead took a token mean per
micro-batch and divided it by the number of micro-batches; the two agree when a mini-batch is one
forward (``docs/algorithms.md``, "Normalisers"). 80/20's surrogate divides by
``ceil(fraction * tokens of the mini-batch)``, the count verl's actor loss uses too.

Precision: parameters and AdamW state stay in float32 (master weights); ``dtype=bfloat16`` or
``float16`` runs every forward and backward under ``torch.autocast``, float16 with a gradient
scaler. Training forwards run in train mode, so gradient checkpointing (which transformers applies
only when ``model.training``) is active; no-grad passes run in eval mode. ``Policy`` zeroes every
dropout, so both modes compute the same function.
"""

from __future__ import annotations

import contextlib
import math
import warnings
from dataclasses import dataclass

import numpy as np
import torch

from rlvr.agents.algorithms import Algorithm, Stage
from rlvr.agents.losses import agg_loss, k3_kl, masked_mean, surrogate_metrics
from rlvr.agents.method_loss import LossInputs, method_loss
from rlvr.agents.metrics import combine_metrics, token_prob_metrics
from rlvr.agents.policy import Policy, TokenStats
from rlvr.agents.rollout.base import RolloutBatch


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


def optimizer_steps_per_batch(cfg, algorithm: Algorithm) -> int:
    """Optimizer steps of one batch: stages x epochs x mini-batches."""
    batch = cfg.prompts_per_step * cfg.group_size
    return cfg.ppo_epochs * (batch // (cfg.mini_batch_size or batch)) * algorithm.n_stages


class Precision:
    """Autocast context and (float16) gradient scaling for ``dtype`` on ``device``."""

    def __init__(self, dtype: str, device: torch.device):
        self.dtype = getattr(torch, dtype)
        self.device = device
        self.enabled = self.dtype != torch.float32
        self.scaler = torch.amp.GradScaler(device.type) if self.dtype == torch.float16 else None

    def autocast(self):
        if not self.enabled:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device.type, dtype=self.dtype)

    def backward(self, loss: torch.Tensor) -> None:
        (self.scaler.scale(loss) if self.scaler is not None else loss).backward()

    def unscale(self, optimizer) -> None:
        if self.scaler is not None:
            self.scaler.unscale_(optimizer)

    def step(self, optimizer) -> None:
        if self.scaler is not None:
            self.scaler.step(optimizer)
        else:
            optimizer.step()

    def after_step(self) -> None:
        """Adjust the loss scale (also after a skipped step, which lowers it)."""
        if self.scaler is not None:
            self.scaler.update()


@dataclass
class BatchTensors:
    """One batch on the training device, with what every mini-batch of it reads."""

    data: RolloutBatch
    #: Response tokens in the loss ``[B, R]`` (bool).
    loss_mask: torch.Tensor
    #: Per-sequence advantages ``[B]``.
    advantages: torch.Tensor
    #: Old-policy statistics (``None``: on-policy, the current forward's detached).
    old: TokenStats | None
    #: Reference log-probs ``[B, R]`` (``None``: no KL).
    ref: torch.Tensor | None


@dataclass
class MicroBatch:
    """The rows of one forward/backward and what their loss needs, trimmed to width ``w``."""

    data: RolloutBatch
    #: Response tokens in the loss ``[b, w]`` (bool).
    loss_mask: torch.Tensor
    #: Per-sequence advantages ``[b]``.
    advantages: torch.Tensor
    #: Old-policy log-probs ``[b, w]`` (``None``: on-policy, the current ones detached).
    old_logprobs: torch.Tensor | None
    ref_logprobs: torch.Tensor | None
    #: The stage's tokens ``[b, w]`` (``None``: every response token).
    stage_tokens: torch.Tensor | None


@dataclass(frozen=True)
class Normalisers:
    """Token and sequence counts of a mini-batch that every micro-batch loss divides by."""

    #: Response tokens (the KL's and, unless tokens are selected, the surrogate's normaliser).
    tokens: float
    #: The surrogate's count when the algorithm selects tokens per forward (80/20):
    #: ``ceil(fraction * tokens)``.
    selected: float
    #: Non-empty sequences.
    sequences: float


class Updater:
    """The optimizer steps of one batch, for one algorithm (module docstring)."""

    def __init__(
        self,
        cfg,
        policy: Policy,
        optimizer,
        scheduler,
        algorithm: Algorithm,
        device: torch.device,
        precision: Precision,
    ):
        self.cfg = cfg
        self.policy = policy
        self.optimizer = optimizer
        self.scheduler = scheduler
        self.algorithm = algorithm
        self.device = device
        self.precision = precision
        self.params = algorithm.parameters(cfg.weights)

    # -- statistics ------------------------------------------------------------------------------
    def _stats(self, batch: RolloutBatch) -> TokenStats:
        b = batch.to(self.device)
        with self.policy.training(), self.precision.autocast():
            return self.policy.token_stats(b.input_ids, b.attention_mask, b.n_response)

    @torch.no_grad()
    def _no_grad_stats(self, batch: RolloutBatch, rows: int, reference: bool = False):
        """Old-policy (or reference) statistics over the whole batch, ``rows`` at a time."""
        parts = []
        for start in range(0, len(batch), rows):
            b = batch.select(list(range(start, min(start + rows, len(batch))))).to(self.device)
            with self.precision.autocast():
                if reference:
                    lp = self.policy.reference_logprobs(b.input_ids, b.attention_mask, b.n_response)
                    parts.append(TokenStats(lp, torch.zeros_like(lp), torch.zeros_like(lp)))
                else:
                    parts.append(
                        self.policy.token_stats(b.input_ids, b.attention_mask, b.n_response)
                    )
        width = batch.n_response

        def pad(x):
            return torch.nn.functional.pad(x, (0, width - x.shape[1]))

        return TokenStats(
            *(
                torch.cat([pad(getattr(s, f)) for s in parts])
                for f in ("logprobs", "logits", "entropy")
            )
        )

    # -- the update ------------------------------------------------------------------------------
    def update(self, batch: RolloutBatch, advantages: torch.Tensor, step: int) -> dict[str, float]:
        """All optimizer steps of one batch; returns the update metrics."""
        cfg = self.cfg
        n = len(batch)
        mini = cfg.mini_batch_size or n
        micro = cfg.micro_batch_size or mini
        loss_mask = batch.response_mask.to(self.device).bool()
        adv = advantages.to(self.device, torch.float32)
        on_policy = (
            cfg.ppo_epochs == 1
            and mini == n
            and micro == n
            and not self.algorithm.needs_old_logprobs
            and cfg.old_logprobs == "recompute"
        )
        old = None if on_policy else self._no_grad_stats(batch, micro)
        if old is not None and cfg.old_logprobs == "rollout":
            old = TokenStats(batch.rollout_logprobs.to(self.device), old.logits, old.entropy)
        ref = (
            self._no_grad_stats(batch, micro, reference=True).logprobs
            if self.policy.reference is not None
            else None
        )
        prob_stats: dict[str, float] = {}
        if old is not None:
            prob_stats = token_prob_metrics(old.logprobs, old.entropy, loss_mask)
        stages = (
            [Stage("all", loss_mask)]
            if self.algorithm.stages is None
            else self.algorithm.stages(old.logprobs, loss_mask, self.params)
        )
        bt = BatchTensors(batch, loss_mask, adv, old, ref)
        parts: list[dict[str, float]] = []
        norms: list[float] = []
        skipped = 0
        gen = torch.Generator().manual_seed(cfg.seed * 104_729 + step)
        for stage in stages:
            stage_tokens = None if self.algorithm.stages is None else stage.tokens
            for _ in range(cfg.ppo_epochs):
                order = self._mini_batch_order(n, mini, gen)
                for start in range(0, n, mini):
                    part, norm, skip, on_policy_stats = self._mini_batch(
                        bt, order[start : start + mini], micro, stage_tokens
                    )
                    prob_stats = prob_stats or on_policy_stats
                    parts.extend(part)
                    norms.append(norm)
                    skipped += int(skip)
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

    def _mini_batch_order(self, n: int, mini: int, gen: torch.Generator) -> torch.Tensor:
        """The rows of one epoch, mini-batch after mini-batch: in order for a staged algorithm
        (AR-Lopti's split, the same in every stage; module docstring), else a fresh permutation."""
        if mini >= n or self.algorithm.stages is not None:
            return torch.arange(n)
        return torch.randperm(n, generator=gen)

    def _normalisers(self, loss_mask: torch.Tensor) -> Normalisers:
        """The mini-batch's counts. With a token selection (80/20) the surrogate's count is
        ``selected(params, tokens)``, ``ceil(fraction * tokens)``: what one forward over the whole
        mini-batch keeps, and the only count verl's actor loss can know (it sees one micro-batch
        and the global token count), so both engines divide by the same number."""
        tokens = int(loss_mask.sum())
        selected = float(tokens)
        if self.algorithm.select_tokens is not None:
            selected = float(self.algorithm.selected(self.params, tokens))
        return Normalisers(
            tokens=float(tokens),
            selected=selected,
            sequences=float((loss_mask.sum(-1) > 0).sum()),
        )

    def _mini_batch(
        self, bt: BatchTensors, rows: torch.Tensor, micro: int, stage_tokens: torch.Tensor | None
    ):
        """Forward/backward over the micro-batches of one mini-batch, then one optimizer step.

        Returns the micro-batches' metrics, the gradient norm, whether the step was skipped,
        and (on-policy) the token-probability metrics of the first forward."""
        norm = self._normalisers(bt.loss_mask[rows])
        parts = []
        prob_stats: dict[str, float] = {}
        finite = True
        for s in range(0, len(rows), micro):
            idx = rows[s : s + micro]
            data = bt.data.select(idx)
            width = data.n_response
            mb = MicroBatch(
                data=data,
                loss_mask=data.response_mask.to(self.device).bool(),
                advantages=bt.advantages[idx],
                old_logprobs=None if bt.old is None else bt.old.logprobs[idx, :width],
                ref_logprobs=None if bt.ref is None else bt.ref[idx, :width],
                stage_tokens=None if stage_tokens is None else stage_tokens[idx, :width],
            )
            loss, metrics, stats = self.micro_batch_loss(mb, norm)
            if mb.old_logprobs is None and not prob_stats:
                prob_stats = token_prob_metrics(
                    stats.logprobs.detach(), stats.entropy, mb.loss_mask
                )
            if torch.isfinite(loss):
                self.precision.backward(loss)
            else:
                finite = False
            parts.append(metrics)
        grad_norm, skipped = self._optimizer_step(finite)
        return parts, grad_norm, skipped, prob_stats

    def micro_batch_loss(
        self, mb: MicroBatch, norm: Normalisers
    ) -> tuple[torch.Tensor, dict[str, float], TokenStats]:
        """The loss of one micro-batch, its metrics and its statistics: the method's loss
        (``rlvr.agents.method_loss``, the composition verl's actor loss shares) aggregated with the
        mini-batch's normalisers (``rlvr.agents.losses.agg_loss``) and KL by the k3 estimator.

        The surrogate covers the algorithm's selected tokens (80/20) or every response token;
        with stages (Lopti) the advantage is zeroed outside the stage and KL counts on the stage's
        tokens only, both still normalised by all response tokens of the mini-batch.
        """
        cfg, lc = self.cfg, self.cfg.loss
        stats = self._stats(mb.data)
        mask = mb.loss_mask
        old_lp = stats.logprobs.detach() if mb.old_logprobs is None else mb.old_logprobs
        scale = lc.loss_scale_factor
        if lc.agg == "seq-mean-token-sum-norm" and scale is None:
            scale = float(cfg.rollout.max_response_tokens)  # Dr.GRPO: one constant divisor

        def aggregate(loss_mat: torch.Tensor, tokens: torch.Tensor, surrogate: bool):
            return agg_loss(
                loss_mat,
                tokens,
                lc.agg,
                loss_scale_factor=scale,
                batch_num_tokens=norm.selected if surrogate else norm.tokens,
                global_batch_size=norm.sequences,
            )

        inputs = LossInputs(
            stats.logprobs,
            old_lp,
            mb.advantages,
            mask,
            entropy=stats.entropy,
            logits=stats.logits,
            ref_logprobs=mb.ref_logprobs,
            stage=mb.stage_tokens,
        )
        out = method_loss(
            self.algorithm,
            self.params,
            inputs,
            aggregate=aggregate,
            kl_penalty=k3_kl,
            clip_low=lc.clip_low,
            clip_high=lc.clip_high,
            dual_clip=lc.dual_clip,
            weight_position=lc.weight_position,
            kl_coef=lc.kl_coef,
        )
        kl = out.kl_tokens
        metrics = {
            "loss": float(out.loss.detach()),
            "pg_loss": float(out.pg_loss.detach()),
            "kl_loss": 0.0 if out.kl_loss is None else float(out.kl_loss.detach()),
            "kl": 0.0 if kl is None else float(masked_mean(kl.detach(), out.kl_mask)),
            **surrogate_metrics(out.terms, stats.logprobs, old_lp, out.weights, out.pg_mask),
            "entropy": float(masked_mean(stats.entropy, mask)),
        }
        used = out.pg_mask if mb.stage_tokens is None else out.kl_mask
        metrics["pg_token_frac"] = float(used.sum()) / max(float(mask.sum()), 1.0)
        return out.loss, metrics, stats

    def _optimizer_step(self, losses_finite: bool) -> tuple[float, bool]:
        clip = self.cfg.optim.grad_clip
        params = [p for p in self.policy.model.parameters() if p.requires_grad]
        self.precision.unscale(self.optimizer)
        norm = float(torch.nn.utils.clip_grad_norm_(params, clip if clip > 0 else float("inf")))
        skipped = not (losses_finite and math.isfinite(norm))
        if not skipped:
            self.precision.step(self.optimizer)
        self.precision.after_step()
        self.optimizer.zero_grad(set_to_none=True)
        with warnings.catch_warnings():  # a skipped step still advances the schedule
            warnings.simplefilter("ignore", UserWarning)
            self.scheduler.step()
        return norm, skipped
