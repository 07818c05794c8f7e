"""Checks against the real verl 0.9.1, run inside its own venv by ``scripts/test_integrations.sh``.

Not collected by the main suite (the file name does not match ``test_*.py``): it needs verl.
"""

from __future__ import annotations

from importlib.metadata import entry_points, version

import pytest
import torch
import verl  # noqa: F401  (loads the verl.plugins entry points, ours included)
from omegaconf import OmegaConf
from tensordict import TensorDict
from verl.trainer.ppo.core_algos import POLICY_LOSS_REGISTRY, get_policy_loss_fn
from verl.utils import tensordict_utils as tu
from verl.utils.config import omega_conf_to_dataclass
from verl.utils.import_utils import load_extern_object
from verl.workers.utils.losses import ppo_loss
from verl.workers.utils.padding import left_right_2_no_padding, no_padding_2_padding

from rlvr.agents.algorithms.entropy_top import entropy_top_weights
from rlvr.agents.algorithms.lopti import lopti_masks
from rlvr.agents.losses import policy_loss
from rlvr.agents.weights import token_weights
from rlvr.integrations.verl import actor as verl_actor
from rlvr.integrations.verl import plugin as verl_plugin
from rlvr.integrations.verl.data import verl_rows

AGG_MODES = ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"]


def actor_config(loss_mode="vanilla", agg="token-mean", **policy_loss_keys):
    """A real verl ``FSDPActorConfig`` built the way verl's workers build it (Hydra
    ``_target_``s)."""
    cfg = {
        "_target_": "verl.workers.config.FSDPActorConfig",
        "strategy": "fsdp",
        "rollout_n": 2,
        "ppo_micro_batch_size_per_gpu": 2,
        "clip_ratio_low": 0.2,
        "clip_ratio_high": 0.28,
        "clip_ratio_c": 3.0,
        "loss_agg_mode": agg,
        "policy_loss": {
            "_target_": "rlvr.integrations.verl.plugin.RlvrPolicyLossConfig",
            "loss_mode": loss_mode,
            **policy_loss_keys,
        },
    }
    return omega_conf_to_dataclass(OmegaConf.create(cfg))


def tensors(seed=0, b=6, t=9):
    g = torch.Generator().manual_seed(seed)
    old = -torch.rand(b, t, generator=g, dtype=torch.float64) * 3.0
    new = (old + 0.4 * torch.randn(b, t, generator=g, dtype=torch.float64)).clamp(max=0.0)
    adv = torch.randn(b, generator=g, dtype=torch.float64).unsqueeze(-1).expand(b, t).contiguous()
    lengths = torch.randint(0, t + 1, (b,), generator=g)
    lengths[0] = t
    mask = torch.arange(t).unsqueeze(0) < lengths.unsqueeze(-1)
    return old, new.requires_grad_(True), adv, mask


def test_versions_and_entry_point():
    assert version("verl") == "0.9.1"
    names = {ep.name: ep.value for ep in entry_points(group="verl.plugins")}
    assert names.get("rlvr") == "rlvr.integrations.verl.plugin", (
        'pyproject.toml needs [project.entry-points."verl.plugins"] '
        'rlvr = "rlvr.integrations.verl.plugin"'
    )


@pytest.mark.parametrize("name", verl_plugin.PLUGIN_LOSSES)
def test_losses_found_by_name_after_import_verl(name):
    assert name in POLICY_LOSS_REGISTRY
    assert get_policy_loss_fn(name).__module__ == "rlvr.integrations.verl.plugin"


@pytest.mark.parametrize("agg", AGG_MODES)
@pytest.mark.parametrize("name", verl_plugin.PLUGIN_LOSSES)
def test_plugin_equals_native(name, agg):
    keys = (
        {"alpha": 1.3, "tau": 0.5, "mu": 0.2, "lower": 0.05, "upper": 2.0}
        if name != "ar"
        else {"ar_alpha": 0.1}
    )
    config = actor_config(name, agg, **keys)
    old, new, adv, mask = tensors()
    loss, metrics = get_policy_loss_fn(name)(
        old_log_prob=old,
        log_prob=new,
        advantages=adv,
        response_mask=mask,
        loss_agg_mode=agg,
        config=config,
        rollout_is_weights=None,
    )
    (grad,) = torch.autograd.grad(loss, new)

    params = {"alpha": 0.1} if name == "ar" else {**keys, "shaping_input": "prob"}
    w = token_weights(name, logprobs=new, mask=mask, old_logprobs=old, **params)
    new2 = new.detach().clone().requires_grad_(True)
    native, native_metrics = policy_loss(
        new2, old, adv, mask, weights=w, clip_low=0.2, clip_high=0.28, dual_clip=3.0, agg=agg
    )
    (native_grad,) = torch.autograd.grad(native, new2)
    torch.testing.assert_close(loss, native)
    torch.testing.assert_close(grad, native_grad)
    assert metrics["actor/pg_clipfrac"] == pytest.approx(native_metrics["clip_frac"])
    assert metrics["actor/rlvr_weight_mean"] == pytest.approx(native_metrics["weight/mean"])
    assert not torch.allclose(w[mask], torch.ones_like(w[mask]))  # the shaping is visible


