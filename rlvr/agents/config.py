"""Typed configuration and default constants for the GRPO family (``rlvr.agents``).

The GRPO-SG paper does not publish tau, mu, alpha, L, U. The defaults below were chosen so that
the token-mean weight is 1.00 +/- 0.02 on the reference token distributions defined here (see
``reference_token_probs`` / ``reference_token_logits``) while the shaping stays visible; the
numbers are in each table's comment and in ``docs/algorithms.md``. Re-derive them with
``rlvr.agents.weights.calibrate_alpha`` on logged rollouts of your own model.

These dataclasses load with ``rlvr.config.load_config`` (YAML profiles + ``key=value`` overrides);
a ``None`` shaping field means "the default for this scheme and ``shaping_input``".
"""

from __future__ import annotations

import dataclasses
import math
from typing import Literal

import torch

ShapingInput = Literal["logit", "prob"]

#: GRPO-SG Eq. 20 ``w = clip(alpha * (sigmoid(h / tau) - mu), L, U)``, increasing in h.
#: prob  (h = p): w(1)=1.14, w(0.99)=1.14, w(0.9)=1.07, w(0.5)=0.69, w(0.1)=0.15, w(p<0.066)=L;
#:                token-mean 0.99 on ``reference_token_probs`` (1.11 on p > 0.9, 0.10 on p < 0.1).
#: logit (h = logit): w(30)=1.25, w(20)=1.05, w(10)=0.64, w(5)=0.34, w(h<=0.7)=L;
#:                token-mean 1.00 on ``reference_token_logits``; mean w is 1.01 on tokens with
#:                p > 0.9 and 0.85 on tokens with p < 0.1 (the logit mostly tracks the position's
#:                logit scale, not p, so logit shaping is weaker than prob shaping).
GRPO_SG_DEFAULTS: dict[str, dict[str, float]] = {
    "prob": {"alpha": 3.0, "tau": 0.5, "mu": 0.5, "lower": 0.1, "upper": 2.0},
    "logit": {"alpha": 2.75, "tau": 10.0, "mu": 0.5, "lower": 0.1, "upper": 2.0},
}

#: Reverse shaping ``w = clip(alpha * (sigmoid(-h / tau) - mu), L, U)``, decreasing in h; same
#: tau, L, U as GRPO-SG, mu = 0 and alpha re-solved so the token-mean weight matches (~1).
#: prob:  w(1)=0.76, w(0.9)=0.91, w(0.5)=1.72, w(p<=0.37)=U;  token-mean 0.99.
#: logit: w(30)=0.35, w(20)=0.86, w(10)=1.95, w(h<=9.6)=U;    token-mean 0.99.
REVERSE_DEFAULTS: dict[str, dict[str, float]] = {
    "prob": {"alpha": 6.4, "tau": 0.5, "mu": 0.0, "lower": 0.1, "upper": 2.0},
    "logit": {"alpha": 7.25, "tau": 10.0, "mu": 0.0, "lower": 0.1, "upper": 2.0},
}

#: AR (Yang et al. 2025, "Do Not Let Low-Probability Tokens Over-Dominate"): alpha 0.3 on K&K,
#: 0.1 on math (their recipes).
AR_ALPHA_KK = 0.3
AR_ALPHA_MATH = 0.1
#: Lopti threshold eta (same paper).
LOPTI_ETA = 0.5
#: 80/20 ("Beyond the 80/20 Rule", Wang et al. 2025): keep the top 20 % entropy tokens.
ENTROPY_TOP_FRACTION = 0.2


def shaping_defaults(scheme: str, shaping_input: str) -> dict[str, float]:
    """The default ``alpha, tau, mu, lower, upper`` of ``grpo_sg`` or ``reverse`` for an input."""
    table = {"grpo_sg": GRPO_SG_DEFAULTS, "reverse": REVERSE_DEFAULTS}.get(scheme)
    if table is None:
        raise ValueError(f"scheme: {scheme!r} has no shaping defaults (grpo_sg, reverse)")
    if shaping_input not in table:
        raise ValueError(f"shaping_input: {shaping_input!r} is not one of {sorted(table)}")
    return dict(table[shaping_input])


