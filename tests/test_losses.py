"""Policy loss: gradient = weight x GRPO gradient, docs/design.md §5 bound, clip/dual clip, k3 KL,
verl aggregation modes (fully masked rows included), metrics and bad configuration."""

from __future__ import annotations

import math
from functools import partial

import pytest
import torch
import torch.nn.functional as F

from rlvr.agents.algorithms.entropy_top import entropy_top_weights
from rlvr.agents.losses import AGG_MODES, agg_loss, clipped_surrogate, k3_kl, policy_loss
from rlvr.agents.weights import token_weights

B, T, V = 3, 5, 11


def _batch(seed=0):
    g = torch.Generator().manual_seed(seed)
    logits = (3.0 * torch.randn(B, T, V, generator=g, dtype=torch.float64)).requires_grad_(True)
    tokens = torch.randint(0, V, (B, T), generator=g)
    mask = torch.tensor([[1, 1, 1, 1, 0], [1, 1, 0, 0, 0], [1, 1, 1, 1, 1]])
    # old log-probs off by up to +-1.5 so some tokens are clipped and some dual-clipped
    noise = 3.0 * (torch.rand(B, T, generator=g, dtype=torch.float64) - 0.5)
    adv = torch.tensor([1.3, -0.7, -2.0], dtype=torch.float64)
    return logits, tokens, mask, noise, adv


def _forward(logits, tokens):
    logp_all = F.log_softmax(logits, dim=-1)
    logprobs = logp_all.gather(-1, tokens[..., None]).squeeze(-1)
    sampled_logit = logits.gather(-1, tokens[..., None]).squeeze(-1)
    entropy = -(logp_all.exp() * logp_all).sum(-1)
    return logprobs, sampled_logit, entropy


SCHEMES = [
    ("grpo", {}),
    ("grpo_sg", {"shaping_input": "prob"}),
    ("grpo_sg", {"shaping_input": "logit", "tau": 2.0, "alpha": 2.0}),
    ("reverse", {"shaping_input": "prob"}),
    ("reverse", {"shaping_input": "logit", "tau": 2.0, "alpha": 4.0}),
    ("ar", {"alpha": 0.3}),
    ("entropy_top", {"fraction": 0.2}),
]


@pytest.mark.parametrize("scheme,params", SCHEMES)
@pytest.mark.parametrize("dual_clip", [None, 3.0])
def test_weighted_gradient_is_weight_times_grpo_gradient(scheme, params, dual_clip):
    logits, tokens, mask, noise, adv = _batch()
    logprobs, h, entropy = _forward(logits, tokens)
    old = logprobs.detach() + noise
    # 80/20's token selection as a 0/1 weight (the algorithm applies it as a mask)
    weigh = entropy_top_weights if scheme == "entropy_top" else partial(token_weights, scheme)
    w = weigh(
        logprobs=logprobs.detach(), mask=mask, logits=h, old_logprobs=old, entropy=entropy, **params
    )
    assert not w.requires_grad
    kw = {"clip_low": 0.2, "clip_high": 0.28, "dual_clip": dual_clip}
    s_w = clipped_surrogate(logprobs, old, adv[:, None], weights=w, **kw)["pg"]
    terms = clipped_surrogate(logprobs, old, adv[:, None], **kw)
    s_1 = terms["pg"]
    assert terms["clipped"].any() and terms["dual_clipped"].any() == (dual_clip is not None)
    # each token's loss depends only on its own logits row, so summing isolates per-token gradients
    (g_w,) = torch.autograd.grad(s_w.sum(), logits, retain_graph=True)
    (g_1,) = torch.autograd.grad(s_1.sum(), logits, retain_graph=True)
    torch.testing.assert_close(g_w, w[..., None] * g_1, rtol=1e-12, atol=1e-12)
    assert g_1.abs().sum() > 0
    # and through the aggregated loss, for every aggregation
    for agg in AGG_MODES:
        loss_w, _ = policy_loss(logprobs, old, adv, mask, weights=w, agg=agg, **kw)
        loss_1, _ = policy_loss(logprobs, old, adv, mask, agg=agg, **kw)
        (g_lw,) = torch.autograd.grad(loss_w, logits, retain_graph=True)
        (g_l1,) = torch.autograd.grad(loss_1, logits, retain_graph=True)
        torch.testing.assert_close(g_lw, w[..., None] * g_l1, rtol=1e-12, atol=1e-12)


