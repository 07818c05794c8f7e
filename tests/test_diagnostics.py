"""What every run records about its weights (quantiles, shares at L and U, kept gradient mass), the
same-batch gradient probe against GRPO (which must not change the update by one bit), and the KL
weighting options."""

from __future__ import annotations

import pytest
import torch

from rlvr.agents.algorithms import ALGORITHMS, Algorithm, get_algorithm, register_algorithm
from rlvr.agents.losses import k3_kl
from rlvr.agents.method_loss import LossInputs, method_loss
from rlvr.agents.metrics import weight_diagnostics
from rlvr.training.trainer import read_metrics

from _rlvr_toys import letter_trainer

torch.set_num_threads(1)


def test_weight_diagnostics_hand_values():
    w = torch.tensor([0.1, 0.1, 0.5, 1.0, 2.0], dtype=torch.float32)
    p = torch.tensor([0.2, 0.5, 0.9, 0.99, 1.0], dtype=torch.float64)
    out = weight_diagnostics(w, p, lower=0.1, upper=2.0)
    assert out["weight/q50"] == pytest.approx(0.5)
    assert out["weight/q05"] == pytest.approx(0.1, abs=1e-7)
    assert out["weight/q95"] == pytest.approx(1.8, abs=1e-6)  # linear interpolation
    assert out["weight/at_lower"] == pytest.approx(0.4)  # float32 0.1 counts as at L
    assert out["weight/at_upper"] == pytest.approx(0.2)
    slack = 1 - p
    kept = float((w.double() * slack).sum() / slack.sum())
    assert out["weight/kept_grad_mass"] == pytest.approx(kept)
    assert kept == pytest.approx((0.08 + 0.05 + 0.05 + 0.01) / (0.8 + 0.5 + 0.1 + 0.01))
    ones = weight_diagnostics(torch.ones(4), torch.rand(4))
    assert ones["weight/kept_grad_mass"] == pytest.approx(1.0)
    assert ones["weight/at_lower"] == ones["weight/at_upper"] == 0.0
    assert weight_diagnostics(torch.ones(0), torch.ones(0)) == {}


def _trainer(out, *extra, algo="grpo_sg", steps=2):
    return letter_trainer(out, *extra, algo=algo, steps=steps)


@pytest.mark.parametrize(
    "algo,extra",
    [
        ("grpo_sg", ()),
        ("tr_grpo", ("loss.weight_position=ratio", "loss.kl_weighting=ratio")),
        ("lopti", ("mini_batch_size=4", "micro_batch_size=2")),
    ],
)
def test_the_probe_leaves_the_update_bit_identical(tmp_path, algo, extra):
    """Probing every step (one more forward and backward with GRPO's loss, the method's gradient
    put back) trains the same weights and logs the same numbers as never probing."""
    runs = {}
    for every in (0, 1):
        t = _trainer(tmp_path / str(every), f"grad_cosine_every={every}", *extra, algo=algo)
        records = t.train()
        runs[every] = (t, records)
    for a, b in zip(runs[0][0].model.parameters(), runs[1][0].model.parameters()):
        assert torch.equal(a, b)
    for plain, probed in zip(runs[0][1], runs[1][1]):
        extra_keys = {k for k in probed if k.startswith("grad/")}
        assert extra_keys == {"grad/cos_grpo", "grad/norm_ratio_grpo"}
        assert -1.0 <= probed["grad/cos_grpo"] <= 1.0 + 1e-9
        for key, value in plain.items():
            if not key.startswith(("time/", "tokens/s", "perf/")):
                assert probed[key] == value, key


