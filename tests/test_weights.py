"""Token weights: hand-computed values per scheme, defaults, Lopti, 80/20, bad configuration."""

from __future__ import annotations

import math

import pytest
import torch

from rlvr.agents.algorithms import ALGORITHMS, Algorithm, WeightConfig, register_algorithm
from rlvr.agents.algorithms.entropy_top import entropy_top_weights
from rlvr.agents.algorithms.grpo_sg import (
    GRPO_SG_DEFAULTS,
    calibrate_alpha,
    reference_token_logits,
    reference_token_probs,
    sigmoid_shaping,
)
from rlvr.agents.algorithms.lopti import lopti_masks, lopti_stages
from rlvr.agents.algorithms.reverse import REVERSE_DEFAULTS
from rlvr.agents.weights import token_weights


def _lp(probs):
    return torch.log(torch.tensor(probs, dtype=torch.float64))


def test_grpo_is_ones_and_masked_zero():
    lp = _lp([[0.9, 0.5, 0.1]])
    mask = torch.tensor([[1, 1, 0]])
    w = token_weights("grpo", logprobs=lp, mask=mask)
    assert w.tolist() == [[1.0, 1.0, 0.0]]
    assert w.dtype == lp.dtype and w.shape == lp.shape


def test_grpo_sg_prob_hand_values():
    # w = clip(2 * (sigmoid(p / 0.5) - 0.5), 0.1, 1.5)
    lp = _lp([[0.9, 0.5, 0.1]])
    w = token_weights(
        "grpo_sg",
        logprobs=lp,
        mask=torch.ones(1, 3),
        shaping_input="prob",
        alpha=2.0,
        tau=0.5,
        mu=0.5,
        lower=0.1,
        upper=1.5,
    )
    expected = [0.7162978701990246, 0.4621171572600098, 0.1]  # last: 0.0997 clipped up to L
    assert w[0].tolist() == pytest.approx(expected, abs=1e-12)


def test_grpo_sg_logit_hand_values_and_upper_clip():
    lp = _lp([[0.5, 0.5, 0.5]])
    h = torch.tensor([[4.0, 0.0, -4.0]], dtype=torch.float64)
    w = token_weights(
        "grpo_sg",
        logprobs=lp,
        mask=torch.ones(1, 3),
        logits=h,
        shaping_input="logit",
        alpha=2.0,
        tau=2.0,
        mu=0.5,
        lower=0.0,
        upper=0.8,
    )
    assert w[0].tolist() == pytest.approx([0.7615941559557646, 0.0, 0.0], abs=1e-12)
    w = token_weights(
        "grpo_sg",
        logprobs=lp,
        mask=torch.ones(1, 3),
        logits=h,
        shaping_input="logit",
        alpha=3.0,
        tau=2.0,
        mu=0.5,
        lower=0.0,
        upper=0.8,
    )
    assert w[0, 0].item() == pytest.approx(0.8)  # 1.1424 clipped down to U


def test_reverse_hand_values_and_monotonicity():
    # w = clip(4 * (sigmoid(-p / 0.5) - 0.1), 0.1, 1.5)
    lp = _lp([[0.9, 0.5, 0.1]])
    w = token_weights(
        "reverse",
        logprobs=lp,
        mask=torch.ones(1, 3),
        shaping_input="prob",
        alpha=4.0,
        tau=0.5,
        mu=0.1,
        lower=0.1,
        upper=1.5,
    )
    assert w[0].tolist() == pytest.approx(
        [0.16740425960195104, 0.6757656854799804, 1.4006640107500887], abs=1e-12
    )
    p = torch.linspace(0.001, 1.0, 200, dtype=torch.float64)[None]
    for shaping_input, x in (("prob", p), ("logit", 40 * p - 5)):
        kw = {
            "logprobs": torch.log(p),
            "mask": torch.ones_like(p),
            "logits": x,
            "shaping_input": shaping_input,
        }
        fwd = token_weights("grpo_sg", **kw, **_calibrated("grpo_sg", kw))[0]
        rev = token_weights("reverse", **kw, **_calibrated("reverse", kw))[0]
        assert (fwd[1:] >= fwd[:-1]).all() and fwd[-1] > fwd[0]
        assert (rev[1:] <= rev[:-1]).all() and rev[-1] < rev[0]