def reference_token_probs(n: int = 100_000, seed: int = 0) -> torch.Tensor:
    """Sampled-token probabilities shaped like an RL rollout of an instruct model.

    A mixture (our assumption, stated so the defaults can be re-derived): 80 % of tokens with
    p ~ U(0.9, 1), 10 % with p ~ U(0.5, 0.9), 10 % log-uniform on [1e-3, 0.5] (the low-p tail).
    """
    g = torch.Generator().manual_seed(seed)
    u = torch.rand(n, generator=g, dtype=torch.float64)
    pick = torch.rand(n, generator=g, dtype=torch.float64)
    tail = torch.exp(math.log(1e-3) + u * (math.log(0.5) - math.log(1e-3)))
    p = torch.where(pick < 0.8, 0.9 + 0.1 * u, torch.where(pick < 0.9, 0.5 + 0.4 * u, tail))
    return p


def reference_token_logits(n: int = 100_000, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """``(logits, probs)`` of sampled tokens: ``h = c + log p`` with ``p`` from
    ``reference_token_probs`` and ``c ~ U(10, 30)`` the position's log-partition (about the top
    logit). The range of c is an assumption about instruct-LLM logit scales, not a measurement.
    """
    p = reference_token_probs(n, seed)
    g = torch.Generator().manual_seed(seed + 1)
    c = 10.0 + 20.0 * torch.rand(n, generator=g, dtype=torch.float64)
    return c + torch.log(p), p


@dataclasses.dataclass
class WeightConfig:
    """Parameters of the token weights and selections (``rlvr.agents.weights``), for every
    algorithm; each algorithm reads its own (``Algorithm.params``).

    Shaping fields left ``None`` take ``GRPO_SG_DEFAULTS`` / ``REVERSE_DEFAULTS`` for the chosen
    ``shaping_input``. ``shaping_input`` defaults to ``prob`` (the TR-GRPO form) because it is
    scale-free; ``logit`` is the GRPO-SG Eq. 20 form (the raw logit, ``docs/algorithms.md``) and
    its defaults assume logits of magnitude 10-30 (calibrate with ``calibrate_alpha``).
    ``extra`` holds the parameters of algorithms registered outside this table.
    """

    shaping_input: ShapingInput = "prob"
    alpha: float | None = None
    tau: float | None = None
    mu: float | None = None
    lower: float | None = None
    upper: float | None = None
    ar_alpha: float = AR_ALPHA_KK
    fraction: float = ENTROPY_TOP_FRACTION
    eta: float = LOPTI_ETA
    extra: dict[str, float] = dataclasses.field(default_factory=dict)

    def params(self, algo: str) -> dict:
        """Keyword parameters algorithm ``algo`` passes to its weight / selection / stages."""
        from rlvr.agents.algorithms import get_algorithm

        return get_algorithm(algo).params(self)


@dataclasses.dataclass
class LossConfig:
    """Arguments of ``rlvr.agents.losses.policy_loss`` (K&K recipe values in docs/design.md §6:
    clip 0.2/0.24 is the recipe's asymmetric clip; defaults here are the symmetric 0.2)."""

    clip_low: float = 0.2
    clip_high: float = 0.2
    dual_clip: float | None = None
    kl_coef: float = 0.0
    agg: Literal[
        "token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"
    ] = "token-mean"
    loss_scale_factor: float | None = None
    weight_position: Literal["surrogate", "ratio"] = "surrogate"
    advantage: Literal["grpo", "drgrpo"] = "grpo"
    adv_eps: float = 1e-6

    def policy_loss_kwargs(self) -> dict:
        """Keyword arguments for ``policy_loss`` (everything but the tensors)."""
        return {
            "clip_low": self.clip_low,
            "clip_high": self.clip_high,
            "dual_clip": self.dual_clip,
            "kl_coef": self.kl_coef,
            "agg": self.agg,
            "loss_scale_factor": self.loss_scale_factor,
            "weight_position": self.weight_position,
        }
