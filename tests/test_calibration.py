"""GRPO-SG as the paper writes it: Eq. 20 on the logit with alpha, tau, mu calibrated on the
model's own first batch (``rlvr.agents.algorithms.shaping``), TR-GRPO's calibrated alpha, Reverse
mirrored; the trainer calibrates once, records it and restores it on resume."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import torch

from rlvr.agents.algorithms import WeightConfig, calibrated_fields, get_algorithm
from rlvr.agents.algorithms.base import CALIBRATED
from rlvr.agents.algorithms.grpo_sg import reference_token_logits, reference_token_probs
from rlvr.agents.algorithms.shaping import (
    TAIL,
    calibrate_shaping,
    sigmoid_shaping,
)
from rlvr.agents.weights import token_weights
from rlvr.training.trainer import read_metrics

from _rlvr_toys import letter_trainer

torch.set_num_threads(1)
L, U = 0.1, 2.0
FREE = {"alpha": CALIBRATED, "tau": CALIBRATED, "mu": CALIBRATED, "lower": L, "upper": U}


def _weights(h, params, sign=1.0):
    numbers = {k: float(v) for k, v in params.items() if k != "shaping_input"}
    return sigmoid_shaping(h, sign=sign, **numbers)


def _skewed_logits(n=20_000, seed=0):
    """Logits shaped like tiny-kk's sampled tokens: most near 18-21, a low tail down to ~8."""
    g = torch.Generator().manual_seed(seed)
    bulk = 18.0 + 3.0 * torch.rand(n, generator=g, dtype=torch.float64)
    tail = 8.0 + 10.0 * torch.rand(n // 8, generator=g, dtype=torch.float64)
    return torch.cat([bulk, tail])


@pytest.mark.parametrize("make", [lambda: reference_token_logits()[0], _skewed_logits])
def test_the_rule_spread_tail_at_lower_mean_one(make):
    h = make()
    out = calibrate_shaping(h, None, FREE)
    q05, q95 = np.quantile(h.numpy(), (0.05, 0.95))
    assert out["tau"] == pytest.approx(q95 - q05, rel=1e-12)  # tau: the logits' own spread
    w = _weights(h, out)
    assert float(w.mean()) == pytest.approx(1.0, abs=1e-9)  # token-mean weight 1
    at_lower = float((w <= L + 1e-12).double().mean())
    assert at_lower == pytest.approx(TAIL, abs=2e-3)  # the lowest 5 % of tokens sit at L
    # and those are the lowest logits: the weight is increasing in h
    order = torch.argsort(h)
    assert (w[order][1:] >= w[order][:-1] - 1e-12).all()
    assert float(w.max()) > 1.2  # it varies over the model's own logit range


def test_the_rule_is_scale_free():
    """A sharper model with the same ranking (every logit times c) gets the same weights."""
    h = _skewed_logits()
    a, b = calibrate_shaping(h, None, FREE), calibrate_shaping(3.0 * h, None, FREE)
    assert b["tau"] == pytest.approx(3.0 * a["tau"], rel=1e-12)
    assert b["alpha"] == pytest.approx(a["alpha"], rel=1e-9)
    assert b["mu"] == pytest.approx(a["mu"], rel=1e-9)
    torch.testing.assert_close(_weights(3.0 * h, b), _weights(h, a))


def test_uncalibrated_logit_form_is_nearly_constant_and_calibrated_is_not():
    """The issue's measurement: at the old fixed values (alpha 2.75, tau 10, mu 0.5) logits of a
    tiny-kk-like batch give a narrow weight; the rule spreads it over [L, ~U]."""
    h = _skewed_logits()
    fixed = _weights(h, {"alpha": 2.75, "tau": 10.0, "mu": 0.5, "lower": L, "upper": U})
    calibrated = _weights(h, calibrate_shaping(h, None, FREE))
    assert float(fixed.std()) < 0.15
    assert float(calibrated.std()) > 2 * float(fixed.std())


def test_reverse_is_mirrored():
    h = _skewed_logits()
    out = calibrate_shaping(h, None, FREE, sign=-1.0)
    w = _weights(h, out, sign=-1.0)
    assert float(w.mean()) == pytest.approx(1.0, abs=1e-9)
    top = h >= float(np.quantile(h.numpy(), 1 - TAIL))
    assert bool((w[top] <= L + 1e-12).all())  # the highest logits are the floor now
    order = torch.argsort(h)
    assert (w[order][1:] <= w[order][:-1] + 1e-12).all()


def test_set_parameters_are_kept_and_the_rest_solved():
    h = _skewed_logits()
    with_tau = calibrate_shaping(h, None, {**FREE, "tau": 5.0})
    assert with_tau["tau"] == 5.0
    assert float(_weights(h, with_tau).mean()) == pytest.approx(1.0, abs=1e-9)
    with_mu = calibrate_shaping(h, None, {**FREE, "tau": 5.0, "mu": 0.9})
    assert with_mu["mu"] == 0.9 and with_mu["alpha"] > 0
    assert float(_weights(h, with_mu).mean()) == pytest.approx(1.0, abs=1e-6)
    with_alpha = calibrate_shaping(h, None, {**FREE, "tau": 5.0, "alpha": 6.0})
    assert with_alpha["alpha"] == 6.0
    assert float(_weights(h, with_alpha).mean()) == pytest.approx(1.0, abs=1e-6)
    given = {"alpha": 2.0, "tau": 5.0, "mu": 0.5, "lower": L, "upper": U}
    assert calibrate_shaping(h, None, given) == given


def test_the_rule_refuses_a_batch_it_cannot_calibrate():
    with pytest.raises(ValueError, match="tau"):
        calibrate_shaping(torch.full((100,), 7.0, dtype=torch.float64), None, FREE)
    with pytest.raises(ValueError, match="no valid"):
        calibrate_shaping(torch.ones(3), torch.zeros(3, dtype=torch.bool), FREE)


def test_tr_grpo_calibrates_alpha_only():
    p = reference_token_probs()
    algo = get_algorithm("tr_grpo")
    params = WeightConfig().params("tr_grpo")
    assert params == {"alpha": CALIBRATED, "tau": 0.5, "mu": 0.5, "lower": L, "upper": U}
    lp = torch.log(p)[None]
    out, record = algo.calibrate(params, logprobs=lp, logits=None, mask=torch.ones_like(lp).bool())
    assert set(record["values"]) == {"alpha"} and out["tau"] == 0.5 and out["mu"] == 0.5
    w = token_weights("tr_grpo", logprobs=lp, mask=torch.ones_like(lp), **out)
    assert float(w.mean()) == pytest.approx(1.0, abs=1e-6)
    assert record["weight_mean"] == pytest.approx(1.0, abs=1e-6)


def test_calibrated_methods_and_their_fields():
    assert calibrated_fields("grpo_sg") == ["alpha", "tau", "mu"]
    assert calibrated_fields("reverse") == ["alpha", "tau", "mu"]
    assert calibrated_fields("tr_grpo") == ["alpha"]
    assert calibrated_fields("grpo") == []
    assert get_algorithm("grpo_sg").verl_path(WeightConfig().params("grpo_sg")) == "actor_loss"
    fixed = WeightConfig(alpha=3.0).params("tr_grpo")
    assert get_algorithm("tr_grpo").verl_path(fixed) == "policy_loss"


# -- the trainer ----------------------------------------------------------------------------------
def _trainer(out, *extra, steps=2):
    return letter_trainer(out, "save_every=1", *extra, algo="grpo_sg", steps=steps)


def test_the_trainer_calibrates_once_records_and_restores(tmp_path):
    whole = _trainer(tmp_path / "whole")
    calls = []
    algo = whole.updater.algorithm

    def counting(params, **kw):
        calls.append(1)
        return algo.calibrate(params, **kw)

    whole.updater.algorithm = dataclasses.replace(algo, calibrate=counting)
    records = whole.train()
    assert len(calls) == 1  # once, at the first update, never again
    record = json.loads((tmp_path / "whole" / "calibration.json").read_text())
    assert record["algo"] == "grpo_sg" and record["step"] == 1
    assert set(record["values"]) == {"alpha", "tau", "mu"}
    assert record["weight_mean"] == pytest.approx(1.0, abs=1e-6)
    assert records[0]["calibration/alpha"] == record["values"]["alpha"]
    assert "calibration/alpha" not in records[1]
    assert records[0]["weight/mean"] == pytest.approx(1.0, abs=1e-5)  # the batch it came from

    # interrupted after step 1, resumed: the checkpoint's values, no second calibration
    first = _trainer(tmp_path / "resumed", steps=1)
    first.train()
    resumed = _trainer(tmp_path / "resumed", "resume=true", steps=2)
    resumed.updater.algorithm = dataclasses.replace(algo, calibrate=_never)
    resumed.train()
    assert resumed.updater.calibration["values"] == record["values"]
    for a, b in zip(whole.model.parameters(), resumed.model.parameters()):
        assert torch.equal(a, b)
    got = read_metrics(tmp_path / "resumed" / "metrics.jsonl")
    assert got[1]["loss"] == records[1]["loss"]


def _never(params, **kw):
    raise AssertionError("a resumed run must not calibrate again")
