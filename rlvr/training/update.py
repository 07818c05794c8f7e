"""One batch's policy update: stages, epochs, mini-batches, micro-batches and the loss of each.

``Updater.update(batch, advantages, step)`` runs, for the algorithm ``cfg.algo``
(``rlvr.agents.algorithms``)::

    old = old-policy statistics of the batch (skipped when the update is on-policy)
    ref = reference log-probs (when KL is on or tracked)
    once per run, before the first optimizer step: the method's calibration (GRPO-SG's alpha,
        tau, mu from the current policy's statistics of this batch; ``Algorithm.calibrate``)
    for stage in algorithm.stages(old) or [all tokens]:      # Lopti: low, then high
        for epoch in range(ppo_epochs):
            for mini_batch in split(batch):                   # in order, the same every epoch
                for micro_batch in mini_batch:                # gradient accumulation
                    loss(micro_batch).backward()
                optimizer step                                # clip, skip if not finite

Every algorithm splits the batch in order, rows ``[0, m)``, ``[m, 2m)``..., the same mini-batches
in every epoch and stage, so a prompt's group (consecutive rows) stays in one mini-batch when the
mini-batch is a multiple of the group size: verl 0.9.1 with its default ``actor.shuffle: false``
(``DataProto.split`` in the actor's ``update_policy``), AR-Lopti (zhyang2226/AR-Lopti@cbeb333
``verl/workers/actor/dp_actor.py`` ``update_policy``, ~319: ``batch.split(ppo_mini_batch_size)``)
and the 80/20 code do the same. Before this, the native update drew a permutation per epoch for
the methods without stages; only runs with more than one mini-batch per batch compute other
numbers now (``docs/algorithms.md``, "Mini-batch order").

Each step also records what the weights do (``rlvr.agents.metrics.weight_diagnostics``: weight
quantiles, shares at L and U, the kept gradient mass) over the tokens of the first pass, and every
``grad_cosine_every`` steps the cosine between the method's gradient and GRPO's on the first
mini-batch (``rlvr.training.diagnostics``).

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

import math
import warnings
from dataclasses import dataclass

import numpy as np
import torch

from rlvr.agents.algorithms import Algorithm, Stage
from rlvr.agents.algorithms.base import pending_calibration
from rlvr.agents.losses import agg_loss, k3_kl, masked_mean, surrogate_metrics
from rlvr.agents.method_loss import LossInputs, method_loss
from rlvr.agents.metrics import combine_metrics, token_prob_metrics, weight_diagnostics
from rlvr.agents.policy import Policy, TokenStats
from rlvr.agents.rollout.base import RolloutBatch
from rlvr.training.diagnostics import gradient_probe
from rlvr.training.optim import Precision


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
        #: The calibration of the run (``Algorithm.calibrate``'s record: the values set, the rule,
        #: the batch they came from); ``None`` before it, or for a method without one.
        self.calibration: dict | None = None
        #: Token weights and probabilities of the current update's first pass (diagnostics).
        self._seen: list[tuple[torch.Tensor, torch.Tensor]] | None = None

    # -- calibration -----------------------------------------------------------------------------
    def _calibrate(self, batch: RolloutBatch, old: TokenStats | None, mask: torch.Tensor) -> bool:
        """Set the method's calibrated parameters from the current policy on ``batch``, once
        per run (before the first optimizer step); True when it happened now."""
        if self.algorithm.calibrate is None or not pending_calibration(self.params):
            return False
        current = old if old is not None and self.cfg.old_logprobs == "recompute" else None
        if current is None:  # one no-grad forward over the batch, the update's micro-batches
            current = self._no_grad_stats(batch, self.cfg.micro_batch_size or len(batch))
        self.params, record = self.algorithm.calibrate(
            self.params, logprobs=current.logprobs, logits=current.logits, mask=mask
        )
        self.calibration = record
        return True

    def restore_calibration(self, record: dict) -> None:
        """Take the calibrated values a checkpoint recorded (a resumed run never recalibrates)."""
        self.params = {**self.params, **record["values"]}
        self.calibration = record

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
        calibrated = self._calibrate(batch, old, loss_mask)
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
        self._seen, seen = [], []
        probe = cfg.grad_cosine_every and step % cfg.grad_cosine_every == 0
        probed: dict[str, float] = {}
        rows = torch.arange(n)
        for stage in stages:
            stage_tokens = None if self.algorithm.stages is None else stage.tokens
            for _ in range(cfg.ppo_epochs):
                for start in range(0, n, mini):
                    first = not parts
                    part, norm, skip, on_policy_stats, extra = self._mini_batch(
                        bt, rows[start : start + mini], micro, stage_tokens, probe and first
                    )
                    probed.update(extra)
                    prob_stats = prob_stats or on_policy_stats
                    parts.extend(part)
                    norms.append(norm)
                    skipped += int(skip)
                if self._seen is not None:  # the first pass covers every token once
                    seen, self._seen = self._seen, None
        out = combine_metrics(parts)
        out.pop("n_tokens", None)
        out.update(prob_stats)
        finite = [x for x in norms if math.isfinite(x)]
        out["grad_norm"] = float(np.mean(finite)) if finite else float("nan")
        out["grad_norm/max"] = float(max(finite)) if finite else float("nan")
        out["update/optimizer_steps"] = float(len(norms) - skipped)
        out["update/skipped"] = float(skipped)
        out["lr"] = float(self.optimizer.param_groups[0]["lr"])
        out.update(self._weight_metrics(seen))
        out.update(probed)
        if calibrated:
            values = self.calibration["values"]
            out.update({f"calibration/{k}": float(v) for k, v in values.items()})
        return out

    def _weight_metrics(self, seen: list[tuple[torch.Tensor, torch.Tensor]]) -> dict[str, float]:
        """``weight_diagnostics`` of the first pass's tokens, with the method's L and U."""
        if not seen:
            return {}
        w, p = (torch.cat(x) for x in zip(*seen))
        bounds = [self.params.get(k) for k in ("lower", "upper")]
        return weight_diagnostics(w, p, *(b if isinstance(b, float) else None for b in bounds))

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

    def micro_batches(
        self, bt: BatchTensors, rows: torch.Tensor, micro: int, stage_tokens: torch.Tensor | None
    ) -> list[MicroBatch]:
        """The micro-batches of the mini-batch ``rows``, in order."""
        out = []
        for s in range(0, len(rows), micro):
            idx = rows[s : s + micro]
            data = bt.data.select(idx)
            width = data.n_response
            out.append(
                MicroBatch(
                    data=data,
                    loss_mask=data.response_mask.to(self.device).bool(),
                    advantages=bt.advantages[idx],
                    old_logprobs=None if bt.old is None else bt.old.logprobs[idx, :width],
                    ref_logprobs=None if bt.ref is None else bt.ref[idx, :width],
                    stage_tokens=None if stage_tokens is None else stage_tokens[idx, :width],
                )
            )
        return out

    def _mini_batch(
        self,
        bt: BatchTensors,
        rows: torch.Tensor,
        micro: int,
        stage_tokens: torch.Tensor | None,
        probe: bool = False,
    ):
        """Forward/backward over the micro-batches of one mini-batch, then one optimizer step
        (with ``probe``, first the same-batch comparison with GRPO's gradient).

        Returns the micro-batches' metrics, the gradient norm, whether the step was skipped,
        (on-policy) the token-probability metrics of the first forward, and the probe's."""
        norm = self._normalisers(bt.loss_mask[rows])
        parts = []
        prob_stats: dict[str, float] = {}
        finite = True
        mbs = self.micro_batches(bt, rows, micro, stage_tokens)
        for mb in mbs:
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
        probed = gradient_probe(self, mbs, norm) if probe and finite else {}
        grad_norm, skipped = self._optimizer_step(finite)
        return parts, grad_norm, skipped, prob_stats, probed

    def micro_batch_loss(
        self, mb: MicroBatch, norm: Normalisers, algorithm: Algorithm | None = None
    ) -> tuple[torch.Tensor, dict[str, float], TokenStats]:
        """The loss of one micro-batch, its metrics and its statistics: the method's loss
        (``rlvr.agents.method_loss``, the composition verl's actor loss shares) aggregated with the
        mini-batch's normalisers (``rlvr.agents.losses.agg_loss``) and KL by the k3 estimator.

        The surrogate covers the algorithm's selected tokens (80/20) or every response token;
        with stages (Lopti) the advantage is zeroed outside the stage and KL counts on the stage's
        tokens only, both still normalised by all response tokens of the mini-batch.
        ``algorithm`` (default: the run's) is GRPO for the gradient probe.
        """
        cfg, lc = self.cfg, self.cfg.loss
        algorithm = algorithm or self.algorithm
        params = self.params if algorithm is self.algorithm else {}
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
            algorithm,
            params,
            inputs,
            aggregate=aggregate,
            kl_penalty=k3_kl,
            clip_low=lc.clip_low,
            clip_high=lc.clip_high,
            dual_clip=lc.dual_clip,
            weight_position=lc.weight_position,
            kl_coef=lc.kl_coef,
            kl_weighting=lc.kl_weighting,
        )
        if self._seen is not None and algorithm is self.algorithm:
            w = torch.ones_like(stats.logprobs) if out.weights is None else out.weights
            w = torch.where(out.pg_mask, w, torch.zeros_like(w))
            self._seen.append((w[mask].detach(), stats.logprobs.detach()[mask].exp()))
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