def _calibrated(scheme, kw):
    """The numbers the method's calibration gives on the tokens of ``kw`` (none for prob: its
    defaults are fixed)."""
    algo = ALGORITHMS[scheme]
    params = WeightConfig(shaping_input=kw["shaping_input"]).params(scheme)
    numbers, _ = algo.calibrate(
        params, logprobs=kw["logprobs"], logits=kw["logits"], mask=kw["mask"].bool()
    )
    return {k: numbers[k] for k in ("alpha", "tau", "mu")}


@pytest.mark.parametrize("scheme", ["grpo_sg", "reverse"])
@pytest.mark.parametrize("shaping_input", ["prob", "logit"])
def test_defaults_mean_weight_near_one_and_visible(scheme, shaping_input):
    """The fixed probability defaults and the calibrated logit form both give a token-mean weight
    of about 1 on the reference tokens, and visibly shape them."""
    h, p = reference_token_logits()
    lp = torch.log(p)[None]
    kw = {"logprobs": lp, "mask": torch.ones_like(lp), "logits": h[None]}
    kw["shaping_input"] = shaping_input
    w = token_weights(scheme, **kw, **_calibrated(scheme, kw))[0]
    assert abs(w.mean().item() - 1.0) < 0.02
    hi, lo = w[p > 0.9].mean().item(), w[p < 0.1].mean().item()
    if scheme == "grpo_sg":
        assert hi - lo > 0.15  # confident tokens weigh visibly more
    else:
        assert lo - hi > 0.3  # low-probability tokens weigh visibly more
    assert w.min() >= 0.1 and w.max() <= 2.0


def test_calibrate_alpha_recovers_defaults():
    p = reference_token_probs()
    cfg = GRPO_SG_DEFAULTS["prob"]
    alpha = calibrate_alpha(p, tau=cfg["tau"], mu=cfg["mu"], lower=cfg["lower"], upper=cfg["upper"])
    assert alpha == pytest.approx(cfg["alpha"], abs=0.05)
    mean = sigmoid_shaping(
        p, alpha=alpha, tau=cfg["tau"], mu=cfg["mu"], lower=cfg["lower"], upper=cfg["upper"]
    ).mean()
    assert mean.item() == pytest.approx(1.0, abs=1e-6)


def test_ar_hand_values():
    lp = _lp([[0.9, 0.5, 0.2]])
    old = _lp([[1.0, 0.5, 0.2]])
    w = token_weights(
        "ar", logprobs=lp, mask=torch.tensor([[1, 1, 1]]), old_logprobs=old, alpha=0.3
    )
    assert w[0].tolist() == pytest.approx([1.0, 0.85, 0.76], abs=1e-12)
    with pytest.raises(ValueError, match="old_logprobs"):
        token_weights("ar", logprobs=lp, mask=torch.ones(1, 3), alpha=0.3)
    with pytest.raises(ValueError, match="alpha"):
        token_weights("ar", logprobs=lp, mask=torch.ones(1, 3), old_logprobs=old, alpha=1.5)


def test_entropy_top_keeps_ceil_fraction_across_batch():
    ent = torch.tensor([[0.1, 5.0, 0.3, 9.0, 0.2], [4.0, 0.5, 7.0, 0.0, 0.0]], dtype=torch.float64)
    mask = torch.tensor([[1, 1, 1, 0, 1], [1, 1, 1, 0, 0]])  # 7 valid; the 9.0 is masked
    lp = torch.zeros_like(ent)
    w = entropy_top_weights(logprobs=lp, mask=mask, entropy=ent, fraction=0.2)
    # ceil(0.2 * 7) = 2 -> the two highest valid entropies: 7.0 and 5.0
    assert w.tolist() == [[0, 1, 0, 0, 0], [0, 0, 1, 0, 0]]
    w = entropy_top_weights(logprobs=lp, mask=mask, entropy=ent, fraction=1.0)
    assert torch.equal(w, mask.to(w.dtype))