def test_vanilla_equals_native_grpo():
    """Our native policy_loss is verl's vanilla loss when every weight is 1 (same contract)."""
    config = actor_config("vanilla", "seq-mean-token-mean")
    old, new, adv, mask = tensors(seed=3)
    loss, _ = get_policy_loss_fn("vanilla")(
        old, new, adv, mask, "seq-mean-token-mean", config, None
    )
    native, _ = policy_loss(
        new, old, adv, mask, clip_low=0.2, clip_high=0.28, dual_clip=3.0, agg="seq-mean-token-mean"
    )
    torch.testing.assert_close(loss, native)


def test_hyperparameters_come_from_config_and_global_batch_info():
    old, new, adv, mask = tensors(seed=1)
    a, _ = get_policy_loss_fn("grpo_sg")(
        old, new, adv, mask, "token-mean", actor_config("grpo_sg", alpha=1.0)
    )
    b, _ = get_policy_loss_fn("grpo_sg")(
        old, new, adv, mask, "token-mean", actor_config("grpo_sg", alpha=2.0)
    )
    assert not torch.allclose(a, b)
    config = actor_config("grpo_sg")
    config.global_batch_info.update(
        {"dp_size": 1, "batch_num_tokens": 1000, "global_batch_size": None}
    )
    c, _ = get_policy_loss_fn("grpo_sg")(old, new, adv, mask, "token-mean", config)
    native, _ = policy_loss(
        new,
        old,
        adv,
        mask,
        clip_low=0.2,
        clip_high=0.28,
        dual_clip=3.0,
        weights=token_weights("grpo_sg", logprobs=new, mask=mask, shaping_input="prob"),
        batch_num_tokens=1000,
    )
    torch.testing.assert_close(c, native)
    with pytest.raises(ValueError, match="shaping_input"):
        get_policy_loss_fn("grpo_sg")(
            old, new, adv, mask, "token-mean", actor_config("grpo_sg", shaping_input="logit")
        )


def test_rollout_is_weights_multiply_the_surrogate():
    old, new, adv, mask = tensors(seed=2)
    config = actor_config("ar", "seq-mean-token-sum")
    ones = torch.ones_like(old)
    a, _ = get_policy_loss_fn("ar")(old, new, adv, mask, "seq-mean-token-sum", config, None)
    b, _ = get_policy_loss_fn("ar")(old, new, adv, mask, "seq-mean-token-sum", config, ones)
    c, _ = get_policy_loss_fn("ar")(old, new, adv, mask, "seq-mean-token-sum", config, 2 * ones)
    torch.testing.assert_close(a, b)
    torch.testing.assert_close(c, 2 * a)


# --- reward ------------------------------------------------------------------------------------
def test_reward_loads_like_verl_and_scores_gold_answers():
    compute_score = load_extern_object("pkg://rlvr.integrations.verl.reward", "compute_score")
    batch = load_extern_object("pkg://rlvr.integrations.verl.reward", "compute_score_batch")
    kk = list(verl_rows("kk", 4, split="test", env_kwargs={"n_people": 4}))
    math = list(verl_rows("math", 4, split="test"))
    sources, responses, golds, extras = [], [], [], []
    for row in kk:
        gt = row["reward_model"]["ground_truth"]
        sources.append(row["data_source"])
        responses.append(f"<think>solve</think><answer>{gt}</answer>")
        golds.append(gt)
        extras.append(row["extra_info"])
    for row in math:
        gt = row["reward_model"]["ground_truth"]
        sources.append(row["data_source"])
        responses.append(f"<think>solve</think> The answer is \\boxed{{{gt}}}.")
        golds.append(gt)
        extras.append(row["extra_info"])
    sources.append("rlvr/searchqa")
    responses.append("<think>x</think><answer>Paris</answer>")
    golds.append({"target": ["Paris"]})
    extras.append({})
    singles = [
        compute_score(data_source=s, solution_str=r, ground_truth=g, extra_info=e)
        for s, r, g, e in zip(sources, responses, golds, extras)
    ]
    assert [x["acc"] for x in singles] == [1.0] * len(singles)
    assert [x["score"] for x in singles] == [3.0] * 4 + [1.0] * 5
    assert (
        batch(
            data_sources=sources, solution_strs=responses, ground_truths=golds, extra_infos=extras
        )
        == singles
    )


