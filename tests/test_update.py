"""The update on the CPU, for the bugs that show on a GPU: device placement, mixed precision,
gradient checkpointing, loss normalisers across micro-batchings, and the baselines' staging
checked against references computed the way their code does it."""

from __future__ import annotations

import copy

import pytest
import torch

from rlvr.agents.algorithms import Algorithm, get_algorithm, register_algorithm
from rlvr.agents.losses import k3_kl
from rlvr.agents.metrics import token_prob_summary
from rlvr.agents.policy import response_token_stats
from rlvr.agents.train_config import load_train_config
from rlvr.agents.trainer import Trainer

from _rlvr_toys import LetterEnv

torch.set_num_threads(1)


def _trainer(tmp_path, *extra, algo="grpo", steps=1):
    cfg = load_train_config(
        [
            f"out={tmp_path}",
            f"algo={algo}",
            "profile=micro",
            "env=kk",
            f"steps={steps}",
            "progress=false",
            *extra,
        ]
    )
    return Trainer(cfg, make_env=lambda split: LetterEnv())


def _batch(t, step=1):
    from rlvr.agents.advantages import group_advantages
    from rlvr.agents.trainer import episodes_to_batch

    episodes = t.rollout(step)
    rewards = torch.tensor([e.reward for e in episodes], dtype=torch.float32)
    adv = group_advantages(rewards, t.cfg.group_size, scale="std", eps=t.cfg.loss.adv_eps)
    return episodes_to_batch(episodes, t.pad_id), adv


def test_token_metrics_stay_on_the_policy_device(monkeypatch):
    # The meta device stands in for CUDA: a tensor made on the CPU next to it raises. Boolean
    # indexing on meta needs torch to assume the mask all true (it is).
    from torch.fx.experimental import _config

    monkeypatch.setattr(_config, "meta_nonzero_assume_all_nonzero", True)
    lp = torch.log(torch.rand(3, 5)).to("meta")
    out = token_prob_summary(
        lp, torch.rand(3, 5, device="meta"), torch.ones(3, 5, dtype=torch.bool, device="meta")
    )
    assert all(v.device.type == "meta" for v in out.values())


def test_bf16_master_weights_move_at_paper_learning_rate(tmp_path):
    t = _trainer(tmp_path, "dtype=bfloat16", "optim.lr=1e-6", "optim.grad_clip=0")
    before = [p.detach().clone() for p in t.model.parameters()]
    t.train()
    assert all(p.dtype == torch.float32 for p in t.model.parameters())
    moved = sum(int((a != p).sum()) for a, p in zip(before, t.model.parameters()))
    total = sum(p.numel() for p in before)
    assert moved / total > 0.9  # bf16 parameters would keep all but ~1 % of them


def test_float16_uses_a_gradient_scaler(tmp_path):
    t = _trainer(tmp_path, "dtype=float16")
    assert t.precision.scaler is not None
    scale0 = t.precision.scaler.get_scale() if t.precision.scaler.is_enabled() else None
    rec = t.train()[0]
    assert rec["update/optimizer_steps"] + rec["update/skipped"] == 1
    if scale0 is not None:
        assert t.precision.scaler.get_scale() > 0


def test_gradient_checkpointing_is_active_during_the_update(tmp_path):
    t = _trainer(tmp_path, "gradient_checkpointing=true")
    calls = []
    for layer in t.model.model.layers:
        original = layer._gradient_checkpointing_func

        def counting(*a, _f=original, **k):
            calls.append(1)
            return _f(*a, **k)

        layer._gradient_checkpointing_func = counting
    batch, adv = _batch(t)
    t.update(batch, adv, 1)
    assert len(calls) >= len(t.model.model.layers)  # every layer of every training forward
    assert not t.model.training  # back in eval mode after the update


def test_checkpointed_forward_equals_the_plain_one(tmp_path):
    t = _trainer(tmp_path)
    batch, _ = _batch(t)
    b = batch.to(t.device)
    plain = t.policy.token_stats(b.input_ids, b.attention_mask, b.n_response).logprobs
    t.model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    with t.policy.training():
        ckpt = t.policy.token_stats(b.input_ids, b.attention_mask, b.n_response).logprobs
    torch.testing.assert_close(ckpt, plain, rtol=1e-5, atol=1e-5)


def _grads_after_loss(t, batch, adv):
    t.optimizer.zero_grad(set_to_none=True)
    losses = []
    original = t.updater._optimizer_step

    def capture(finite):
        losses.append([p.grad.detach().clone() for p in t.model.parameters() if p.grad is not None])
        t.optimizer.zero_grad(set_to_none=True)
        return 0.0, True

    t.updater._optimizer_step = capture
    try:
        t.updater.update(batch, adv, 1)
    finally:
        t.updater._optimizer_step = original
    return losses[0]


