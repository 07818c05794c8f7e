"""Statistics over seeds and items: seeded percentile bootstrap intervals and paired differences.

Results are drawn at several levels (the base build, the RL seed on it, the evaluation item):
``hierarchical_bootstrap_ci`` resamples each level, so an interval covers what a user who builds
their own base and trains their own runs would see, not only the RL seeds on one base.

Percentile bootstrap (Efron & Tibshirani 1993, ch. 13): resample the values with replacement,
take the (alpha/2, 1 - alpha/2) quantiles of the resampled means. Every function takes a ``seed``
so that the same inputs always give the same interval.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

#: Resamples per interval: the Monte-Carlo error of a 95% percentile bound is well under 0.5% of
#: the spread at this size (Efron & Tibshirani 1993, §19.3 recommend >= 1000 for percentiles).
N_RESAMPLES = 10_000


@dataclass(frozen=True)
class Interval:
    """A mean with its confidence interval ``[low, high]`` over ``n`` values."""

    mean: float
    low: float
    high: float
    n: int
    confidence: float = 0.95

    def as_dict(self) -> dict[str, float]:
        return asdict(self)

    def __str__(self) -> str:
        return f"{self.mean:.3f} [{self.low:.3f}, {self.high:.3f}]"


def _check(values: Any, name: str) -> np.ndarray:
    arr = np.asarray(values, dtype=float).ravel()
    if arr.size == 0:
        raise ValueError(f"{name}: needs at least one value")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name}: values must be finite, got {arr[~np.isfinite(arr)][:3]}")
    return arr


def bootstrap_ci(
    values: Sequence[float],
    *,
    confidence: float = 0.95,
    n_resamples: int = N_RESAMPLES,
    seed: int = 0,
) -> Interval:
    """Mean of ``values`` with a seeded percentile-bootstrap interval (one value: a zero-width
    one)."""
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"bootstrap_ci: confidence={confidence} must lie in (0, 1)")
    if n_resamples < 1:
        raise ValueError(f"bootstrap_ci: n_resamples={n_resamples} must be >= 1")
    arr = _check(values, "bootstrap_ci")
    mean = float(arr.mean())
    if arr.size == 1:
        return Interval(mean, mean, mean, 1, confidence)
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, arr.size, size=(n_resamples, arr.size))
    means = arr[idx].mean(axis=1)
    alpha = 1.0 - confidence
    low, high = np.quantile(means, [alpha / 2, 1 - alpha / 2])
    # The percentile interval of a mean always brackets it up to Monte-Carlo noise; clamp that
    # noise.
    return Interval(mean, float(min(low, mean)), float(max(high, mean)), int(arr.size), confidence)


def paired_difference(
    a: Sequence[float],
    b: Sequence[float],
    *,
    confidence: float = 0.95,
    n_resamples: int = N_RESAMPLES,
    seed: int = 0,
) -> Interval:
    """Mean per-item difference ``a - b`` with its bootstrap interval (items resampled jointly).

    ``a[i]`` and ``b[i]`` must score the same item (e.g. two methods' per-item accuracies,
    averaged over seeds); pairing removes the item-difficulty variance that unpaired intervals
    carry.
    """
    xa = _check(a, "paired_difference(a)")
    xb = _check(b, "paired_difference(b)")
    if xa.shape != xb.shape:
        raise ValueError(
            f"paired_difference: a has {xa.size} items, b has {xb.size}; they must pair"
        )
    return bootstrap_ci(xa - xb, confidence=confidence, n_resamples=n_resamples, seed=seed)


def paired_by_key(a: Mapping[Any, float], b: Mapping[Any, float], **kwargs) -> Interval:
    """``paired_difference`` over the keys two per-item score maps share (at least one)."""
    keys = [k for k in a if k in b]
    if not keys:
        raise ValueError("paired_by_key: the two methods share no items")
    return paired_difference([a[k] for k in keys], [b[k] for k in keys], **kwargs)


def hierarchical_bootstrap_ci(
    scores: Any,
    bases: Sequence[Any],
    *,
    confidence: float = 0.95,
    n_resamples: int = N_RESAMPLES,
    seed: int = 0,
) -> Interval:
    """Mean with a percentile interval that covers every level a result was drawn at.

    ``scores[u, i]``: run ``u`` (one RL seed on one base build) on item ``i``, the same items
    for every run (a 1-D array is one value per run). ``bases[u]``: the base build run ``u``
    started from. Each resample draws (1) base builds with replacement, (2) within each drawn
    base, its runs with replacement, (3) items with replacement, the same draw for every run
    since items are crossed with runs; the statistic is the mean over the drawn cells. Steps
    1-2 are the two-stage bootstrap of nested data (Davison & Hinkley 1997, *Bootstrap Methods
    and their Application*, §3.8); resampling the crossed item factor alongside is the
    pigeonhole bootstrap (Owen 2007, *Ann. Appl. Stat.* 1(2)). Both stages resampling with
    replacement errs toward wider intervals, the safe side for deciding a claim. A level with
    one member contributes no variance (one base: the runs are resampled; one run per base: the
    bases). ``n`` of the result is the number of items (runs when ``scores`` is 1-D).
    """
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"hierarchical_bootstrap_ci: confidence={confidence} must lie in (0, 1)")
    arr = np.asarray(scores, dtype=float)
    one_per_run = arr.ndim == 1
    arr = arr[:, None] if one_per_run else arr
    if arr.ndim != 2 or arr.size == 0:
        raise ValueError("hierarchical_bootstrap_ci: scores must be (runs, items), non-empty")
    if not np.all(np.isfinite(arr)):
        raise ValueError("hierarchical_bootstrap_ci: scores must be finite")
    if len(bases) != arr.shape[0]:
        raise ValueError(
            f"hierarchical_bootstrap_ci: {len(bases)} base labels for {arr.shape[0]} runs"
        )
    n_runs, n_items = arr.shape
    mean = float(arr.mean())
    n = n_runs if one_per_run else n_items
    if arr.size == 1:
        return Interval(mean, mean, mean, n, confidence)
    rng = np.random.default_rng(seed)
    if n_items > 1:  # item weights of each resample (multinomial counts / n_items)
        idx = rng.integers(0, n_items, size=(n_resamples, n_items))
        idx += n_items * np.arange(n_resamples)[:, None]
        counts = np.bincount(idx.ravel(), minlength=n_resamples * n_items)
        per_run = counts.reshape(n_resamples, n_items) @ arr.T / n_items  # (resamples, runs)
    else:
        per_run = np.broadcast_to(arr[:, 0], (n_resamples, n_runs))
    labels = list(dict.fromkeys(bases))
    sums, counts = [], []
    for label in labels:
        members = np.array([u for u, b in enumerate(bases) if b == label])
        pick = rng.integers(0, members.size, size=(n_resamples, members.size))
        sums.append(per_run[:, members][np.arange(n_resamples)[:, None], pick].sum(axis=1))
        counts.append(members.size)
    sums_arr, counts_arr = np.stack(sums, axis=1), np.asarray(counts, dtype=float)
    drawn = rng.integers(0, len(labels), size=(n_resamples, len(labels)))
    totals = sums_arr[np.arange(n_resamples)[:, None], drawn].sum(axis=1)
    means = totals / counts_arr[drawn].sum(axis=1)
    alpha = 1.0 - confidence
    low, high = np.quantile(means, [alpha / 2, 1 - alpha / 2])
    return Interval(mean, float(min(low, mean)), float(max(high, mean)), n, confidence)


#: The four verdicts of a claim (issue 28): the interval on the claimed side of zero, on the other
#: side, inside a stated margin around zero, or none of these.
HELD, REVERSED, UNDERPOWERED = "held", "reversed", "underpowered"
#: The verdict of a comparison of methods on an endpoint the baseline itself did not move
#: (issue 48: GRPO's gain over the base below the grid's ``min_grpo_gain``): no verdict.
NOT_TESTABLE = "not testable at this scale"


def no_effect(margin: float) -> str:
    """The verdict of an interval that lies inside ``[-margin, margin]`` around zero."""
    return f"no effect beyond ±{margin:g}"


def verdict_greater(diff: Interval, margin: float | None = None) -> str:
    """``"held"`` when the interval of ``a - b`` lies above 0, ``"reversed"`` when below,
    ``"no effect beyond ±margin"`` when it includes 0 and lies inside ``[-margin, margin]`` (the
    two one-sided tests read off one interval, Schuirmann 1987), else ``"underpowered"``."""
    if diff.low > 0:
        return HELD
    if diff.high < 0:
        return REVERSED
    if margin is not None:
        if margin <= 0:
            raise ValueError(f"verdict_greater: margin={margin} must be > 0")
        if -margin <= diff.low and diff.high <= margin:
            return no_effect(margin)
    return UNDERPOWERED


def verdict_close(diff: Interval, margin: float) -> str:
    """Equivalence within ``±margin`` (Schuirmann 1987's two one-sided tests read off one
    interval).

    ``"held"`` when the whole interval lies inside ``[-margin, margin]``, ``"reversed"`` when it
    lies wholly outside (the methods differ by more than the margin), else ``"underpowered"``.
    """
    if margin <= 0:
        raise ValueError(f"verdict_close: margin={margin} must be > 0")
    if -margin <= diff.low and diff.high <= margin:
        return HELD
    if diff.low > margin or diff.high < -margin:
        return REVERSED
    return UNDERPOWERED


__all__ = [
    "HELD",
    "Interval",
    "N_RESAMPLES",
    "REVERSED",
    "UNDERPOWERED",
    "bootstrap_ci",
    "hierarchical_bootstrap_ci",
    "no_effect",
    "paired_by_key",
    "paired_difference",
    "verdict_close",
    "verdict_greater",
]
