"""Per-token weights of the GRPO family: pure functions of detached per-token quantities.

Every scheme maps per-token tensors ``[B, T]`` to a weight ``w`` of the same shape that multiplies
the clipped surrogate (``rlvr.agents.losses.policy_loss``). Weights never carry gradient: each
scheme computes under ``torch.no_grad`` from detached inputs, the ``sg[.]`` of GRPO-SG Eq. 20.
Masked positions (``mask == 0``) always get weight 0 (the loss masks them anyway).

Schemes (``WEIGHT_SCHEMES``; add one with ``@register_weight_scheme("name")``):

- ``grpo``: ``w = 1`` (GRPO, Shao et al. 2024).
- ``grpo_sg``: ``w = clip(alpha * (sigmoid(sg[h] / tau) - mu), L, U)``, GRPO-SG Eq. 20, with
  ``h`` the sampled token's logit (``shaping_input="logit"``, GRPO-SG) or its probability
  ``p = exp(logprob)`` (``shaping_input="prob"``, the TR-GRPO form). Increasing in ``h``: confident
  tokens weigh more, low-probability tokens (which carry the largest gradients) less.
- ``reverse``: ``w = clip(alpha * (sigmoid(-sg[h] / tau) - mu), L, U)``: the same shaping with the
  input negated, hence decreasing in ``h``; its defaults (mu = 0, alpha re-solved) give the same
  token-mean weight (~1) as ``grpo_sg``.
- ``ar``: Advantage Reweighting, Yang et al. 2025 ("Do Not Let Low-Probability Tokens
  Over-Dominate in RL for LLMs"): ``A_t = [alpha * pi_old(o_t) + (1 - alpha)] * A``. The factor is
  positive, so as a weight on the surrogate it equals reweighting the advantage.
- ``entropy_top``: 80/20, Wang et al. 2025 ("Beyond the 80/20 Rule"): a 0/1 mask keeping the
  ``ceil(fraction * n)`` highest-entropy response tokens of the batch (n = valid tokens).

Lopti (same paper as AR) is not a weight but a split of the tokens into two optimizer steps:
``lopti_masks`` and ``lopti_stages``.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable

import torch

from rlvr.agents.config import (
    AR_ALPHA_KK,
    ENTROPY_TOP_FRACTION,
    LOPTI_ETA,
    shaping_defaults,
)

WeightFn = Callable[..., torch.Tensor]
WEIGHT_SCHEMES: dict[str, WeightFn] = {}
_INPUTS = ("logprobs", "mask", "logits", "old_logprobs", "entropy")


def register_weight_scheme(name: str) -> Callable[[WeightFn], WeightFn]:
    """Register ``fn(*, logprobs, mask, logits, old_logprobs, entropy, **params) -> w`` as
    ``name``."""

    def decorator(fn: WeightFn) -> WeightFn:
        if name in WEIGHT_SCHEMES and WEIGHT_SCHEMES[name] is not fn:
            raise ValueError(f"scheme: {name!r} is already registered")
        WEIGHT_SCHEMES[name] = fn
        return fn

    return decorator


def token_weights(
    scheme: str,
    *,
    logprobs: torch.Tensor,
    mask: torch.Tensor,
    logits: torch.Tensor | None = None,
    old_logprobs: torch.Tensor | None = None,
    entropy: torch.Tensor | None = None,
    **params,
) -> torch.Tensor:
    """Detached token weights ``[B, T]`` (same shape/dtype as ``logprobs``) for ``scheme``.

    ``logits`` is the sampled token's logit ``[B, T]`` (gathered, after any temperature scaling
    the log-probs used), only needed by ``shaping_input="logit"``. Unknown schemes or parameters
    raise ``ValueError`` naming them.
    """
    fn = WEIGHT_SCHEMES.get(scheme)
    if fn is None:
        raise ValueError(
            f"scheme: unknown weight scheme {scheme!r}; known: {sorted(WEIGHT_SCHEMES)}"
        )
    accepted = {
        p.name for p in inspect.signature(fn).parameters.values() if p.kind is p.KEYWORD_ONLY
    } - set(_INPUTS)
    for key in params:
        if key not in accepted:
            raise ValueError(
                f"{key}: not a parameter of weight scheme {scheme!r} (takes {sorted(accepted)})"
            )
    if mask.shape != logprobs.shape:
        raise ValueError(
            f"mask: shape {tuple(mask.shape)} != logprobs shape {tuple(logprobs.shape)}"
        )
    with torch.no_grad():
        valid = mask.to(dtype=torch.bool)
        w = fn(
            logprobs=logprobs.detach(),
            mask=valid,
            logits=None if logits is None else logits.detach(),
            old_logprobs=None if old_logprobs is None else old_logprobs.detach(),
            entropy=None if entropy is None else entropy.detach(),
            **params,
        )
        w = torch.where(
            valid,
            w.to(logprobs.dtype),
            torch.zeros((), dtype=logprobs.dtype, device=logprobs.device),
        )
    return w.detach()


def _require(
    name: str, value: torch.Tensor | None, like: torch.Tensor, scheme: str
) -> torch.Tensor:
    if value is None:
        raise ValueError(f"{name}: weight scheme {scheme!r} needs {name}")
    if value.shape != like.shape:
        raise ValueError(
            f"{name}: shape {tuple(value.shape)} != logprobs shape {tuple(like.shape)}"
        )
    return value


def check_shaping(*, alpha: float, tau: float, mu: float, lower: float, upper: float) -> None:
    """Validate GRPO-SG / reverse shaping parameters (ValueError naming the bad one)."""
    for name, value in (
        ("alpha", alpha),
        ("tau", tau),
        ("mu", mu),
        ("lower", lower),
        ("upper", upper),
    ):
        if not math.isfinite(float(value)):
            raise ValueError(f"{name}: must be finite, got {value!r}")
    if tau <= 0:
        raise ValueError(f"tau: must be > 0, got {tau!r}")
    if alpha <= 0:
        raise ValueError(f"alpha: must be > 0 (else the shaping flips direction), got {alpha!r}")
    if lower < 0:
        raise ValueError(f"lower: must be >= 0 (a negative weight flips the update), got {lower!r}")
    if lower > upper:
        raise ValueError(f"lower: L={lower!r} must be <= upper U={upper!r}")


def sigmoid_shaping(
    h: torch.Tensor,
    *,
    alpha: float,
    tau: float,
    mu: float,
    lower: float,
    upper: float,
    sign: float = 1.0,
) -> torch.Tensor:
    """``clip(alpha * (sigmoid(sign * h / tau) - mu), L, U)`` (GRPO-SG Eq. 20 for sign=+1)."""
    return (alpha * (torch.sigmoid(sign * h / tau) - mu)).clamp(min=lower, max=upper)


def _shaping_input(scheme, shaping_input, logprobs, logits) -> torch.Tensor:
    if shaping_input == "prob":
        return logprobs.exp()
    if shaping_input == "logit":
        return _require("logits", logits, logprobs, scheme)
    raise ValueError(f"shaping_input: {shaping_input!r} is not one of ['logit', 'prob']")


def _shaped(scheme: str, sign: float, logprobs, logits, shaping_input, params) -> torch.Tensor:
    if shaping_input not in ("logit", "prob"):
        raise ValueError(f"shaping_input: {shaping_input!r} is not one of ['logit', 'prob']")
    cfg = shaping_defaults(scheme, shaping_input)
    cfg.update({k: v for k, v in params.items() if v is not None})
    check_shaping(**cfg)
    h = _shaping_input(scheme, shaping_input, logprobs, logits)
    return sigmoid_shaping(h, sign=sign, **cfg)


@register_weight_scheme("grpo")
def grpo_weights(*, logprobs, mask, logits=None, old_logprobs=None, entropy=None) -> torch.Tensor:
    """GRPO: every response token weighs 1."""
    return torch.ones_like(logprobs)


@register_weight_scheme("grpo_sg")
def grpo_sg_weights(
    *,
    logprobs,
    mask,
    logits=None,
    old_logprobs=None,
    entropy=None,
    alpha: float | None = None,
    tau: float | None = None,
    mu: float | None = None,
    lower: float | None = None,
    upper: float | None = None,
    shaping_input: str = "prob",
) -> torch.Tensor:
    """GRPO-SG Eq. 20: ``w_{i,t} = clip(alpha * (sigmoid(sg[h_{i,t}] / tau) - mu), L, U)``.

    ``h`` is the sampled token's logit (``shaping_input="logit"``, GRPO-SG) or its probability
    ``pi_theta(o_t)`` (``"prob"``, TR-GRPO). ``None`` parameters take
    ``rlvr.agents.config.GRPO_SG_DEFAULTS[shaping_input]``; prob: alpha 3, tau 0.5, mu 0.5,
    L 0.1, U 2, which give w(1)=1.14, w(0.9)=1.07, w(0.5)=0.69, w(0.1)=0.15 and token-mean 0.99 on
    ``reference_token_probs`` (80 % p>0.9, 10 % 0.5-0.9, 10 % low tail); logit: alpha 2.75,
    tau 10, mu 0.5, L 0.1, U 2, token-mean 1.00 on ``reference_token_logits`` (logits 10-30).
    """
    params = {"alpha": alpha, "tau": tau, "mu": mu, "lower": lower, "upper": upper}
    return _shaped("grpo_sg", 1.0, logprobs, logits, shaping_input, params)


@register_weight_scheme("reverse")
def reverse_weights(
    *,
    logprobs,
    mask,
    logits=None,
    old_logprobs=None,
    entropy=None,
    alpha: float | None = None,
    tau: float | None = None,
    mu: float | None = None,
    lower: float | None = None,
    upper: float | None = None,
    shaping_input: str = "prob",
) -> torch.Tensor:
    """Reverse shaping: ``w = clip(alpha * (sigmoid(-sg[h] / tau) - mu), L, U)``, monotone
    decreasing.

    Exactly GRPO-SG Eq. 20 applied to ``-h``; emphasises low-probability tokens. Defaults
    (``REVERSE_DEFAULTS``) keep tau, L, U of ``grpo_sg``, set mu = 0 and re-solve alpha so the
    token-mean weight on the reference distributions matches (prob: alpha 6.4 -> w(1)=0.76,
    w(0.9)=0.91, w(0.5)=1.72, w(p<=0.37)=U=2, mean 0.99; logit: alpha 7.25, mean 0.99).
    """
    params = {"alpha": alpha, "tau": tau, "mu": mu, "lower": lower, "upper": upper}
    return _shaped("reverse", -1.0, logprobs, logits, shaping_input, params)


@register_weight_scheme("ar")
def ar_weights(
    *, logprobs, mask, logits=None, old_logprobs=None, entropy=None, alpha: float = AR_ALPHA_KK
):
    """Advantage Reweighting (Yang et al. 2025): ``A_t = [alpha * pi_old(o_t) + 1 - alpha] * A``.

    Returned as the weight ``alpha * pi_old(o_t) + 1 - alpha`` in ``[1 - alpha, 1]``;
    ``pi_old = exp(old_logprobs)``. alpha 0.3 (K&K) / 0.1 (math) in the paper's recipes.
    """
    if not (0.0 <= alpha <= 1.0):
        raise ValueError(f"alpha: AR needs 0 <= alpha <= 1, got {alpha!r}")
    old = _require("old_logprobs", old_logprobs, logprobs, "ar")
    return alpha * old.exp() + (1.0 - alpha)


def _check_fraction(fraction: float) -> None:
    if not (0.0 < fraction <= 1.0):
        raise ValueError(f"fraction: must be in (0, 1], got {fraction!r}")


def n_kept(fraction: float, n_valid: int) -> int:
    """``ceil(fraction * n_valid)``, robust to float noise (``0.2 * 15`` is 3.0000000000000004)."""
    return min(n_valid, math.ceil(round(fraction * n_valid, 9)))


@register_weight_scheme("entropy_top")
def entropy_top_weights(
    *,
    logprobs,
    mask,
    logits=None,
    old_logprobs=None,
    entropy=None,
    fraction: float = ENTROPY_TOP_FRACTION,
):
    """80/20 (Wang et al. 2025, "Beyond the 80/20 Rule"): keep the top-``fraction`` entropy tokens.

    ``I[H_t >= tau_rho]`` with ``tau_rho`` the batch's (1 - rho) entropy quantile, implemented as
    exactly ``k = ceil(fraction * n_valid)`` tokens (ties broken by ``torch.topk``) over all valid
    tokens of the tensors passed, so call it on the whole mini-batch, not per micro-batch.
    ``entropy`` is the per-position entropy of the policy's next-token distribution.
    """
    _check_fraction(fraction)
    ent = _require("entropy", entropy, logprobs, "entropy_top")
    flat_valid = mask.reshape(-1)
    n_valid = int(flat_valid.sum())
    keep = torch.zeros(flat_valid.shape, dtype=logprobs.dtype, device=logprobs.device)
    if n_valid == 0:
        return keep.reshape(logprobs.shape)
    k = n_kept(fraction, n_valid)
    scores = ent.reshape(-1).to(torch.float64).masked_fill(~flat_valid, -math.inf)
    top = torch.topk(scores, k).indices
    keep[top] = 1.0
    return keep.reshape(logprobs.shape)


def _check_eta(eta: float) -> None:
    if not (0.0 < eta < 1.0):
        raise ValueError(f"eta: must be in (0, 1), got {eta!r}")


def lopti_masks(
    old_logprobs: torch.Tensor, mask: torch.Tensor, eta: float = LOPTI_ETA
) -> tuple[torch.Tensor, torch.Tensor]:
    """Lopti (Yang et al. 2025): ``(low_mask, high_mask)`` with ``low = mask & (pi_old < eta)``,
    ``high = mask & (pi_old >= eta)``; they partition the response tokens. Float masks shaped like
    ``old_logprobs``.
    """
    _check_eta(eta)
    if mask.shape != old_logprobs.shape:
        raise ValueError(
            f"mask: shape {tuple(mask.shape)} != old_logprobs shape {tuple(old_logprobs.shape)}"
        )
    with torch.no_grad():
        valid = mask.to(torch.bool)
        low = valid & (old_logprobs.detach().exp() < eta)
        high = valid & ~low
    return low.to(old_logprobs.dtype), high.to(old_logprobs.dtype)


def lopti_stages(
    old_logprobs: torch.Tensor,
    mask: torch.Tensor,
    eta: float = LOPTI_ETA,
    *,
    drop_empty: bool = True,
) -> list[tuple[str, torch.Tensor]]:
    """The ordered Lopti updates for one mini-batch: ``[("low", low_mask), ("high", high_mask)]``.

    The trainer runs one optimizer step per entry, in this order, recomputing the current
    log-probs before the second: first the low-probability tokens (``pi_old < eta``), then the
    rest. The AR-Lopti paper reports that the reverse order (high first) collapses training.
    ``drop_empty`` omits a stage with no tokens, since an optimizer step on a zero gradient still
    moves AdamW's moments and applies weight decay.
    """
    low, high = lopti_masks(old_logprobs, mask, eta)
    stages = [("low", low), ("high", high)]
    if drop_empty:
        stages = [(name, m) for name, m in stages if bool(m.sum() > 0)]
    return stages


def calibrate_alpha(
    h: torch.Tensor,
    *,
    tau: float,
    mu: float,
    lower: float,
    upper: float,
    sign: float = 1.0,
    target: float = 1.0,
    mask: torch.Tensor | None = None,
) -> float:
    """The alpha making the (masked) mean of ``sigmoid_shaping(h)`` equal ``target``, by bisection.

    Use it on logged sampled-token logits (or probs) of the model being trained to re-derive the
    unpublished alpha; the mean weight is nondecreasing in alpha, between ``lower`` and ``upper``.
    """
    check_shaping(alpha=1.0, tau=tau, mu=mu, lower=lower, upper=upper)
    if not (lower < target < upper):
        raise ValueError(
            f"target: must lie strictly between lower={lower} and upper={upper}, got {target}"
        )
    h = h.detach().to(torch.float64)
    if mask is not None:
        h = h[mask.to(torch.bool)]
    if h.numel() == 0:
        raise ValueError("h: no valid entries to calibrate on")

    def mean_w(alpha: float) -> float:
        return float(
            sigmoid_shaping(
                h, alpha=alpha, tau=tau, mu=mu, lower=lower, upper=upper, sign=sign
            ).mean()
        )

    lo, hi = 1e-6, 1.0
    while mean_w(hi) < target:
        hi *= 2.0
        if hi > 1e9:
            raise ValueError(
                "h: the mean weight cannot reach target (sigmoid(h/tau) <= mu everywhere)"
            )
    for _ in range(100):
        mid = 0.5 * (lo + hi)
        if mean_w(mid) < target:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)