def test_an_env_registered_outside_rlvr_exports_and_scores_through_verl():
    """One registration (``tests/_rlvr_toys.TOY``): its rows score back through the reward
    function as verl loads it."""
    from _rlvr_toys import TOY, registered

    compute_score = load_extern_object("pkg://rlvr.integrations.verl.reward", "compute_score")
    with registered(TOY):
        rows = list(verl_rows(TOY.name, 3, env_kwargs={"strict": True}))
        for row in rows:
            gt = row["reward_model"]["ground_truth"]
            args = dict(
                data_source=row["data_source"], ground_truth=gt, extra_info=row["extra_info"]
            )
            assert compute_score(solution_str=gt, **args)["acc"] == 1.0
            assert compute_score(solution_str=f"it is {gt}", **args)["acc"] == 0.0  # strict


# --- actor loss (set_loss_fn) ------------------------------------------------------------------
def engine_batch(seed=0, b=4, p=3, r=5, vocab=11):
    """A batch in the layout verl's actor update builds (left-padded prompts, right-padded
    responses), converted with verl's own ``left_right_2_no_padding``; plus packed log-probs and
    logits."""
    g = torch.Generator().manual_seed(seed)
    prompt_len = torch.tensor([3, 2, 1, 3])[:b]
    resp_len = torch.tensor([5, 3, 1, 4])[:b]
    input_ids = torch.randint(4, vocab, (b, p + r), generator=g)
    attn = torch.zeros(b, p + r, dtype=torch.long)
    for i in range(b):
        attn[i, p - prompt_len[i] : p + resp_len[i]] = 1
    response_mask = attn[:, p:].clone()
    position_ids = (attn.cumsum(-1) - 1).clamp(min=0)
    old = -torch.rand(b, r, generator=g, dtype=torch.float64) * 2
    adv = torch.randn(b, 1, generator=g, dtype=torch.float64).expand(b, r).contiguous()
    td = TensorDict(
        {
            "input_ids": input_ids,
            "attention_mask": attn,
            "response_mask": response_mask,
            "position_ids": position_ids,
            "prompts": input_ids[:, :p],
            "responses": input_ids[:, p:],
            "old_log_probs": old,
            "advantages": adv,
            "ref_log_prob": old + 0.1,
        },
        batch_size=[b],
    )
    td = left_right_2_no_padding(td)
    tu.assign_non_tensor(td, dp_size=1, batch_num_tokens=None, global_batch_size=None)
    nnz = int(attn.sum())
    logits = torch.randn(nnz, vocab, generator=g, dtype=torch.float64) * 3
    labels = torch.roll(td["input_ids"].values(), -1)
    log_probs = torch.log_softmax(logits, -1).gather(-1, labels[:, None])[:, 0]
    return td, logits, log_probs


def nested(values, td):
    return torch.nested.nested_tensor_from_jagged(values, offsets=td["input_ids"].offsets())


def test_actor_loss_grpo_equals_verl_ppo_loss():
    td, _, lp = engine_batch()
    for agg in AGG_MODES:
        config = actor_config("vanilla", agg)
        config.__dict__["use_kl_loss"] = (
            True  # frozen dataclass field; the test flips it like Hydra would
        )
        a_in = lp.clone().requires_grad_(True)
        ref, ref_metrics = ppo_loss(config, {"log_probs": nested(a_in, td)}, td)
        b_in = lp.clone().requires_grad_(True)
        ours, metrics = verl_actor.RlvrActorLoss(config, "grpo")(
            {"log_probs": nested(b_in, td)}, td
        )
        torch.testing.assert_close(ours, ref)
        torch.testing.assert_close(
            torch.autograd.grad(ours, b_in)[0], torch.autograd.grad(ref, a_in)[0]
        )
        assert set(ref_metrics) <= set(metrics)


def test_actor_loss_logit_hook_and_logit_shaped_grpo_sg():
    td, logits, lp = engine_batch(seed=1)
    loss_fn = verl_actor.RlvrActorLoss(actor_config("vanilla"), "grpo_sg", shaping_input="logit")
    hooked = loss_fn(student_logits=logits.unsqueeze(0), data=td)[verl_actor.SAMPLED_LOGIT_KEY]
    assert hooked.shape == (1, logits.shape[0])
    labels = torch.roll(td["input_ids"].values(), -1)
    torch.testing.assert_close(hooked[0], logits[torch.arange(len(labels)), labels])
    # verl divides the logits by the rollout temperature; the hook returns the raw logit
    tu.assign_non_tensor(td, temperature=0.5)
    scaled = loss_fn(student_logits=logits.unsqueeze(0) / 0.5, data=td)[
        verl_actor.SAMPLED_LOGIT_KEY
    ]
    torch.testing.assert_close(scaled, hooked)
    with pytest.raises(ValueError, match=verl_actor.SAMPLED_LOGIT_KEY):
        loss_fn({"log_probs": nested(lp, td)}, td)
    inp = lp.clone().requires_grad_(True)
    model_output = {
        "log_probs": nested(inp, td),
        verl_actor.SAMPLED_LOGIT_KEY: nested(hooked[0], td),
    }
    ours, metrics = loss_fn(model_output, td)

    new = no_padding_2_padding(model_output["log_probs"], td)
    h = no_padding_2_padding(model_output[verl_actor.SAMPLED_LOGIT_KEY], td)
    mask = td["response_mask"].to(bool)
    w = token_weights("grpo_sg", logprobs=new, mask=mask, logits=h, shaping_input="logit")
    native, _ = policy_loss(
        new,
        td["old_log_probs"],
        td["advantages"],
        mask,
        weights=w,
        clip_low=0.2,
        clip_high=0.28,
        dual_clip=3.0,
    )
    torch.testing.assert_close(ours, native)


