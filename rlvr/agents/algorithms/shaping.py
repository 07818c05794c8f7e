"""The sigmoid shaping of GRPO-SG Eq. 20 (arXiv 2511.00066), shared by ``grpo_sg``, ``tr_grpo``
and ``reverse``, and the rule that calibrates its parameters on the model's own first batch.

Eq. 20: ``w = clip(alpha * (sigmoid(sign * sg[h] / tau) - mu), L, U)``, ``sign = +1`` for GRPO-SG
and TR-GRPO (increasing in ``h``), ``-1`` for Reverse; ``h`` is the sampled token's raw logit
(GRPO-SG) or its probability (TR-GRPO). The paper publishes neither alpha, tau, mu nor L, U.

**The calibration rule** (``calibrate_shaping``; ``docs/algorithms.md``, "Calibration"). A
parameter whose value is ``CALIBRATED`` is set once, before the first optimizer step, from ``x``,
the values of ``h`` of the valid response tokens of the first batch under the current policy:

1. ``tau = q95(x) - q05(x)``: the spread of the model's own ``h``. The weights do not change when
   every logit is multiplied by a constant (a sharper or flatter model with the same ranking).
2. with ``s = sigmoid(sign * x / tau)``: ``mu = q_tail(s) - L / alpha`` puts the weight of the
   ``TAIL`` (5 %) of tokens with the least shaped value exactly at L: the low tail reaches the
   floor, whatever the model's logit offset;
3. ``alpha`` (bisection, the mean is nondecreasing in it) makes the token-mean weight of the batch
   ``TARGET`` = 1: the method is not GRPO times a constant, so a change of scale of the policy
   gradient (and of the KL term against it) is not what is compared.

A set parameter is kept: with ``tau`` set the rule does steps 2-3, with ``mu`` set only step 3
(``calibrate_alpha``), with ``alpha`` set ``mu`` alone makes the mean 1 (``solve_for``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Literal, Optional

import numpy as np

from rlvr.agents.algorithms.base import CALIBRATED, Param, require

if TYPE_CHECKING:  # the registry needs no torch to check a configuration (rlvr --help, errors)
    import torch

#: The shaping parameters (the ``WeightConfig`` fields of Eq. 20). ``shaping_input`` None takes
#: the method's own input (GRPO-SG and Reverse: the logit; TR-GRPO reads the probability only).
#: tau, alpha > 0 (alpha <= 0 flips the shaping); L >= 0 (a negative weight flips the update);
#: every value finite.
SHAPING_INPUT = Param("shaping_input", None, Optional[Literal["logit", "prob"]])
ALPHA = Param("alpha", None, Optional[float], "(0, inf)")
TAU = Param("tau", None, Optional[float], "(0, inf)")
MU = Param("mu", None, Optional[float], "(-inf, inf)")
LOWER = Param("lower", None, Optional[float], "[0, inf)")
UPPER = Param("upper", None, Optional[float], "(-inf, inf)")
NUMBERS = (ALPHA, TAU, MU, LOWER, UPPER)
SHAPING_FIELDS = (SHAPING_INPUT, *NUMBERS)
SHAPING_INPUTS = ("logit", "prob")
_NUMBERS = {p.name: p for p in NUMBERS}

#: Share of the calibration batch's tokens whose weight is the floor L (rule step 2).
TAIL = 0.05
#: ``tau`` is the distance between these quantiles of ``h`` (rule step 1).
SPREAD = (0.05, 0.95)
#: The token-mean weight the rule solves for (rule step 3).
TARGET = 1.0
#: What a run records of its calibration besides the values (``calibration_record``).
RULE = (
    f"tau = q{SPREAD[1] * 100:g}(h) - q{SPREAD[0] * 100:g}(h); weight of the lowest "
    f"{TAIL:.0%} at L; token-mean weight {TARGET:g} on the first batch"
)


def check_shaping(params: Mapping[str, object]) -> None:
    """Each set shaping parameter in its interval and ``L <= U`` (ValueError naming the bad one);
    ``CALIBRATED`` values pass (the rule sets them)."""
    for name, p in _NUMBERS.items():
        if params[name] != CALIBRATED:
            p.check(params[name])
    lower, upper = params["lower"], params["upper"]
    if CALIBRATED not in (lower, upper) and lower > upper:
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
    import torch

    return (alpha * (torch.sigmoid(sign * h / tau) - mu)).clamp(min=lower, max=upper)


def resolve(defaults: Mapping[str, Mapping[str, object]], shaping_input: str, given) -> dict:
    """The shaping parameters: the ``defaults`` of ``shaping_input`` under the ``given`` ones
    that are set (not None), checked (``CALIBRATED`` ones stay, for the rule)."""
    if shaping_input not in defaults:
        raise ValueError(f"shaping_input: {shaping_input!r} is not one of {sorted(defaults)}")
    out = dict(defaults[shaping_input])
    out.update({k: v for k, v in given.items() if v is not None})
    check_shaping(out)
    return out


def shaping_weights(
    name: str,
    defaults: Mapping[str, Mapping[str, object]],
    sign: float,
    doc: str,
    default_input: str,
):
    """The weight function of the sigmoid shaping of ``sign * h`` with ``h`` the probability
    (``shaping_input="prob"``) or the sampled token's logit (``"logit"``); ``None`` parameters
    take ``defaults[shaping_input]``, ``shaping_input`` None takes ``default_input``. A parameter
    still ``CALIBRATED`` is refused: the rule sets it before the first update."""

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
        shaping_input: str | None = None,
    ) -> torch.Tensor:
        given = {"alpha": alpha, "tau": tau, "mu": mu, "lower": lower, "upper": upper}
        shaping_input = shaping_input or default_input
        cfg = resolve(defaults, shaping_input, given)
        pending = [k for k, v in cfg.items() if v == CALIBRATED]
        if pending:
            raise ValueError(
                f"{pending[0]}: {name!r} sets {pending} from the first batch (calibrate_shaping, "
                "which the trainer runs before the first update); calibrate or give numbers"
            )
        h = logprobs.exp() if shaping_input == "prob" else require("logits", logits, logprobs, name)
        return sigmoid_shaping(h, sign=sign, **cfg)

    weights.__name__ = weights.__qualname__ = f"{name}_weights"
    weights.__doc__ = doc
    return weights


def shaping_params(
    defaults: Mapping[str, Mapping[str, object]], default_input: str, *, choose_input: bool = True
):
    """``WeightConfig -> {alpha, tau, mu, lower, upper, shaping_input}``, unset fields taking
    ``defaults`` for the chosen ``shaping_input`` (unset: ``default_input``). A method that
    shapes one input only (``choose_input=False``) reads ``default_input`` and returns no
    ``shaping_input``."""

    def params(wc) -> dict:
        given = {n: _number(getattr(wc, n)) for n in _NUMBERS}
        if not choose_input:
            return resolve(defaults, default_input, given)
        shaping_input = wc.shaping_input or default_input
        return {**resolve(defaults, shaping_input, given), "shaping_input": shaping_input}

    return params


def _number(value):
    """A set parameter as a float (``None`` and ``CALIBRATED`` as they are)."""
    return value if value is None or value == CALIBRATED else float(value)


def reads_logits(params: Mapping) -> bool:
    return params.get("shaping_input") == "logit"


# -- calibration -----------------------------------------------------------------------------------
def _bisect(mean_of: Callable[[float], float], lo: float, hi: float, target: float) -> float:
    """The ``x`` in ``[lo, hi]`` where the nondecreasing ``mean_of(x)`` crosses ``target``."""
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if mean_of(mid) < target:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def _grow(mean_of: Callable[[float], float], target: float, what: str) -> float:
    """An upper bracket ``hi >= 1`` with ``mean_of(hi) >= target`` (doubling)."""
    hi = 1.0
    while mean_of(hi) < target:
        hi *= 2.0
        if hi > 1e12:
            raise ValueError(f"{what}: the mean weight cannot reach {target:g}")
    return hi


def _check_target(lower: float, upper: float, target: float) -> None:
    if not (lower < target < upper):
        raise ValueError(
            f"target: must lie strictly between lower={lower} and upper={upper}, got {target}"
        )


def _valid(h: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    import torch

    h = h.detach().to(torch.float64)
    if mask is not None:
        h = h[mask.to(torch.bool)]
    h = h.reshape(-1).cpu()
    if h.numel() == 0:
        raise ValueError("h: no valid entries to calibrate on")
    if not bool(torch.isfinite(h).all()):
        raise ValueError("h: non-finite values in the calibration batch")
    return h


def solve_for(
    name: str,
    h: torch.Tensor,
    *,
    mask: torch.Tensor | None = None,
    sign: float = 1.0,
    target: float = TARGET,
    **known: float,
) -> float:
    """The ``alpha`` (or ``mu``) making the (masked) mean of ``sigmoid_shaping(h)`` equal
    ``target``, the other parameters ``known``, by bisection: the mean is nondecreasing in alpha
    and nonincreasing in mu (every weight reaches U at ``mu = min(s) - U / alpha`` and L at
    ``max(s) - L / alpha``, ``s = sigmoid(sign * h / tau)``)."""
    import torch

    check_shaping({"alpha": 1.0, "mu": 0.0, **known})
    lower, upper = known["lower"], known["upper"]
    _check_target(lower, upper, target)
    s = torch.sigmoid(sign * _valid(h, mask) / known["tau"])
    if name == "alpha":
        mu = known["mu"]

        def mean_alpha(alpha: float) -> float:
            return float((alpha * (s - mu)).clamp(min=lower, max=upper).mean())

        hi = _grow(mean_alpha, target, "h (sigmoid(h/tau) <= mu everywhere?)")
        return _bisect(mean_alpha, 1e-12, hi, target)
    alpha = known["alpha"]

    def mean_neg_mu(neg_mu: float) -> float:
        return float((alpha * (s + neg_mu)).clamp(min=lower, max=upper).mean())

    lo, hi = lower / alpha - float(s.max()), upper / alpha - float(s.min())
    return -_bisect(mean_neg_mu, lo, hi, target)


def calibrate_alpha(
    h: torch.Tensor,
    *,
    tau: float,
    mu: float,
    lower: float,
    upper: float,
    sign: float = 1.0,
    target: float = TARGET,
    mask: torch.Tensor | None = None,
) -> float:
    """The alpha making the (masked) mean of ``sigmoid_shaping(h)`` equal ``target``
    (``solve_for``)."""
    known = {"tau": tau, "mu": mu, "lower": lower, "upper": upper}
    return solve_for("alpha", h, mask=mask, sign=sign, target=target, **known)


def calibrate_shaping(
    h: torch.Tensor,
    mask: torch.Tensor | None,
    params: Mapping[str, object],
    *,
    sign: float = 1.0,
    tail: float = TAIL,
    target: float = TARGET,
) -> dict:
    """``params`` with every ``CALIBRATED`` one of alpha, tau, mu set by the rule of the module
    docstring from ``h`` (the first batch's sampled-token logits or probabilities) on ``mask``.
    ``ValueError`` when the batch cannot satisfy it (no spread, a mean of 1 out of reach)."""
    import torch

    out = dict(params)
    lower, upper = float(out["lower"]), float(out["upper"])
    _check_target(lower, upper, target)
    x = _valid(h, mask)
    if out["tau"] == CALIBRATED:
        q_low, q_high = np.quantile(x.numpy(), SPREAD)
        out["tau"] = float(q_high - q_low)
        if not (out["tau"] > 0 and math.isfinite(out["tau"])):
            raise ValueError(
                f"tau: the first batch's {x.numel()} sampled-token values have no spread "
                f"(q{SPREAD[1] * 100:g} - q{SPREAD[0] * 100:g} = {out['tau']:g}); set weights.tau"
            )
    tau = float(out["tau"])
    free = {k for k in ("alpha", "mu") if out[k] == CALIBRATED}
    if free == {"alpha", "mu"}:
        s = torch.sigmoid(sign * x / tau)
        s_tail = float(np.quantile(s.numpy(), tail))
        rise = s - s_tail  # w = alpha * rise + L on the tokens above the tail

        def mean_w(alpha: float) -> float:
            return float((alpha * rise + lower).clamp(min=lower, max=upper).mean())

        best = float(((rise > 0) * upper + (rise <= 0) * lower).to(torch.float64).mean())
        if best <= target:
            raise ValueError(
                f"alpha: with {tail:.0%} of the tokens at L={lower:g} the mean weight is at most "
                f"{best:.3f} < {target:g} (too many equal values of h); set weights.alpha"
            )
        out["alpha"] = _bisect(mean_w, 0.0, _grow(mean_w, target, "alpha"), target)
        out["mu"] = s_tail - lower / out["alpha"]
    elif free:
        (name,) = free
        known = {k: float(out[k]) for k in ("alpha", "tau", "mu", "lower", "upper") if k != name}
        out[name] = solve_for(name, x, sign=sign, target=target, **known)
    check_shaping(out)
    return out


def calibration_record(
    h: torch.Tensor, mask: torch.Tensor | None, params: Mapping[str, object], sign: float
) -> dict:
    """What a run records of its calibration batch besides the values: the rule, the tokens, the
    quantiles of ``h`` and the resulting weights' mean and shares at L and U."""
    import torch

    x = _valid(h, mask)
    numbers = {k: float(params[k]) for k in _NUMBERS}
    w = sigmoid_shaping(x, sign=sign, **numbers)
    q = np.quantile(x.numpy(), (0.05, 0.5, 0.95))
    return {
        "rule": RULE,
        "tokens": int(x.numel()),
        "h_q05": float(q[0]),
        "h_q50": float(q[1]),
        "h_q95": float(q[2]),
        "weight_mean": float(w.mean()),
        "at_lower": float((w <= numbers["lower"]).to(torch.float64).mean()),
        "at_upper": float((w >= numbers["upper"]).to(torch.float64).mean()),
    }


def shaping_calibration(sign: float):
    """The ``Algorithm.calibrate`` of a shaping method: ``(params, *, logprobs, logits, mask) ->
    (params with numbers, record)``; ``h`` is the logit or the probability as the method reads."""

    def calibrate(params, *, logprobs, logits, mask):
        if reads_logits(params):
            h = require("logits", logits, logprobs, "calibration")
        else:
            h = logprobs.detach().exp()
        out = calibrate_shaping(h, mask, params, sign=sign)
        record = calibration_record(h, mask, out, sign)
        record["values"] = {k: out[k] for k, v in params.items() if v == CALIBRATED}
        return out, record

    return calibrate


__all__ = [
    "SHAPING_FIELDS",
    "SHAPING_INPUTS",
    "TAIL",
    "TARGET",
    "calibrate_alpha",
    "calibrate_shaping",
    "calibration_record",
    "check_shaping",
    "reads_logits",
    "resolve",
    "shaping_calibration",
    "shaping_params",
    "shaping_weights",
    "sigmoid_shaping",
    "solve_for",
]
