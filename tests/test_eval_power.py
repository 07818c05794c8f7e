"""``rlvr.eval.power`` against independent references: scipy.stats for the quantiles, the
minimum detectable effect and the textbook prediction interval, simulation for the variance
components, the standard error of the mean and the coverage of the prediction interval."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from rlvr.eval import power as P


@pytest.mark.parametrize("df", [1, 2, 3, 4, 5, 8, 13, 30, 101])
@pytest.mark.parametrize("p", [0.6, 0.8, 0.9, 0.975, 0.995, 0.025])
def test_t_quantile_matches_scipy(df, p):
    assert P.t_quantile(p, df) == pytest.approx(stats.t.ppf(p, df), rel=1e-9, abs=1e-12)


def test_z_and_mde_match_scipy():
    multiplier = stats.norm.ppf(0.975) + stats.norm.ppf(0.8)  # Bloom 1995: 2.80
    assert P.mde(0.01) == pytest.approx(multiplier * 0.01, rel=1e-12)
    assert P.mde(1.0) == pytest.approx(2.8016, abs=1e-4)
    assert P.mde(0.02, confidence=0.9, power=0.9) == pytest.approx(
        (stats.norm.ppf(0.95) + stats.norm.ppf(0.9)) * 0.02, rel=1e-12
    )
    with pytest.raises(ValueError):
        P.t_quantile(1.0, 3)


def test_prediction_interval_with_one_seed_per_base_is_the_textbook_one():
    y = [0.16, 0.31, 0.27]  # one value per base, as in results/tiny
    pi = P.prediction_interval(y, [0, 1, 2])
    n, s = len(y), np.std(y, ddof=1)
    low, high = stats.t.interval(0.95, n - 1, loc=np.mean(y), scale=s * math.sqrt(1 + 1 / n))
    assert (pi.low, pi.high) == pytest.approx((low, high), rel=1e-9)
    assert pi.mean == pytest.approx(np.mean(y)) and pi.n == 3
    assert P.prediction_interval([0.2], [0]) is None


def test_prediction_interval_of_equal_draws_keeps_the_binomial_noise_and_stays_in_range():
    # three bases at the floor: the spread estimate is 0, a new draw still varies by its
    # evaluation's binomial noise (Agresti-Coull p~ over the items)
    assert P.prediction_interval([0.0, 0.0, 0.0], [0, 1, 2]).high == 0.0
    pi = P.prediction_interval([0.0, 0.0, 0.0], [0, 1, 2], n_items=100, bounds=(0.0, 1.0))
    p = 2 / 104
    half = stats.t.ppf(0.975, 2) * math.sqrt(p * (1 - p) / 100)
    assert pi.low == 0.0 and pi.high == pytest.approx(half)
    assert 0.05 < pi.high < 0.15  # a rerun at 0.01 is no surprise
    top = P.prediction_interval([0.98, 1.0, 0.99], [0, 1, 2], n_items=100, bounds=(0.0, 1.0))
    assert top.high == 1.0 and top.low < 0.98
    # a spread larger than the binomial floor leaves the textbook interval unchanged
    y = [0.16, 0.31, 0.27]
    assert P.prediction_interval(y, [0, 1, 2], n_items=100).high == pytest.approx(
        P.prediction_interval(y, [0, 1, 2]).high
    )


def test_prediction_interval_covers_a_new_base_and_seed_95_percent_of_the_time():
    rng = np.random.default_rng(1)
    hits, trials = 0, 4000
    for _ in range(trials):
        base = rng.normal(0, 0.05, size=4)  # 4 bases x 2 seeds, then one new base x seed
        y = np.repeat(base, 2) + rng.normal(0, 0.03, size=8)
        pi = P.prediction_interval(y, np.repeat(np.arange(4), 2))
        new = rng.normal(0, 0.05) + rng.normal(0, 0.03)
        hits += pi.low <= new <= pi.high
    # at least nominal (the base-level degrees of freedom err on the wide side), not absurdly wide
    assert 0.94 <= hits / trials <= 0.995


def _simulate(rng, bases, seeds, items, s_base, s_seed, s_item, s_resid):
    b = np.repeat(rng.normal(0, s_base, bases), seeds)
    s = rng.normal(0, s_seed, bases * seeds)
    i = rng.normal(0, s_item, items)
    e = rng.normal(0, s_resid, (bases * seeds, items))
    return 0.1 + b[:, None] + s[:, None] + i[None, :] + e, list(np.repeat(np.arange(bases), seeds))


def test_components_recover_the_simulated_variances_and_the_se_is_the_mean_spread():
    rng = np.random.default_rng(0)
    truth = dict(base=0.03**2, seed=0.02**2, item=0.3**2, resid=0.4**2)
    sd = {k: math.sqrt(v) for k, v in truth.items()}
    est = [P.estimate_components(*_simulate(rng, 40, 3, 300, *sd.values())) for _ in range(30)]
    for key, true in truth.items():
        mean = np.mean([getattr(c, key) for c in est])
        assert mean == pytest.approx(true, rel=0.15), key
    # Var of the grand mean at (5 bases, 2 seeds, 100 items): formula vs simulation
    c = P.Components(**truth)
    means = [_simulate(rng, 5, 2, 100, *sd.values())[0].mean() for _ in range(3000)]
    assert np.var(means, ddof=1) == pytest.approx(c.variance(5, 2, 100), rel=0.1)


def test_components_with_one_seed_per_base_count_the_seed_in_the_base():
    rng = np.random.default_rng(2)
    x, bases = _simulate(rng, 3, 1, 50, 0.05, 0.05, 0.2, 0.3)
    c = P.estimate_components(x, bases)
    assert c.seed == 0.0 and "counted in the base" in c.note
    assert c.base == pytest.approx(max(0.0, np.var(x.mean(1), ddof=1) - c.resid / 50))
    one = P.estimate_components(x[:1], bases[:1])
    assert math.isnan(one.base) and math.isnan(P.mde(one.se(1, 1, 50)))
    # one base (a hub model): conditional on it, as the hierarchical bootstrap is
    seeds = P.estimate_components([0.2, 0.3, 0.25], [0, 0, 0])
    assert seeds.base == 0.0 and seeds.seed == pytest.approx(np.var([0.2, 0.3, 0.25], ddof=1))
    pi = P.prediction_interval([0.2, 0.3, 0.25], [0, 0, 0])  # a new seed on that base
    ref = stats.t.interval(0.95, 2, loc=0.25, scale=0.05 * math.sqrt(1 + 1 / 3))
    assert (pi.low, pi.high) == pytest.approx(ref)
    per_run = P.estimate_components([1.0, 2.0, 4.0], [0, 1, 2])
    assert per_run.base == pytest.approx(np.var([1.0, 2.0, 4.0], ddof=1))
    with pytest.raises(ValueError, match="base labels"):
        P.estimate_components(x, [0, 1])


def test_the_design_the_sizing_returns_meets_the_target_and_one_less_does_not():
    c = P.Components(base=2.3e-4, seed=1e-4, item=0.053, resid=0.1)
    z = stats.norm.ppf(0.975)
    n = P.items_needed(c, 5, 2, 0.03)
    assert z * c.se(5, 2, n) <= 0.03 < z * c.se(5, 2, n - 1)
    b = P.bases_needed(c, 2, 1000, 0.03)
    assert z * c.se(b, 2, 1000) <= 0.03 < z * c.se(b - 1, 2, 1000)
    # the spread across bases alone exceeds the target: no number of items is enough
    assert P.items_needed(P.Components(0.01, 0, 0.05, 0), 3, 1, 0.03) == math.inf
    assert P.bases_needed(P.Components(0.0, 0, 0.05, 0), 1, 10, 0.03) == math.inf
