"""Hand-checked tests of rlvr.eval.stats."""

from __future__ import annotations

import numpy as np
import pytest

from rlvr.eval import stats as S


def test_bootstrap_contains_mean_and_narrows_with_n():
    rng = np.random.default_rng(0)
    small = rng.normal(0.5, 0.2, size=10)
    large = rng.normal(0.5, 0.2, size=1000)
    a, b = S.bootstrap_ci(small, seed=1), S.bootstrap_ci(large, seed=1)
    for ci, x in ((a, small), (b, large)):
        assert ci.low <= ci.mean <= ci.high
        assert ci.mean == pytest.approx(x.mean())
    assert (b.high - b.low) < (
        a.high - a.low
    ) / 5  # width ~ 1/sqrt(n): 100x the data, ~10x narrower
    # Normal theory: the 95% half-width is about 1.96 * sd / sqrt(n).
    assert (b.high - b.low) / 2 == pytest.approx(1.96 * large.std() / np.sqrt(1000), rel=0.1)


def test_bootstrap_is_seeded_and_degenerate_cases():
    x = np.random.default_rng(0).uniform(size=40)
    assert S.bootstrap_ci(x, seed=3) == S.bootstrap_ci(x, seed=3)
    assert S.bootstrap_ci(x, seed=3) != S.bootstrap_ci(x, seed=4)
    one = S.bootstrap_ci([0.7])
    assert (one.mean, one.low, one.high, one.n) == (0.7, 0.7, 0.7, 1)
    const = S.bootstrap_ci([0.2] * 5)
    assert const.low == pytest.approx(0.2) and const.high == pytest.approx(0.2)
    with pytest.raises(ValueError, match="at least one"):
        S.bootstrap_ci([])
    with pytest.raises(ValueError, match="finite"):
        S.bootstrap_ci([1.0, float("nan")])
    with pytest.raises(ValueError, match="confidence"):
        S.bootstrap_ci([1.0, 2.0], confidence=1.5)


def test_paired_difference_sign_and_pairing():
    rng = np.random.default_rng(0)
    difficulty = rng.uniform(0, 1, size=200)  # large shared item variance
    a = difficulty + 0.05
    b = difficulty
    d = S.paired_difference(a, b)
    assert d.mean == pytest.approx(0.05) and d.low > 0  # pairing removes the item variance
    assert S.verdict_greater(d) == "held"
    assert S.verdict_greater(S.paired_difference(b, a)) == "reversed"
    noisy = S.paired_difference(rng.normal(0, 1, 30), rng.normal(0, 1, 30))
    assert S.verdict_greater(noisy) == "underpowered"
    with pytest.raises(ValueError, match="pair"):
        S.paired_difference([1, 2], [1, 2, 3])
    assert S.paired_by_key({"x": 1.0, "y": 0.0, "z": 5.0}, {"x": 0.0, "y": 0.0}).mean == 0.5


def test_the_four_verdicts():
    # issue 28: held, reversed, no effect beyond the margin, underpowered
    assert S.verdict_greater(S.Interval(0.05, 0.01, 0.09, 10), margin=0.03) == "held"
    assert S.verdict_greater(S.Interval(-0.05, -0.09, -0.01, 10), margin=0.03) == "reversed"
    inside = S.Interval(0.0, -0.02, 0.025, 10)
    assert S.verdict_greater(inside, margin=0.03) == "no effect beyond ±0.03"
    assert S.verdict_greater(inside) == "underpowered"  # no margin stated: nothing to bound
    assert S.verdict_greater(S.Interval(0.0, -0.02, 0.04, 10), margin=0.03) == "underpowered"
    with pytest.raises(ValueError, match="margin"):
        S.verdict_greater(inside, margin=0)


def test_verdict_close():
    assert S.verdict_close(S.Interval(0.01, -0.02, 0.03, 10), margin=0.05) == "held"
    assert S.verdict_close(S.Interval(0.2, 0.1, 0.3, 10), margin=0.05) == "reversed"
    assert S.verdict_close(S.Interval(0.04, -0.01, 0.09, 10), margin=0.05) == "underpowered"
    with pytest.raises(ValueError, match="margin"):
        S.verdict_close(S.Interval(0, 0, 0, 1), margin=0)