def test_grpo_gradient_matches_closed_form():
    # unclipped (rho = 1): d(-A * rho)/dlogits = -A * (e_k - p) at the sampled token
    logits, tokens, _mask, _, adv = _batch(1)
    logprobs, _, _ = _forward(logits, tokens)
    s = clipped_surrogate(logprobs, logprobs.detach(), adv[:, None])["pg"]
    (g,) = torch.autograd.grad(s.sum(), logits)
    p = F.softmax(logits.detach(), -1)
    expected = -adv[:, None, None] * (F.one_hot(tokens, V).to(p.dtype) - p)
    torch.testing.assert_close(g, expected)


@pytest.mark.parametrize("n_vocab", [2, 7, 1000])
def test_design_gradient_norm_bound(n_vocab):
    g = torch.Generator().manual_seed(n_vocab)
    for scale in (0.1, 1.0, 5.0):
        logits = (
            scale * torch.randn(64, n_vocab, generator=g, dtype=torch.float64)
        ).requires_grad_(True)
        k = torch.randint(0, n_vocab, (64,), generator=g)
        nll = -F.log_softmax(logits, -1).gather(-1, k[:, None]).sum()
        (grad,) = torch.autograd.grad(nll, logits)
        norm = grad.norm(dim=-1)
        p_k = F.softmax(logits.detach(), -1).gather(-1, k[:, None]).squeeze(-1)
        lower = (1 - p_k) * math.sqrt(n_vocab / (n_vocab - 1))
        upper = math.sqrt(2) * (1 - p_k)
        assert (norm >= lower - 1e-12).all() and (norm <= upper + 1e-12).all()


def _mat():
    loss = torch.tensor(
        [[1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 7.0, 8.0], [9.0, 10.0, 11.0, 12.0]], dtype=torch.float64
    )
    mask = torch.tensor([[1, 1, 0, 0], [0, 0, 0, 0], [1, 1, 1, 1]])
    return loss, mask


def test_aggregations_match_definitions_with_fully_masked_row():
    loss, mask = _mat()
    # valid tokens: row0 {1, 2}, row1 none, row2 {9, 10, 11, 12}; non-empty rows: 2; T = 4
    assert agg_loss(loss, mask, "token-mean").item() == pytest.approx(
        (1 + 2 + 9 + 10 + 11 + 12) / 6
    )
    assert agg_loss(loss, mask, "seq-mean-token-mean").item() == pytest.approx((1.5 + 10.5) / 2)
    assert agg_loss(loss, mask, "seq-mean-token-sum").item() == pytest.approx((3 + 42) / 2)
    assert agg_loss(loss, mask, "seq-mean-token-sum-norm").item() == pytest.approx((3 + 42) / 2 / 4)
    assert agg_loss(
        loss, mask, "seq-mean-token-sum-norm", loss_scale_factor=10
    ).item() == pytest.approx(45 / 2 / 10)


def test_aggregations_ignore_masked_nan_and_fully_masked_batch():
    loss, mask = _mat()
    loss = loss.clone()
    loss[1] = float("nan")  # the fully masked row's values never leak
    for agg in AGG_MODES:
        assert torch.isfinite(agg_loss(loss, mask, agg))
    x = torch.randn(2, 3, requires_grad=True)
    for agg in AGG_MODES:
        out = agg_loss(x * 2, torch.zeros(2, 3), agg)
        assert out.item() == 0.0
        (g,) = torch.autograd.grad(out, x)
        assert torch.isfinite(g).all() and g.abs().sum() == 0


@pytest.mark.parametrize("agg", AGG_MODES)
def test_micro_batches_sum_to_mini_batch_with_global_counts(agg):
    g = torch.Generator().manual_seed(3)
    loss = torch.randn(6, 7, generator=g, dtype=torch.float64)
    mask = (torch.rand(6, 7, generator=g) > 0.4).long()
    mask[2] = 0
    full = agg_loss(loss, mask, agg)
    n_tok = mask.sum()
    n_seq = (mask.sum(-1) > 0).sum()
    parts = sum(
        agg_loss(
            loss[i : i + 2], mask[i : i + 2], agg, batch_num_tokens=n_tok, global_batch_size=n_seq
        )
        for i in range(0, 6, 2)
    )
    assert parts.item() == pytest.approx(full.item(), rel=1e-12)


def _lp(x):
    return torch.tensor([x], dtype=torch.float64)