@pytest.mark.parametrize("n_valid", [1, 4, 5, 10, 15, 37, 100])
def test_entropy_top_count(n_valid):
    g = torch.Generator().manual_seed(n_valid)
    ent = torch.rand(4, 40, generator=g)
    flat = torch.zeros(160)
    flat[torch.randperm(160, generator=g)[:n_valid]] = 1
    mask = flat.reshape(4, 40)
    w = entropy_top_weights(logprobs=torch.zeros(4, 40), mask=mask, entropy=ent)
    assert int(w.sum()) == math.ceil(0.2 * n_valid - 1e-9)
    assert set(w.unique().tolist()) <= {0.0, 1.0}
    assert (w <= mask).all()
    kept_min = ent[w.bool()].min()
    assert (ent[(mask.bool()) & ~w.bool()] <= kept_min).all()


def test_entropy_top_empty_mask():
    w = entropy_top_weights(
        logprobs=torch.zeros(2, 3), mask=torch.zeros(2, 3), entropy=torch.rand(2, 3)
    )
    assert w.sum() == 0


def test_weights_are_detached():
    logits = torch.randn(2, 3, requires_grad=True)
    lp = torch.nn.functional.logsigmoid(logits)
    fixed = {"alpha": 2.0, "tau": 1.0, "mu": 0.3}
    for scheme, kw in (
        ("grpo_sg", {"shaping_input": "logit", **fixed}),
        ("reverse", fixed),
        ("tr_grpo", {"alpha": 2.0}),
        ("grpo", {}),
    ):
        w = token_weights(scheme, logprobs=lp, mask=torch.ones(2, 3), logits=logits, **kw)
        assert not w.requires_grad and w.grad_fn is None


def test_lopti_masks_partition():
    g = torch.Generator().manual_seed(0)
    old = torch.log(torch.rand(6, 9, generator=g))
    mask = (torch.rand(6, 9, generator=g) > 0.3).float()
    low, high = lopti_masks(old, mask, eta=0.5)
    assert torch.equal(low + high, mask)
    assert (low * high).sum() == 0
    assert torch.equal(low.bool(), mask.bool() & (old.exp() < 0.5))
    stages = lopti_stages(old, mask, eta=0.5)
    assert [name for name, _ in stages] == ["low", "high"]
    assert torch.equal(stages[0][1], low) and torch.equal(stages[1][1], high)


def test_lopti_stages_drop_empty():
    old = torch.zeros(2, 3)  # p_old = 1 everywhere: no low-probability tokens
    stages = lopti_stages(old, torch.ones(2, 3))
    assert [name for name, _ in stages] == ["high"]
    assert len(lopti_stages(old, torch.ones(2, 3), drop_empty=False)) == 2


def test_a_new_weight_is_one_function_on_an_algorithm():
    def half(*, logprobs, mask, logits=None, old_logprobs=None, entropy=None, factor: float = 0.5):
        return torch.full_like(logprobs, factor)

    register_algorithm(Algorithm(name="test_half", label="half", color="#000", weight=half))
    try:
        w = token_weights(
            "test_half", logprobs=torch.zeros(1, 2), mask=torch.tensor([[1, 0]]), factor=0.25
        )
        assert w.tolist() == [[0.25, 0.0]]
        assert token_weights("grpo", logprobs=torch.zeros(1, 2), mask=torch.ones(1, 2)).sum() == 2
    finally:
        ALGORITHMS.pop("test_half")


