"""Precision of a result drawn over bases x RL seeds x items: variance components, standard error,
minimum detectable effect, the design that reaches a target interval, and the prediction interval
of one new draw.

A paired difference (or a single method's score) ``d[u, i]`` of run ``u`` (one RL seed on one base
build) on item ``i`` is modelled as

    d[u, i] = mu + base[b(u)] + seed[u] + item[i] + resid[u, i],

with variances ``s2_base``, ``s2_seed`` (seeds within a base), ``s2_item`` (what the item adds,
common to every run since the items are crossed with the runs) and ``s2_resid``. The mean over
``B`` bases x ``S`` seeds on each x ``n`` items has the variance of a balanced random-effects mean
(Searle, Casella & McCulloch 1992, *Variance Components*, ch. 4 for the crossed and ch. 3 for the
nested factor):

    Var = s2_base / B + s2_seed / (B S) + s2_item / n + s2_resid / (B S n).

The components are estimated by the ANOVA method of moments on the (runs x items) matrix: the
two-way table without replication gives ``s2_resid`` (residual mean square) and ``s2_item``
((item mean square - residual) / runs); the runs' means, grouped by base, give ``s2_seed``
(within-base mean square less ``s2_resid / n``) and ``s2_base`` ((between - within) / n0, n0 the
unbalanced group size of Searle et al. ch. 3). Negative estimates are set to 0, which biases a
near-zero component upward (the safe side). With one seed per base the seed variance cannot be
told from the base variance: both are counted as base (more seeds are then predicted not to
help, the safe side for sizing).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from statistics import NormalDist
from typing import Any

import numpy as np

from rlvr.eval.stats import Interval

#: Power of the minimum detectable effect (the usual 80%, Cohen 1988 §2.4).
POWER = 0.8


@dataclass(frozen=True)
class Components:
    """Variance components of one result (module docstring); ``nan`` where unmeasured."""

    base: float
    seed: float
    item: float
    resid: float
    #: How they were measured, and what could not be separated.
    note: str = ""

    def variance(self, bases: float, seeds: float = 1, items: float = 1) -> float:
        """Variance of the mean over ``bases`` x ``seeds`` per base x ``items``."""
        runs = bases * seeds
        return (
            self.base / bases + self.seed / runs + self.item / items + self.resid / (runs * items)
        )

    def se(self, bases: float, seeds: float = 1, items: float = 1) -> float:
        return math.sqrt(self.variance(bases, seeds, items))

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def z_quantile(p: float) -> float:
    """The standard normal quantile (``statistics.NormalDist``, exact to double precision)."""
    return NormalDist().inv_cdf(p)


def t_cdf_central(t: float, df: int) -> float:
    """``P(-t < T < t)`` for Student's t with integer ``df`` (Abramowitz & Stegun 1964,
    26.7.3 for odd and 26.7.4 for even degrees of freedom: finite sums in ``theta = atan(t /
    sqrt(df))``)."""
    if df < 1 or int(df) != df:
        raise ValueError(f"t_cdf_central: df={df} must be a positive integer")
    theta = math.atan(abs(t) / math.sqrt(df))
    s, c2 = math.sin(theta), math.cos(theta) ** 2
    if df % 2 == 0:
        term, total = 1.0, 1.0
        for k in range(2, df, 2):  # 1, (1/2)c2, (1*3)/(2*4)c2^2, ...
            term *= c2 * (k - 1) / k
            total += term
        return s * total
    if df == 1:
        return 2 * theta / math.pi
    term = math.cos(theta)
    total = term
    for k in range(3, df, 2):  # cos + (2/3)cos^3 + (2*4)/(3*5)cos^5 + ...
        term *= c2 * (k - 1) / k
        total += term
    return 2 / math.pi * (theta + s * total)


def t_quantile(p: float, df: int) -> float:
    """The ``p`` quantile of Student's t with integer ``df``, by bisection on ``t_cdf_central``."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"t_quantile: p={p} must lie in (0, 1)")
    if p < 0.5:
        return -t_quantile(1 - p, df)
    target = 2 * p - 1  # P(-t < T < t)
    lo, hi = 0.0, math.pi / 2  # bisect on theta: t = sqrt(df) tan(theta) is monotone
    for _ in range(200):
        mid = (lo + hi) / 2
        if t_cdf_central(math.sqrt(df) * math.tan(mid), df) < target:
            lo = mid
        else:
            hi = mid
    return math.sqrt(df) * math.tan((lo + hi) / 2)