@pytest.mark.parametrize("agg", ["seq-mean-token-sum-norm", "token-mean", "seq-mean-token-sum"])
def test_loss_does_not_depend_on_micro_batching(tmp_path, agg):
    t = _trainer(tmp_path, f"loss.agg={agg}")
    batch, adv = _batch(t)
    full = _grads_after_loss(t, batch, adv)
    t.cfg.micro_batch_size = 2
    parts = _grads_after_loss(t, batch, adv)
    for a, b in zip(full, parts):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)


def _verl_style_pg(logp, old, adv, clip_low, clip_high):
    ratio = torch.exp(logp - old)
    return torch.maximum(-adv * ratio, -adv * torch.clamp(ratio, 1 - clip_low, 1 + clip_high))


def test_lopti_equals_ar_lopti_reference(tmp_path):
    """AR-Lopti (zhyang2226/AR-Lopti@cbeb333): advantages zeroed outside the stage, KL times the
    stage mask, both averaged over every response token, low stage then high stage, each a full
    update with its own optimizer step; old log-probs once, before both."""
    t = _trainer(tmp_path, "weights.eta=0.0038", "loss.dual_clip=null", algo="lopti")
    batch, adv = _batch(t)
    model0 = copy.deepcopy(t.model)
    ref_model = t.policy.reference
    lc = t.cfg.loss
    t.update(batch, adv, 1)

    opt = torch.optim.AdamW(
        model0.parameters(), lr=t.cfg.optim.lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0
    )
    b = batch
    mask = b.response_mask.bool()
    temp = t.cfg.rollout.temperature

    def logprobs(model):
        return response_token_stats(
            model, b.input_ids, b.attention_mask, b.n_response, temperature=temp
        ).logprobs

    with torch.no_grad():
        old = logprobs(model0)
        ref = logprobs(ref_model)
    low = mask & (old.exp() < 0.0038)
    for stage in (low, mask & ~low):
        a = torch.where(stage, adv[:, None].expand_as(old), torch.zeros_like(old))
        lp = logprobs(model0)
        pg = _verl_style_pg(lp, old, a, lc.clip_low, lc.clip_high)
        pg_loss = (pg * mask).sum() / mask.sum()
        kld = k3_kl(lp, ref) * stage
        kl_loss = (kld * mask).sum() / mask.sum()
        (pg_loss + lc.kl_coef * kl_loss).backward()
        torch.nn.utils.clip_grad_norm_(model0.parameters(), t.cfg.optim.grad_clip)
        opt.step()
        opt.zero_grad(set_to_none=True)
    for p, q in zip(t.model.parameters(), model0.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)


def test_entropy_top_selects_on_the_current_forward(tmp_path):
    """80/20 as its official code: the entropy of the forward being trained, not the rollout's
    (Shenzhi-Wang/Beyond-the-80-20-Rule-RLVR@6f5dda6, dp_actor.update_policy)."""
    t = _trainer(tmp_path, "ppo_epochs=2", "optim.lr=0.05", algo="entropy_top")
    seen = []
    algo = t.updater.algorithm
    select = algo.select_tokens

    def spy(entropy, mask, params):
        seen.append(entropy.detach().clone())
        return select(entropy, mask, params)

    t.updater.algorithm = Algorithm(**{**algo.__dict__, "select_tokens": spy})
    batch, adv = _batch(t)
    t.update(batch, adv, 1)
    assert len(seen) == 2
    assert not torch.equal(seen[0], seen[1])  # epoch 2 sees the updated policy's entropy


def test_k3_is_clamped_as_verl():
    assert float(k3_kl(torch.tensor([0.0]), torch.tensor([15.0]))) == 10.0


def test_a_new_algorithm_is_one_registration(tmp_path):
    """A method defined in one place (here: the test) trains with no other edit."""

    def confident_only(
        *, logprobs, mask, logits=None, old_logprobs=None, entropy=None, eta: float = 0.5
    ):
        return (old_logprobs.exp() >= eta).to(logprobs.dtype)

    register_algorithm(
        Algorithm(
            name="confident_only",
            label="confident only",
            color="#000000",
            weight=confident_only,
            params=lambda wc: {"eta": wc.eta},
        )
    )
    rec = _trainer(tmp_path, "weights.eta=0.0038", algo="confident_only").train()[0]
    assert 0.0 < rec["weight/mean"] < 1.0
    assert get_algorithm("confident_only").label == "confident only"