@pytest.mark.parametrize(
    "scheme,kwargs,param",
    [
        ("grpo_sg", {"lower": 1.5, "upper": 1.0}, "lower"),
        ("reverse", {"lower": 1.5, "upper": 1.0}, "lower"),
        ("grpo_sg", {"tau": 0.0}, "tau"),
        ("grpo_sg", {"tau": -1.0}, "tau"),
        ("grpo_sg", {"alpha": 0.0}, "alpha"),
        ("grpo_sg", {"lower": -0.1}, "lower"),
        ("grpo_sg", {"shaping_input": "entropy"}, "shaping_input"),
        ("grpo_sg", {"shaping_input": "logit", "alpha": 2.0, "tau": 1.0, "mu": 0.3}, "logits"),
        ("grpo_sg", {"shaping_input": "logit"}, "calibrat"),
        ("tr_grpo", {}, "calibrat"),
        ("grpo_sg", {"eta": 0.5}, "eta"),
        ("ar", {"alpha": -0.1}, "alpha"),
        ("nope", {}, "scheme"),
    ],
)
def test_bad_configuration_names_parameter(scheme, kwargs, param):
    lp = torch.zeros(1, 2)
    with pytest.raises(ValueError, match=param):
        token_weights(
            scheme,
            logprobs=lp,
            mask=torch.ones(1, 2),
            old_logprobs=lp,
            entropy=torch.ones(1, 2),
            **kwargs,
        )


@pytest.mark.parametrize("fraction", [0.0, 1.2, -0.2])
def test_entropy_top_bad_fraction(fraction):
    with pytest.raises(ValueError, match="fraction"):
        entropy_top_weights(
            logprobs=torch.zeros(1, 2),
            mask=torch.ones(1, 2),
            entropy=torch.ones(1, 2),
            fraction=fraction,
        )


def test_weight_config_is_generated_from_the_registered_fields():
    """Each field once, typed, with the default and interval its method declares; the range
    check of ``rlvr train`` is that declaration."""
    from rlvr.agents.algorithms import FIELDS

    names = [f.name for f in __import__("dataclasses").fields(WeightConfig)]
    assert names == [*FIELDS, "extra"]
    assert WeightConfig().ar_alpha == 0.2 and WeightConfig().eta == 0.4  # AR-Lopti's K&K
    with pytest.raises(ValueError, match=r"weights\.eta: must be in \(0, 1\)"):
        WeightConfig(eta=1.0).check()


@pytest.mark.parametrize("eta", [0.0, 1.0, -0.5, 2.0])
def test_lopti_bad_eta(eta):
    with pytest.raises(ValueError, match="eta"):
        lopti_masks(torch.zeros(1, 2), torch.ones(1, 2), eta=eta)


def test_weight_config_profiles():
    from rlvr.config import load_config

    cfg = load_config(WeightConfig, None, ["shaping_input=logit", "tau=5", "alpha=2", "mu=0.5"])
    params = cfg.params("grpo_sg")
    want = {"alpha": 2.0, "tau": 5.0, "mu": 0.5, "shaping_input": "logit"}
    assert params == {**GRPO_SG_DEFAULTS["logit"], **want}
    lp = _lp([[0.9, 0.2]])
    h = torch.tensor([[20.0, 3.0]], dtype=torch.float64)
    w = token_weights("grpo_sg", logprobs=lp, mask=torch.ones(1, 2), logits=h, **params)
    assert w[0, 0] > w[0, 1]
    # unset: GRPO-SG and Reverse shape the logit with alpha, tau, mu calibrated
    assert WeightConfig().params("grpo_sg") == {
        **GRPO_SG_DEFAULTS["logit"],
        "shaping_input": "logit",
    }
    assert WeightConfig(ar_alpha=0.1).params("ar") == {"alpha": 0.1}
    assert WeightConfig().params("entropy_top") == {"fraction": 0.2}
    # the trainer may pick the scheme from its algorithm: overrides still apply
    cfg = load_config(WeightConfig, None, ["tau=0.25", "ar_alpha=0.1", "shaping_input=prob"])
    assert cfg.params("reverse") == {
        **REVERSE_DEFAULTS["prob"],
        "tau": 0.25,
        "shaping_input": "prob",
    }
    assert cfg.params("ar") == {"alpha": 0.1}
