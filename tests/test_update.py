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
from rlvr.training.train_config import load_train_config
from rlvr.training.trainer import Trainer

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
    from rlvr.training.trainer import episodes_to_batch

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


#: Response tokens kept in the loss per row: micro-batches of 2 rows then hold 30, 5, 31 and 5
#: tokens, so a token mean per micro-batch and one over the mini-batch weigh them differently.
LENGTHS = [16, 14, 3, 2, 16, 15, 4, 1]


def _shape(tmp_path, algo, lengths=LENGTHS, *extra):
    """A ``micro``-profile trainer for ``algo`` (dual clip off, the reference below has none) and
    one batch of it whose loss masks keep ``lengths[i]`` tokens of row ``i``."""
    t = _trainer(tmp_path, "loss.dual_clip=null", *extra, algo=algo)
    batch, adv = _batch(t)
    for i, n in enumerate(lengths):
        assert int(batch.response_mask[i].sum()) >= n
        batch.response_mask[i, n:] = 0
    return t, batch, adv


def _stats(model, b, temp):
    return response_token_stats(
        model, b.input_ids, b.attention_mask, b.n_response, temperature=temp
    )


@torch.no_grad()
def _in_order(model, batch, rows, temp):
    """Log-probs of the whole batch, ``rows`` rows a forward in order, padded to its width."""
    parts = []
    for s in range(0, len(batch), rows):
        lp = _stats(model, batch.select(list(range(s, s + rows))), temp).logprobs
        parts.append(torch.nn.functional.pad(lp, (0, batch.n_response - lp.shape[1])))
    return torch.cat(parts)


def _step_grads(t):
    """Record the gradients before every optimizer step of ``t``'s updater (the step still runs)."""
    seen = []
    step = t.updater._optimizer_step

    def record(finite):
        seen.append([_grad(p) for p in t.model.parameters()])
        return step(finite)

    t.updater._optimizer_step = record
    return seen


def _grad(p):
    return torch.zeros_like(p) if p.grad is None else p.grad.detach().clone()


def _adamw(t, model):
    o = t.cfg.optim
    return torch.optim.AdamW(
        model.parameters(), lr=o.lr, betas=(o.beta1, o.beta2), eps=o.eps, weight_decay=0.0
    )


def _ar_lopti_update(t, batch, model, passes, old, ref, *, mini, micro, per_micro_batch):
    """One batch's update the way AR-Lopti runs it (zhyang2226/AR-Lopti@cbeb333 ``ray_trainer.py``
    ``fit`` and ``dp_actor.py`` ``update_policy``): for each ``(token advantages, KL mask)`` pass
    (Lopti's two ``update_actor`` calls), the batch split in order into mini-batches of ``mini``
    rows, each into micro-batches of ``micro`` rows, one AdamW step per mini-batch. The loss of a
    micro-batch is ``pg + kl_coef * kl`` over its response tokens, either as AR-Lopti's old verl
    has it (``per_micro_batch``: the micro-batch's token mean, divided by the number of
    micro-batches) or as verl 0.9.1 (the sum over the mini-batch's token count). Returns the
    gradients before each step."""
    lc, temp = t.cfg.loss, t.cfg.rollout.temperature
    opt = _adamw(t, model)
    grads = []
    for adv_tok, kl_mask in passes:
        for start in range(0, len(batch), mini):
            n_mini = batch.response_mask[start : start + mini].sum()
            for s in range(start, start + mini, micro):
                idx = list(range(s, s + micro))
                b = batch.select(idx)
                w, mask = b.n_response, b.response_mask.bool()
                lp = _stats(model, b, temp).logprobs
                pg = _verl_style_pg(lp, old[idx, :w], adv_tok[idx, :w], lc.clip_low, lc.clip_high)
                kl = k3_kl(lp, ref[idx, :w]) * kl_mask[idx, :w]
                total = torch.where(mask, pg + lc.kl_coef * kl, torch.zeros_like(pg)).sum()
                if per_micro_batch:
                    loss = total / mask.sum() / (mini // micro)
                else:
                    loss = total / n_mini
                loss.backward()
            grads.append([_grad(p) for p in model.parameters()])
            torch.nn.utils.clip_grad_norm_(model.parameters(), t.cfg.optim.grad_clip)
            opt.step()
            opt.zero_grad(set_to_none=True)
    return grads


def _assert_same_grads(got, want):
    assert len(got) == len(want)
    for step_got, step_want in zip(got, want):
        for a, b in zip(step_got, step_want):
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)