def test_clip_and_dual_clip_values():
    logp = torch.log(_lp([1.5, 0.5, 20.0, 1.3, 1.1]))
    old = torch.zeros(1, 5, dtype=torch.float64)
    adv = _lp([1.0, -1.0, -1.0, 1.0, 1.0])
    out = clipped_surrogate(logp, old, adv, clip_low=0.2, clip_high=0.28, dual_clip=10.0)
    # rho=1.5,A=+1: max(-1.5, -1.28) = -1.28 (clipped); rho=0.5,A=-1: max(0.5, 0.8) = 0.8 (clipped)
    # rho=20,A=-1: max(20, 1.28) = 20 -> dual clip min(20, 10) = 10; rho=1.3: -1.28; rho=1.1: -1.1
    assert out["pg"][0].tolist() == pytest.approx([-1.28, 0.8, 10.0, -1.28, -1.1])
    assert out["clipped"][0].tolist() == [True, True, False, True, False]
    assert out["dual_clipped"][0].tolist() == [False, False, True, False, False]
    no_dual = clipped_surrogate(logp, old, adv, clip_low=0.2, clip_high=0.28)["pg"]
    assert no_dual[0, 2].item() == pytest.approx(20.0)
    loss, m = policy_loss(
        logp, old, adv, torch.ones(1, 5), clip_low=0.2, clip_high=0.28, dual_clip=10.0
    )
    assert loss.item() == pytest.approx((-1.28 + 0.8 + 10.0 - 1.28 - 1.1) / 5)
    assert m["clip_frac"] == pytest.approx(3 / 5)
    assert m["dual_clip_frac"] == pytest.approx(1 / 5)
    assert m["ratio/max"] == pytest.approx(20.0) and m["ratio/min"] == pytest.approx(0.5)


def test_clipped_tokens_get_no_gradient():
    logp = torch.log(_lp([1.5, 0.5, 1.1])).requires_grad_(True)
    adv = _lp([1.0, -1.0, 1.0])
    pg = clipped_surrogate(logp, torch.zeros(1, 3, dtype=torch.float64), adv)["pg"]
    (g,) = torch.autograd.grad(pg.sum(), logp)
    assert g[0].tolist() == pytest.approx([0.0, 0.0, -1.1])


def test_weight_position_ratio_vs_surrogate():
    logp = torch.zeros(1, 2, dtype=torch.float64, requires_grad=True)  # rho = 1
    old = torch.zeros(1, 2, dtype=torch.float64)
    adv = _lp([1.0, 1.0])
    w = _lp([1.5, 0.9])
    sur = clipped_surrogate(logp, old, adv, weights=w)["pg"]
    rat = clipped_surrogate(logp, old, adv, weights=w, weight_position="ratio")["pg"]
    assert sur[0].tolist() == pytest.approx([-1.5, -0.9])
    # ratio form: rho_w = w * rho = 1.5 clipped to 1.2 -> -1.2 and no gradient; 0.9 -> -0.9
    assert rat[0].tolist() == pytest.approx([-1.2, -0.9])
    (g,) = torch.autograd.grad(rat.sum(), logp)
    assert g[0].tolist() == pytest.approx([0.0, -0.9])


def test_k3_kl_value_and_zero_at_reference():
    logp = _lp([-1.0, -2.0, -0.3])
    ref = _lp([-0.5, -2.5, -0.3])
    kl = k3_kl(logp, ref)
    assert kl[0].tolist() == pytest.approx([0.1487212707001282, 0.10653065971263342, 0.0])
    same = torch.randn(4, 6, dtype=torch.float64)
    assert torch.equal(k3_kl(same, same), torch.zeros_like(same))
    # and in the loss: loss = pg + beta * agg(kl)
    mask = torch.ones(1, 3)
    adv = torch.zeros(1, dtype=torch.float64)
    loss, m = policy_loss(logp, logp, adv, mask, ref_logprobs=ref, kl_coef=0.01)
    expected_kl = (0.1487212707001282 + 0.10653065971263342) / 3
    assert loss.item() == pytest.approx(0.01 * expected_kl)
    assert m["kl"] == pytest.approx(expected_kl)
    loss0, m0 = policy_loss(logp, logp, adv, mask, ref_logprobs=ref, kl_coef=0.0)
    assert loss0.item() == 0.0 and m0["kl"] == pytest.approx(expected_kl)