def test_actor_loss_entropy_top_divides_by_the_mini_batch_count():
    """80/20 over a mini-batch of two forwards of 8 tokens each (verl's engine sets the global
    ``batch_num_tokens`` = 16 on both): each forward keeps its own top ``ceil(0.3 * 8) = 3``
    tokens, and the two losses add up to the kept tokens' surrogate sum over
    ``ceil(0.3 * 16) = 5``, the native update's normaliser (``rlvr.training.update``), not the 6
    kept."""
    config = actor_config("vanilla")
    loss_fn = verl_actor.RlvrActorLoss(config, "entropy_top", fraction=0.3)
    got, want = 0.0, 0.0
    for seed in (3, 4):
        td, logits, lp = engine_batch(seed=seed, b=2)
        tu.assign_non_tensor(td, dp_size=1, batch_num_tokens=16, global_batch_size=None)
        ent = -(torch.softmax(logits, -1) * torch.log_softmax(logits, -1)).sum(-1)
        out, _ = loss_fn({"log_probs": nested(lp, td), "entropy": nested(ent, td)}, td)
        got = got + out
        mask = td["response_mask"].to(bool)
        assert int(mask.sum()) == 8
        new = no_padding_2_padding(nested(lp, td), td)
        e_pad = no_padding_2_padding(nested(ent, td), td)
        kept = entropy_top_weights(logprobs=new, mask=mask, entropy=e_pad, fraction=0.3).bool()
        assert int(kept.sum()) == 3
        native, _ = policy_loss(
            new,
            td["old_log_probs"],
            td["advantages"],
            kept,
            clip_low=0.2,
            clip_high=0.28,
            dual_clip=3.0,
            batch_num_tokens=5,
        )
        want = want + native
    torch.testing.assert_close(got, want)


def test_actor_loss_entropy_top_and_lopti():
    td, logits, lp = engine_batch(seed=2)
    ent = -(torch.softmax(logits, -1) * torch.log_softmax(logits, -1)).sum(-1)
    mask = td["response_mask"].to(bool)
    new = no_padding_2_padding(nested(lp, td), td)
    config = actor_config("vanilla")
    out, _ = verl_actor.RlvrActorLoss(config, "entropy_top", fraction=0.2)(
        {"log_probs": nested(lp, td), "entropy": nested(ent, td)}, td
    )
    e_pad = no_padding_2_padding(nested(ent, td), td)
    # 80/20 as the native trainer and the official code: the surrogate averaged over the kept tokens
    kept = entropy_top_weights(logprobs=new, mask=mask, entropy=e_pad, fraction=0.2).bool()
    native, _ = policy_loss(
        new,
        td["old_log_probs"],
        td["advantages"],
        kept,
        clip_low=0.2,
        clip_high=0.28,
        dual_clip=3.0,
    )
    # verl's ppo_loss subtracts entropy_coeff * entropy (0 by default): same total
    torch.testing.assert_close(out, native)
    with pytest.raises(ValueError, match="entropy"):
        verl_actor.RlvrActorLoss(config, "entropy_top")({"log_probs": nested(lp, td)}, td)

    low, high = lopti_masks(td["old_log_probs"], mask, eta=0.5)
    for stage, stage_mask in (("low", low), ("high", high)):
        tu.assign_non_tensor(td, **{verl_actor.LOPTI_STAGE_KEY: stage})
        got, _ = verl_actor.RlvrActorLoss(config, "lopti")({"log_probs": nested(lp, td)}, td)
        # AR-Lopti: advantages zeroed outside the stage, the mean over every response token
        want, _ = policy_loss(
            new,
            td["old_log_probs"],
            td["advantages"] * stage_mask,
            mask,
            clip_low=0.2,
            clip_high=0.28,
            dual_clip=3.0,
        )
        torch.testing.assert_close(got, want)
    with pytest.raises(ValueError, match="scheme"):
        verl_actor.RlvrActorLoss(config, "nope")