def _relative_gap(a, b):
    flat_a = torch.cat([g.flatten() for step in a for g in step])
    flat_b = torch.cat([g.flatten() for step in b for g in step])
    return float((flat_a - flat_b).norm() / flat_b.norm())


def _references(t, batch, model0, passes_of, *, mini, micro):
    """The AR-Lopti reference both ways, each from its own copy of ``model0``."""
    out = {}
    temp = t.cfg.rollout.temperature
    old = _in_order(model0, batch, micro, temp)
    ref = _in_order(t.policy.reference, batch, micro, temp)
    for per_micro_batch in (False, True):
        model = copy.deepcopy(model0)
        passes = passes_of(old)
        out[per_micro_batch] = _ar_lopti_update(
            t,
            batch,
            model,
            passes,
            old,
            ref,
            mini=mini,
            micro=micro,
            per_micro_batch=per_micro_batch,
        )
        out[per_micro_batch, "model"] = model
    return out


def test_lopti_at_the_paper_batch_shape_equals_ar_lopti(tmp_path):
    """AR-Lopti's Lopti with several mini- and micro-batches: old log-probs once; advantages
    zeroed outside the stage and KL times the stage mask, both over every response token; the low
    pass then the high pass, each over the same mini-batches split in order (``batch.split``),
    one optimizer step per mini-batch. The micro-batches normalise as verl 0.9.1 does (the
    mini-batch's token count), not as AR-Lopti's old verl (a token mean per micro-batch over the
    number of micro-batches): ``docs/algorithms.md``, "Normalisers"."""
    mini, micro = 4, 2
    t, batch, adv = _shape(
        tmp_path, "lopti", LENGTHS, f"mini_batch_size={mini}", f"micro_batch_size={micro}"
    )
    model0 = copy.deepcopy(t.model)
    mask = batch.response_mask.bool()
    old = _in_order(model0, batch, micro, t.cfg.rollout.temperature)
    # eta in the widest gap between the middle old probabilities: no token sits on the threshold
    p = old.exp()[mask].sort().values
    mid = torch.arange(len(p) // 4, 3 * len(p) // 4)
    i = int(mid[(p[mid + 1] - p[mid]).argmax()])
    eta = float(p[i] + p[i + 1]) / 2
    t.updater.params = {**t.updater.params, "eta": eta}

    def passes_of(old):
        low = mask & (old.exp() < eta)
        return [
            (adv[:, None] * stage.to(old.dtype), stage.to(old.dtype))
            for stage in (low, mask & ~low)
        ]

    want = _references(t, batch, model0, passes_of, mini=mini, micro=micro)
    got = _step_grads(t)
    t.update(batch, adv, 1)
    assert len(got) == 4  # 2 stages x 2 mini-batches
    _assert_same_grads(got, want[False])
    for a, b in zip(t.model.parameters(), want[False, "model"].parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    assert _relative_gap(want[True], want[False]) > 0.1  # the two conventions differ here


def test_ar_with_micro_batches_normalises_over_the_mini_batch(tmp_path):
    """AR (AR-Lopti's ``both_linear_normal`` reweighting of the advantage by the old probability)
    with one mini-batch of four micro-batches: the gradient is verl 0.9.1's (every micro-batch
    summed over the mini-batch's token count), not AR-Lopti's token mean per micro-batch over the
    number of micro-batches; both are computed here."""
    t, batch, adv = _shape(tmp_path, "ar", LENGTHS, "micro_batch_size=2")
    alpha = t.updater.params["alpha"]
    assert alpha == 0.2  # AR-Lopti@b92ba16 scripts/train_kklogic_AR_4x80GB.sh REWEIGHT_K
    model0 = copy.deepcopy(t.model)
    mask = batch.response_mask.to(torch.float32)

    def passes_of(old):
        return [(adv[:, None] * (alpha * old.exp() + 1 - alpha), mask)]

    want = _references(t, batch, model0, passes_of, mini=len(batch), micro=2)
    got = _step_grads(t)
    t.update(batch, adv, 1)
    _assert_same_grads(got, want[False])
    assert _relative_gap(want[True], want[False]) > 0.1


def _entropy_top_reference(t, batch, model, old, ref, adv, *, micro, per_forward):
    """80/20 over one mini-batch of forwards of ``micro`` rows, as the official code selects
    (Shenzhi-Wang/Beyond-the-80-20-Rule-RLVR@6f5dda6 ``core_algos.get_global_entropy_top_mask``:
    the top ``int(0.2 * n + 0.9999)`` of each forward's n response tokens by its entropy),
    normalised either per forward as there (each forward's mean over its kept tokens, KL its
    token mean, both over the number of forwards) or over the mini-batch
    (``ceil(0.2 * N)`` and ``N``). Returns the gradient."""
    lc, temp = t.cfg.loss, t.cfg.rollout.temperature
    n_all = float(batch.response_mask.sum())
    k_all = max(1, int(n_all * 0.2 + 0.9999))
    forwards = len(batch) // micro
    for s in range(0, len(batch), micro):
        idx = list(range(s, s + micro))
        b = batch.select(idx)
        w, mask = b.n_response, b.response_mask.bool()
        stats = _stats(model, b, temp)
        positions = mask.flatten().nonzero().squeeze(1)
        k = max(1, int(len(positions) * 0.2 + 0.9999))
        top = positions[torch.topk(stats.entropy.flatten()[positions], k).indices]
        kept = torch.zeros(mask.numel(), dtype=torch.bool)
        kept[top] = True
        kept = kept.view_as(mask)
        lp = stats.logprobs
        a = adv[idx, None].expand_as(lp)
        pg = _verl_style_pg(lp, old[idx, :w], a, lc.clip_low, lc.clip_high)
        kl = k3_kl(lp, ref[idx, :w])
        if per_forward:
            loss = (pg[kept].sum() / k + lc.kl_coef * kl[mask].mean()) / forwards
        else:
            loss = pg[kept].sum() / k_all + lc.kl_coef * kl[mask].sum() / n_all
        loss.backward()
    grads = [[_grad(p) for p in model.parameters()]]
    model.zero_grad(set_to_none=True)
    return grads


def test_entropy_top_with_several_forwards_divides_as_verl(tmp_path):
    """80/20 with two forwards of 31 and 29 response tokens per mini-batch: each forward keeps
    its top 20 % (7 and 6 tokens) by its own entropy, and the kept tokens' surrogate sum is divided
    by ``ceil(0.2 * 60) = 12``, the count verl's actor loss uses (``RlvrActorLoss``: the global
    ``batch_num_tokens``), not by the 13 kept, nor per forward as the official code does."""
    lengths = [16, 8, 4, 3, 16, 9, 2, 2]
    t, batch, adv = _shape(tmp_path, "entropy_top", lengths, "micro_batch_size=4")
    temp = t.cfg.rollout.temperature
    model0 = copy.deepcopy(t.model)
    old = _in_order(model0, batch, 4, temp)
    ref = _in_order(t.policy.reference, batch, 4, temp)
    want = {
        per_forward: _entropy_top_reference(
            t, batch, model0, old, ref, adv, micro=4, per_forward=per_forward
        )
        for per_forward in (False, True)
    }
    got = _step_grads(t)
    t.update(batch, adv, 1)
    _assert_same_grads(got, want[False])
    assert _relative_gap(want[True], want[False]) > 0.02


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
