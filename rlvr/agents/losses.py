"""Token-weighted clipped policy loss of the GRPO family (docs/design.md §5), as pure functions.

Per response token t of sequence i, with advantage ``A`` (per sequence or per token) and detached
weight ``w`` (``rlvr.agents.weights``):

    rho   = exp(logp - logp_old)                                   importance ratio
    s     = max(-A * rho, -A * clip(rho, 1 - eps_low, 1 + eps_high))  clipped surrogate (PPO; DAPO's
                                                                   separate low/high clip)
    s     = min(s, -A * c)            if A < 0 and dual_clip c set  dual clip (Ye et al. 2020)
    kl    = exp(ref - logp) - (ref - logp) - 1                      k3 estimator (Schulman 2020)
    loss  = agg(w * s + beta * kl)                                  ``weight_position="surrogate"``

``weight_position="ratio"`` puts the weight inside the ratio instead: ``rho_w = w * rho`` replaces
``rho`` in both branches of the max and in the clip, ``s = max(-A * w * rho, -A * clip(w * rho,
1 - eps_low, 1 + eps_high))``. Published descriptions of token-weighted GRPO differ on this
point (weight multiplying the clipped surrogate vs weight on the ratio inside min/clip); the two
differ only when clipping is active: in the ratio form a token with ``w > 1 + eps_high`` and
``A > 0`` (or ``w < 1 - eps_low`` and ``A < 0``) is clipped already at ``rho = 1`` and gets no
gradient. The surrogate form (default) keeps ``grad(w * s) = w * grad(s)`` exactly.

Aggregations match verl's ``agg_loss`` (``verl/trainer/ppo/core_algos.py``, global-batch version):

- ``token-mean``: ``sum_{i,t} m L / N_tok`` (DAPO; the K&K recipe's default).
- ``seq-mean-token-mean``: mean over non-empty rows of the row's token mean (original GRPO).
- ``seq-mean-token-sum``: ``sum_i (sum_t m L) / N_seq``.
- ``seq-mean-token-sum-norm``: ``seq-mean-token-sum / loss_scale_factor`` (Dr.GRPO, Liu et al.
  2025: a constant normaliser, default the padded response length ``T``, in place of ``|o_i|``).

Fully masked rows are excluded from ``N_seq``; a fully masked batch gives loss 0 (with a graph),
never NaN. ``batch_num_tokens`` / ``global_batch_size`` override ``N_tok`` / ``N_seq`` so that
micro-batches of one mini-batch sum to the mini-batch loss (gradient accumulation).
"""

from __future__ import annotations

import math

import torch

AGG_MODES = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm")
WEIGHT_POSITIONS = ("surrogate", "ratio")
#: verl clamps the log-ratio to [-20, 20] before exp for stability; we do the same.
LOG_RATIO_CLAMP = 20.0
#: verl clamps the k3 estimate to [-10, 10] (``core_algos.kl_penalty``, ``low_var_kl``).
K3_CLAMP = 10.0