def test_kl_is_not_masked_by_weights():
    logp = _lp([-1.0, -2.0])
    ref = _lp([-0.5, -2.5])
    w = _lp([0.0, 0.0])  # 80/20 mask dropping every token from the surrogate
    loss, m = policy_loss(
        logp, logp, _lp([1.0, 1.0]), torch.ones(1, 2), weights=w, ref_logprobs=ref, kl_coef=0.1
    )
    assert loss.item() == pytest.approx(0.1 * k3_kl(logp, ref).mean().item())
    assert m["kept_frac"] == 0.0 and m["weight/max"] == 0.0


def test_per_sequence_and_per_token_advantages_agree():
    logits, tokens, mask, noise, adv = _batch(2)
    logprobs, _, _ = _forward(logits, tokens)
    old = logprobs.detach() + noise
    a, _ = policy_loss(logprobs, old, adv, mask)
    b, _ = policy_loss(logprobs, old, adv[:, None].expand(B, T), mask)
    assert a.item() == pytest.approx(b.item())


def test_metrics_weights_and_kept_fraction():
    logp = torch.zeros(2, 3, dtype=torch.float64)
    mask = torch.tensor([[1, 1, 1], [1, 0, 0]])
    w = torch.tensor([[0.5, 0.0, 2.0], [1.0, 9.0, 9.0]], dtype=torch.float64)  # 9.0 is masked
    _, m = policy_loss(logp, logp, torch.ones(2, dtype=torch.float64), mask, weights=w)
    assert m["weight/mean"] == pytest.approx(3.5 / 4)
    assert m["weight/min"] == 0.0 and m["weight/max"] == 2.0
    assert m["kept_frac"] == pytest.approx(3 / 4)
    assert m["n_tokens"] == 4 and m["clip_frac"] == 0.0 and m["ratio/mean"] == pytest.approx(1.0)
    assert all(isinstance(v, float) for v in m.values())


def test_empty_mask_gives_zero_loss_and_finite_metrics():
    logits, tokens, _, noise, adv = _batch()
    logprobs, _, _ = _forward(logits, tokens)
    for agg in AGG_MODES:
        loss, m = policy_loss(
            logprobs,
            logprobs.detach() + noise,
            adv,
            torch.zeros(B, T),
            ref_logprobs=logprobs.detach(),
            kl_coef=0.1,
            agg=agg,
        )
        assert loss.item() == 0.0
        assert all(math.isfinite(v) for v in m.values())
        (g,) = torch.autograd.grad(loss, logits, retain_graph=True)
        assert torch.isfinite(g).all() and g.abs().sum() == 0


@pytest.mark.parametrize(
    "kwargs,param",
    [
        ({"agg": "token-sum"}, "agg"),
        ({"dual_clip": 1.0}, "dual_clip"),
        ({"dual_clip": 0.5}, "dual_clip"),
        ({"clip_low": 1.0}, "clip_low"),
        ({"clip_low": -0.1}, "clip_low"),
        ({"clip_high": -0.1}, "clip_high"),
        ({"kl_coef": 0.1}, "ref_logprobs"),
        ({"kl_coef": -1.0}, "kl_coef"),
        ({"weight_position": "inside"}, "weight_position"),
        ({"weights": torch.ones(2, 3)}, "weights"),
        ({"agg": "seq-mean-token-sum-norm", "loss_scale_factor": 0.0}, "loss_scale_factor"),
    ],
)
def test_bad_configuration_names_parameter(kwargs, param):
    logp = torch.zeros(2, 4)
    with pytest.raises(ValueError, match=param):
        policy_loss(logp, logp, torch.ones(2), torch.ones(2, 4), **kwargs)


def test_bad_advantage_shape():
    logp = torch.zeros(2, 4)
    with pytest.raises(ValueError, match="advantages"):
        policy_loss(logp, logp, torch.ones(3), torch.ones(2, 4))


def test_loss_config_roundtrip():
    from rlvr.config import load_config
    from rlvr.training.train_config import LossConfig

    overrides = ["clip_high=0.24", "dual_clip=10", "kl_coef=0.001", "agg=seq-mean-token-sum-norm"]
    cfg = load_config(LossConfig, None, overrides)
    logp = torch.zeros(2, 4, dtype=torch.float64)
    loss, _m = policy_loss(
        logp,
        logp,
        torch.ones(2, dtype=torch.float64),
        torch.ones(2, 4),
        ref_logprobs=logp,
        **cfg.policy_loss_kwargs(),
    )
    assert loss.item() == pytest.approx(-4 / 4)  # seq sums -4, mean over 2 rows, / T = 4