def estimate_components(values: Any, bases: Sequence[Any]) -> Components:
    """Variance components (module docstring) of ``values[u, i]`` (runs x items; a 1-D array is
    one value per run) whose run ``u`` started from base ``bases[u]``."""
    arr = np.asarray(values, dtype=float)
    arr = arr[:, None] if arr.ndim == 1 else arr
    if arr.ndim != 2 or arr.size == 0 or not np.all(np.isfinite(arr)):
        raise ValueError("estimate_components: values must be a finite (runs, items) array")
    if len(bases) != arr.shape[0]:
        raise ValueError(f"estimate_components: {len(bases)} base labels for {arr.shape[0]} runs")
    n_runs, n_items = arr.shape
    notes = []
    row = arr.mean(axis=1)
    if n_items > 1 and n_runs > 1:
        col, grand = arr.mean(axis=0), arr.mean()
        resid = float(
            ((arr - row[:, None] - col[None, :] + grand) ** 2).sum()
            / ((n_runs - 1) * (n_items - 1))
        )
        ms_item = n_runs * float(((col - grand) ** 2).sum()) / (n_items - 1)
        item = max(0.0, (ms_item - resid) / n_runs)
    elif n_items > 1:  # one run: what the item adds cannot be told from the residual
        item, resid = float(arr[0].var(ddof=1)), 0.0
        notes.append("one run: item and residual variance counted together as item")
    else:
        item = resid = 0.0
    labels = list(dict.fromkeys(bases))
    groups = [row[[u for u, b in enumerate(bases) if b == g]] for g in labels]
    k = np.array([g.size for g in groups], dtype=float)
    if n_runs < 2:
        return Components(math.nan, math.nan, item, resid, "one run: no spread across runs")
    if len(labels) == n_runs:  # one seed per base
        base = max(0.0, float(row.var(ddof=1)) - resid / n_items)
        seed = 0.0
        notes.append("one RL seed per base: the seed variance is counted in the base variance")
    else:
        within = sum(float(((g - g.mean()) ** 2).sum()) for g in groups) / (n_runs - len(labels))
        seed = max(0.0, within - resid / n_items)
        if len(labels) > 1:
            between = float((k * (np.array([g.mean() for g in groups]) - row.mean()) ** 2).sum())
            between /= len(labels) - 1
            n0 = (n_runs - float((k**2).sum()) / n_runs) / (len(labels) - 1)
            base = max(0.0, (between - within) / n0)
        else:  # as in hierarchical_bootstrap_ci: a level with one member adds no variance
            base = 0.0
            notes.append("one base: conditional on it (no base variance)")
    return Components(base, seed, item, resid, "; ".join(notes))


def mde(se: float, confidence: float = 0.95, power: float = POWER) -> float:
    """Minimum detectable effect of a two-sided test at ``1 - confidence`` with ``power``:
    ``(z_{1 - alpha/2} + z_{power}) x SE`` (Bloom 1995, "Minimum detectable effects", *Evaluation
    Review* 19(5):547-556; 2.80 x SE at 95% and 80% power)."""
    return (z_quantile(1 - (1 - confidence) / 2) + z_quantile(power)) * se


def items_needed(
    c: Components, bases: int, seeds: int, half_width: float, confidence: float = 0.95
) -> float:
    """Fewest items for a normal ``confidence`` interval of half-width ``<= half_width`` with
    ``bases`` x ``seeds``; ``inf`` when the runs' spread alone is wider."""
    z = z_quantile(1 - (1 - confidence) / 2)
    budget = (half_width / z) ** 2 - c.base / bases - c.seed / (bases * seeds)
    need = c.item + c.resid / (bases * seeds)
    if not budget > 0:
        return math.inf
    return float(max(1, math.ceil(need / budget - 1e-9)))


def bases_needed(
    c: Components, seeds: int, items: int, half_width: float, confidence: float = 0.95
) -> float:
    """Fewest bases (``seeds`` each, ``items`` items) for a half-width ``<= half_width``; ``inf``
    when the items alone are too few."""
    z = z_quantile(1 - (1 - confidence) / 2)
    budget = (half_width / z) ** 2 - c.item / items
    per_base = c.base + c.seed / seeds + c.resid / (seeds * items)
    if not budget > 0:
        return math.inf
    return float(max(1, math.ceil(per_base / budget - 1e-9)))


def prediction_interval(
    values: Sequence[float],
    bases: Sequence[Any],
    confidence: float = 0.95,
    *,
    n_items: int | None = None,
    bounds: tuple[float, float] | None = None,
) -> Interval | None:
    """Where one new draw (a new base build, one RL seed on it) should fall, from the committed
    draws ``values`` (one per run) on ``bases``; None with fewer than two draws.

    The prediction interval of one future observation (Hahn, Meeker & Escobar 2017, *Statistical
    Intervals*, 2nd ed., ch. 4: ``mean +- t_{1-alpha/2, n-1} s sqrt(1 + 1/n)``) with the nested
    variance: the new draw's ``s2_base + s2_seed`` plus the committed mean's ``s2_base sum(k_b^2)
    / U^2 + s2_seed / U`` (``k_b`` runs on base ``b``, ``U`` runs), on ``bases - 1`` degrees of
    freedom (the base level's). With one seed per base this is exactly the textbook formula; with
    one base it is the interval of a new seed on that base (``U - 1`` degrees of freedom).

    ``n_items``: the values are proportions over that many evaluation items. A new draw varies
    at least by its own evaluation's binomial noise, which a few equal draws (three runs at 0.00)
    estimate as zero; the new draw's variance is kept at or above the Agresti-Coull binomial
    variance ``p~(1 - p~) / n`` with ``p~ = (n mean + 2) / (n + 4)`` (Agresti & Coull 1998).
    ``bounds``: the metric's range (``(0, 1)`` for a proportion); the interval is cut to it.
    """
    y = np.asarray(values, dtype=float)
    if y.size < 2:
        return None
    c = estimate_components(y, bases)
    labels = list(dict.fromkeys(bases))
    k = np.array([sum(b == g for b in bases) for g in labels], dtype=float)
    mean = float(y.mean())
    new_draw = c.base + c.seed
    if n_items:
        p = (n_items * mean + 2) / (n_items + 4)
        new_draw = max(new_draw, p * (1 - p) / n_items)
    var = new_draw + c.base * float((k**2).sum()) / y.size**2 + c.seed / y.size
    df = len(labels) - 1 if len(labels) > 1 else y.size - 1
    half = t_quantile(1 - (1 - confidence) / 2, df) * math.sqrt(var)
    low, high = mean - half, mean + half
    if bounds is not None:
        low, high = max(low, bounds[0]), min(high, bounds[1])
    return Interval(mean, low, high, int(y.size), confidence)


__all__ = [
    "Components",
    "POWER",
    "bases_needed",
    "estimate_components",
    "items_needed",
    "mde",
    "prediction_interval",
    "t_quantile",
    "z_quantile",
]
