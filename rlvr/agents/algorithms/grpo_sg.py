"""GRPO-SG (arXiv 2511.00066, Eq. 20): ``w = clip(alpha * (sigmoid(sg[h] / tau) - mu), L, U)``.

``h`` is the sampled token's raw logit under the current policy (``shaping_input="logit"``,
GRPO-SG) or its probability ``p = exp(logprob)`` (``"prob"``, the TR-GRPO version). Increasing in
``h``: confident tokens weigh more, low-probability tokens (which carry the largest gradients)
less. Everything of the method is here: the weight, its defaults and their derivation, the
checks, the calibration of alpha; ``reverse.py`` applies the same shaping to ``-h``.

The paper does not publish tau, mu, alpha, L, U. The defaults below were chosen so that the
token-mean weight is 1.00 +/- 0.02 on the reference token distributions defined here
(``reference_token_probs`` / ``reference_token_logits``) while the shaping stays visible; the
numbers are in each table's comment and in ``docs/algorithms.md``. Re-derive them with
``calibrate_alpha`` on logged rollouts of your own model. A ``None`` shaping field of
``WeightConfig`` means "the default for this method and ``shaping_input``".
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Literal, Optional

if TYPE_CHECKING:
    import torch

from rlvr.agents.algorithms.base import Algorithm, Param, register_algorithm, require

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
SHAPING_INPUTS = ("logit", "prob")

#: The ``WeightConfig`` fields of the shaping (shared with ``reverse``). ``shaping_input``
#: defaults to ``prob`` (the TR-GRPO form) because it is scale-free; ``logit`` is the GRPO-SG
#: Eq. 20 form (the raw logit, ``docs/algorithms.md``) and its defaults assume logits of
#: magnitude 10-30 (calibrate with ``calibrate_alpha``). tau, alpha > 0 (alpha <= 0 flips the
#: shaping); L >= 0 (a negative weight flips the update); every value finite.
SHAPING_FIELDS = (
    Param("shaping_input", "prob", Literal["logit", "prob"]),
    Param("alpha", None, Optional[float], "(0, inf)"),
    Param("tau", None, Optional[float], "(0, inf)"),
    Param("mu", None, Optional[float], "(-inf, inf)"),
    Param("lower", None, Optional[float], "[0, inf)"),
    Param("upper", None, Optional[float], "(-inf, inf)"),
)
_SHAPING = {p.name: p for p in SHAPING_FIELDS[1:]}


def reference_token_probs(n: int = 100_000, seed: int = 0) -> torch.Tensor:
    """Sampled-token probabilities shaped like an RL rollout of an instruct model.

    A mixture (our assumption, stated so the defaults can be re-derived): 80 % of tokens with
    p ~ U(0.9, 1), 10 % with p ~ U(0.5, 0.9), 10 % log-uniform on [1e-3, 0.5] (the low-p tail).
    """
    import torch

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
    import torch

    p = reference_token_probs(n, seed)
    g = torch.Generator().manual_seed(seed + 1)
    c = 10.0 + 20.0 * torch.rand(n, generator=g, dtype=torch.float64)
    return c + torch.log(p), p


def check_shaping(params: Mapping[str, float]) -> None:
    """Each shaping parameter in its interval and ``L <= U`` (ValueError naming the bad one)."""
    for name, p in _SHAPING.items():
        p.check(params[name])
    if params["lower"] > params["upper"]:
        raise ValueError(f"lower: L={params['lower']!r} must be <= upper U={params['upper']!r}")


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
    import torch

    return (alpha * (torch.sigmoid(sign * h / tau) - mu)).clamp(min=lower, max=upper)


def resolve(defaults: Mapping[str, Mapping[str, float]], shaping_input: str, given) -> dict:
    """The shaping parameters: the ``defaults`` of ``shaping_input`` under the ``given`` ones
    that are set (not None), checked."""
    if shaping_input not in defaults:
        raise ValueError(f"shaping_input: {shaping_input!r} is not one of {sorted(defaults)}")
    out = dict(defaults[shaping_input])
    out.update({k: v for k, v in given.items() if v is not None})
    check_shaping(out)
    return out


def shaping_weights(name: str, defaults: Mapping[str, Mapping[str, float]], sign: float, doc: str):
    """The weight function of the sigmoid shaping of ``sign * h`` with ``h`` the probability
    (``shaping_input="prob"``) or the sampled token's logit (``"logit"``): GRPO-SG for ``+1``,
    Reverse for ``-1``; ``None`` parameters take ``defaults[shaping_input]``."""

    def weights(
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
        given = {"alpha": alpha, "tau": tau, "mu": mu, "lower": lower, "upper": upper}
        cfg = resolve(defaults, shaping_input, given)
        h = logprobs.exp() if shaping_input == "prob" else require("logits", logits, logprobs, name)
        return sigmoid_shaping(h, sign=sign, **cfg)

    weights.__name__ = weights.__qualname__ = f"{name}_weights"
    weights.__doc__ = doc
    return weights


grpo_sg_weights = shaping_weights(
    "grpo_sg",
    GRPO_SG_DEFAULTS,
    1.0,
    """GRPO-SG Eq. 20: ``w_{i,t} = clip(alpha * (sigmoid(sg[h_{i,t}] / tau) - mu), L, U)``.

    ``h`` is the sampled token's logit (``shaping_input="logit"``, GRPO-SG) or its probability
    ``pi_theta(o_t)`` (``"prob"``, TR-GRPO). ``None`` parameters take
    ``GRPO_SG_DEFAULTS[shaping_input]``; prob: alpha 3, tau 0.5, mu 0.5, L 0.1, U 2, which give
    w(1)=1.14, w(0.9)=1.07, w(0.5)=0.69, w(0.1)=0.15 and token-mean 0.99 on
    ``reference_token_probs`` (80 % p>0.9, 10 % 0.5-0.9, 10 % low tail); logit: alpha 2.75,
    tau 10, mu 0.5, L 0.1, U 2, token-mean 1.00 on ``reference_token_logits`` (logits 10-30).
    """,
)


def shaping_params(defaults: Mapping[str, Mapping[str, float]]):
    """``WeightConfig -> {alpha, tau, mu, lower, upper, shaping_input}``, unset fields taking
    ``defaults`` for the chosen ``shaping_input``."""

    def params(wc) -> dict:
        given = {n: None if getattr(wc, n) is None else float(getattr(wc, n)) for n in _SHAPING}
        return {**resolve(defaults, wc.shaping_input, given), "shaping_input": wc.shaping_input}

    return params


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
    import torch

    check_shaping({"alpha": 1.0, "tau": tau, "mu": mu, "lower": lower, "upper": upper})
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


def reads_logits(params: Mapping) -> bool:
    return params.get("shaping_input") == "logit"


GRPO_SG = register_algorithm(
    Algorithm(
        name="grpo_sg",
        label="GRPO-SG",
        color="#d62728",
        weight=grpo_sg_weights,
        fields=SHAPING_FIELDS,
        params=shaping_params(GRPO_SG_DEFAULTS),
        policy_loss=True,
        needs_logits=reads_logits,
        variants={"logit": {"weights.shaping_input": "logit"}},
        source="arXiv 2511.00066 Eq. 20 (TR-GRPO: the probability form)",
    )
)