def test_the_probe_measures_a_change_of_scale(tmp_path):
    """A method whose weight is the constant 0.5 (on the surrogate, KL 0) has GRPO's gradient
    times 0.5: cosine 1, norm ratio 0.5. GRPO itself records no probe."""

    def half(*, logprobs, mask, logits=None, old_logprobs=None, entropy=None):
        return torch.full_like(logprobs, 0.5)

    register_algorithm(Algorithm(name="test_half_w", label="half", color="#000", weight=half))
    try:
        t = _trainer(tmp_path / "half", "grad_cosine_every=1", "loss.kl_coef=0", algo="test_half_w")
        rec = t.train()[0]
        assert rec["grad/cos_grpo"] == pytest.approx(1.0, abs=1e-6)
        assert rec["grad/norm_ratio_grpo"] == pytest.approx(0.5, rel=1e-5)
        assert rec["weight/kept_grad_mass"] == pytest.approx(0.5)
    finally:
        ALGORITHMS.pop("test_half_w")
    rec = _trainer(tmp_path / "grpo", "grad_cosine_every=1", algo="grpo").train()[0]
    assert "grad/cos_grpo" not in rec
    assert rec["weight/kept_grad_mass"] == pytest.approx(1.0)
    assert rec["weight/q05"] == rec["weight/q95"] == 1.0


def test_every_step_records_the_weights_of_its_tokens(tmp_path):
    t = _trainer(tmp_path, "grad_cosine_every=2", steps=2)
    t.train()
    records = read_metrics(tmp_path / "metrics.jsonl")
    for r in records:
        qs = [r[f"weight/q{q}"] for q in ("05", "25", "50", "75", "95")]
        assert qs == sorted(qs) and 0.1 - 1e-6 <= qs[0] and qs[-1] <= 2.0
        assert 0.0 <= r["weight/at_lower"] <= 1.0 and 0.0 <= r["weight/at_upper"] <= 1.0
        assert r["weight/kept_grad_mass"] > 0
    assert "grad/cos_grpo" not in records[0] and "grad/cos_grpo" in records[1]


def _kl_inputs():
    g = torch.Generator().manual_seed(0)
    lp = torch.log(torch.rand(2, 4, generator=g, dtype=torch.float64)).requires_grad_(True)
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]], dtype=torch.bool)
    return lp, mask


def _kl_of(lp, ref, mask, kl_weighting, algo="tr_grpo"):
    x = LossInputs(lp, lp.detach(), torch.zeros(2, dtype=lp.dtype), mask, ref_logprobs=ref)
    out = method_loss(
        get_algorithm(algo),
        {"alpha": 3.0, "tau": 0.5, "mu": 0.5, "lower": 0.1, "upper": 2.0} if algo != "grpo" else {},
        x,
        aggregate=lambda m, t, s: m[t].sum(),
        kl_penalty=k3_kl,
        clip_low=0.2,
        clip_high=0.2,
        dual_clip=None,
        kl_coef=1.0,
        kl_weighting=kl_weighting,
    )
    return out


def test_kl_weighting_options():
    lp, mask = _kl_inputs()
    ref = lp.detach() - 0.3
    plain = _kl_of(lp, ref, mask, "none")
    w = plain.weights
    torch.testing.assert_close(plain.kl_tokens, torch.where(mask, k3_kl(lp, ref), 0.0))
    term = _kl_of(lp, ref, mask, "term")
    torch.testing.assert_close(term.kl_tokens, torch.where(mask, w * k3_kl(lp, ref), 0.0))
    ratio = _kl_of(lp, ref, mask, "ratio")
    torch.testing.assert_close(
        ratio.kl_tokens, torch.where(mask, k3_kl(lp + torch.where(mask, w, 1.0).log(), ref), 0.0)
    )
    # where the policies agree: none and term are zero; the ratio form is 1/w + log w - 1 > 0
    same = lp.detach()
    assert float(_kl_of(lp, same, mask, "none").kl_loss.detach()) == 0.0
    assert float(_kl_of(lp, same, mask, "term").kl_loss.detach()) == 0.0
    at_identity = _kl_of(lp, same, mask, "ratio").kl_tokens.detach()
    want = torch.where(mask, 1 / w + w.log() - 1, 0.0)
    torch.testing.assert_close(at_identity, torch.where(mask, want, 0.0))
    assert float(at_identity[mask].min()) > 0  # the reviewers' objection
    # a method without a weight: every option is the plain KL
    for kw in ("term", "ratio"):
        torch.testing.assert_close(_kl_of(lp, ref, mask, kw, "grpo").kl_tokens, plain.kl_tokens)
    with pytest.raises(ValueError, match="kl_weighting"):
        _kl_of(lp, ref, mask, "both")