def _masked_sum(x: torch.Tensor, mask: torch.Tensor, dim=None) -> torch.Tensor:
    zero = torch.zeros((), dtype=x.dtype, device=x.device)
    picked = torch.where(mask, x, zero)
    return picked.sum() if dim is None else picked.sum(dim=dim)


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of ``x`` over ``mask``; 0 when the mask is empty (never NaN)."""
    mask = mask.to(torch.bool)
    n = mask.sum()
    return _masked_sum(x, mask) / n.clamp(min=1).to(x.dtype)


def agg_loss(
    loss_mat: torch.Tensor,
    mask: torch.Tensor,
    agg: str = "token-mean",
    *,
    loss_scale_factor: float | None = None,
    batch_num_tokens: float | None = None,
    global_batch_size: float | None = None,
) -> torch.Tensor:
    """Aggregate a ``[B, T]`` per-token loss into a scalar (verl ``agg_loss`` definitions, dp=1).

    token-mean:              sum(m * L) / (batch_num_tokens or sum(m))
    seq-mean-token-sum:      sum_i sum_t(m * L) / (global_batch_size or #non-empty rows)
    seq-mean-token-mean:     sum_i [sum_t(m * L) / sum_t m] / (global_batch_size or #non-empty rows)
    seq-mean-token-sum-norm: seq-mean-token-sum / (loss_scale_factor or T)
    A zero denominator gives ``0 * sum`` (a zero that keeps the graph).
    """
    if agg not in AGG_MODES:
        raise ValueError(f"agg: unknown aggregation {agg!r}; known: {list(AGG_MODES)}")
    if loss_mat.dim() != 2 or mask.shape != loss_mat.shape:
        raise ValueError(
            f"mask: shape {tuple(mask.shape)} must equal loss shape "
            f"{tuple(loss_mat.shape)} ([B, T])"
        )
    mask = mask.to(torch.bool)
    zero_loss = _masked_sum(loss_mat, mask) * 0.0
    if agg == "token-mean":
        n_tok = mask.sum() if batch_num_tokens is None else batch_num_tokens
        if float(n_tok) == 0:
            return zero_loss
        return _masked_sum(loss_mat, mask) / n_tok
    row_tokens = mask.sum(dim=-1)
    row_sums = _masked_sum(loss_mat, mask, dim=-1)
    nonempty = row_tokens > 0
    n_seq = nonempty.sum() if global_batch_size is None else global_batch_size
    if float(n_seq) == 0:
        return zero_loss
    if agg == "seq-mean-token-mean":
        row_vals = row_sums / row_tokens.clamp(min=1).to(loss_mat.dtype)
    else:
        row_vals = row_sums
    loss = _masked_sum(row_vals, nonempty) / n_seq
    if agg == "seq-mean-token-sum-norm":
        scale = loss_mat.shape[-1] if loss_scale_factor is None else loss_scale_factor
        if not scale > 0:
            raise ValueError(f"loss_scale_factor: must be > 0, got {loss_scale_factor!r}")
        loss = loss / scale
    return loss


def k3_kl(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """k3 estimator of KL(pi_theta || pi_ref) per token: ``exp(ref - logp) - (ref - logp) - 1``
    (>= 0), clamped to ``[-K3_CLAMP, K3_CLAMP]`` as verl 0.9.1 ``kl_penalty("low_var_kl")``."""
    log_ratio = (ref_logprobs - logprobs).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    return (torch.exp(log_ratio) - log_ratio - 1.0).clamp(-K3_CLAMP, K3_CLAMP)


def _check_clip(clip_low: float, clip_high: float, dual_clip: float | None) -> None:
    if not (0.0 <= clip_low < 1.0):
        raise ValueError(f"clip_low: must be in [0, 1), got {clip_low!r}")
    if not (clip_high >= 0.0 and math.isfinite(clip_high)):
        raise ValueError(f"clip_high: must be >= 0, got {clip_high!r}")
    if dual_clip is not None and not (dual_clip > 1.0 and math.isfinite(dual_clip)):
        raise ValueError(f"dual_clip: must be > 1 (or None), got {dual_clip!r}")


def clipped_surrogate(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    *,
    weights: torch.Tensor | None = None,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    dual_clip: float | None = None,
    weight_position: str = "surrogate",
) -> dict[str, torch.Tensor]:
    """Per-token weighted surrogate ``w * s`` (or the ratio form) and the masks behind the metrics.

    Returns ``{"pg": [B,T] loss, "ratio": rho, "clipped": bool, "dual_clipped": bool}``;
    ``advantages`` must already be ``[B, T]``-broadcastable.
    """
    _check_clip(clip_low, clip_high, dual_clip)
    if weight_position not in WEIGHT_POSITIONS:
        raise ValueError(
            f"weight_position: {weight_position!r} is not one of {list(WEIGHT_POSITIONS)}"
        )
    log_ratio = (logprobs - old_logprobs).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    ratio = torch.exp(log_ratio)
    w = None if weights is None else weights.detach().to(ratio.dtype)
    rho = ratio * w if (w is not None and weight_position == "ratio") else ratio
    pg1 = -advantages * rho
    pg2 = -advantages * rho.clamp(1.0 - clip_low, 1.0 + clip_high)
    pg = torch.maximum(pg1, pg2)
    clipped = pg2 > pg1
    dual_clipped = torch.zeros_like(clipped)
    if dual_clip is not None:
        pg3 = -advantages * dual_clip
        negative = (advantages < 0).expand_as(pg)
        dual_clipped = negative & (pg > pg3)
        pg = torch.where(negative, torch.minimum(pg, pg3), pg)
    if w is not None and weight_position == "surrogate":
        pg = w * pg
    return {"pg": pg, "ratio": ratio, "clipped": clipped, "dual_clipped": dual_clipped}


def policy_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    weights: torch.Tensor | None = None,
    ref_logprobs: torch.Tensor | None = None,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    dual_clip: float | None = None,
    kl_coef: float = 0.0,
    agg: str = "token-mean",
    weight_position: str = "surrogate",
    loss_scale_factor: float | None = None,
    batch_num_tokens: float | None = None,
    global_batch_size: float | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """``loss = agg(w * s + beta * kl_k3, mask)`` (module docstring) and detached float metrics.

    Shapes: ``logprobs``, ``old_logprobs``, ``mask``, ``weights``, ``ref_logprobs`` ``[B, T]``;
    ``advantages`` ``[B]`` (per sequence, broadcast over tokens) or ``[B, T]``. Masked positions
    must hold finite numbers (pad log-probs with 0, not -inf). ``weights`` are detached here.
    The KL term is on every masked token, whatever the weights (80/20 keeps KL unmasked).

    Metrics: ``loss``, ``pg_loss``, ``kl_loss`` (aggregated like the loss), ``kl`` (token-mean of
    k3), ``ppo_kl`` (token-mean of logp_old - logp), ``clip_frac``, ``dual_clip_frac``,
    ``ratio/mean|min|max``, ``weight/mean|min|max``, ``kept_frac`` (fraction of response tokens
    with nonzero weight), ``n_tokens``. Means over an empty mask are 0.
    """
    if logprobs.dim() != 2:
        raise ValueError(f"logprobs: expected [B, T], got shape {tuple(logprobs.shape)}")
    shape = logprobs.shape
    others = (
        ("old_logprobs", old_logprobs),
        ("mask", mask),
        ("weights", weights),
        ("ref_logprobs", ref_logprobs),
    )
    for name, t in others:
        if t is not None and t.shape != shape:
            raise ValueError(f"{name}: shape {tuple(t.shape)} != logprobs shape {tuple(shape)}")
    if advantages.dim() == 1 and advantages.shape[0] == shape[0]:
        adv = advantages.unsqueeze(-1)
    elif advantages.shape == shape:
        adv = advantages
    else:
        raise ValueError(
            f"advantages: expected [B]={shape[0]} or [B, T]={tuple(shape)}, "
            f"got {tuple(advantages.shape)}"
        )
    if not (kl_coef >= 0.0 and math.isfinite(kl_coef)):
        raise ValueError(f"kl_coef: must be >= 0, got {kl_coef!r}")
    if kl_coef > 0 and ref_logprobs is None:
        raise ValueError("ref_logprobs: required when kl_coef > 0")
    if agg not in AGG_MODES:
        raise ValueError(f"agg: unknown aggregation {agg!r}; known: {list(AGG_MODES)}")
    valid = mask.to(torch.bool)
    adv = adv.detach().to(logprobs.dtype)
    old = old_logprobs.detach()

    terms = clipped_surrogate(
        logprobs,
        old,
        adv,
        weights=weights,
        clip_low=clip_low,
        clip_high=clip_high,
        dual_clip=dual_clip,
        weight_position=weight_position,
    )
    agg_kw = {
        "loss_scale_factor": loss_scale_factor,
        "batch_num_tokens": batch_num_tokens,
        "global_batch_size": global_batch_size,
    }
    pg_loss = agg_loss(terms["pg"], valid, agg, **agg_kw)
    loss = pg_loss
    kl_tok = None
    kl_loss = torch.zeros((), dtype=logprobs.dtype, device=logprobs.device)
    if ref_logprobs is not None:
        kl_tok = k3_kl(logprobs, ref_logprobs.detach())
        kl_loss = agg_loss(kl_tok, valid, agg, **agg_kw)
        if kl_coef > 0:
            loss = pg_loss + kl_coef * kl_loss

    return loss, {
        "loss": float(loss.detach()),
        "pg_loss": float(pg_loss.detach()),
        "kl_loss": float(kl_loss.detach()),
        "kl": float(masked_mean(kl_tok.detach(), valid)) if kl_tok is not None else 0.0,
        **surrogate_metrics(terms, logprobs, old, weights, valid),
    }


def surrogate_metrics(
    terms: dict[str, torch.Tensor],
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    weights: torch.Tensor | None,
    mask: torch.Tensor,
) -> dict[str, float]:
    """Detached metrics of a surrogate (``clipped_surrogate``'s ``terms``) over ``mask``:
    ``ppo_kl``, ``clip_frac``, ``dual_clip_frac``, ``ratio/mean|min|max``, ``weight/mean|min|max``,
    ``kept_frac``, ``n_tokens`` (``policy_loss``'s docstring)."""
    with torch.no_grad():
        valid = mask.to(torch.bool)
        w = torch.ones_like(logprobs) if weights is None else weights.detach().to(logprobs.dtype)
        n = int(valid.sum())
        ratio = terms["ratio"].detach()

        def mmax(x, fn):
            return float(fn(x[valid])) if n else 0.0

        return {
            "ppo_kl": float(masked_mean(old_logprobs.detach() - logprobs.detach(), valid)),
            "clip_frac": float(masked_mean(terms["clipped"].to(logprobs.dtype), valid)),
            "dual_clip_frac": float(masked_mean(terms["dual_clipped"].to(logprobs.dtype), valid)),
            "ratio/mean": float(masked_mean(ratio, valid)),
            "ratio/min": mmax(ratio, torch.min),
            "ratio/max": mmax(ratio, torch.max),
            "weight/mean": float(masked_mean(w, valid)),
            "weight/min": mmax(w, torch.min),
            "weight/max": mmax(w, torch.max),
            "kept_frac": float(masked_mean((w != 0).to(logprobs.dtype), valid)),
            "n_tokens": float(n),
        }
