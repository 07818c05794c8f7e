"""Group-relative advantages: hand values, Dr.GRPO, groups of one, registry, bad input."""

from __future__ import annotations

import pytest
import torch

from rlvr.agents.advantages import (
    ADVANTAGE_ESTIMATORS,
    AdvantageEstimator,
    compute_advantages,
    group_advantages,
    register_advantage_estimator,
)


def test_grpo_hand_values():
    r = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 1.0])
    a = group_advantages(r, 2)
    # groups (1, 0), (0, 1): mean 0.5, unbiased std sqrt(0.5) -> +-0.5 / (0.70711 + 1e-6)
    v = 0.7071057811879616
    assert a.tolist() == pytest.approx([v, -v, -v, v, 0.0, 0.0], abs=1e-6)
    r3 = torch.tensor([2.0, 0.0, 1.0], dtype=torch.float64)  # mean 1, unbiased std 1
    assert group_advantages(r3, 3, eps=0.0).tolist() == pytest.approx([1.0, -1.0, 0.0])


def test_drgrpo_no_std():
    r = torch.tensor([1.0, 0.0, 0.0, 0.0, 3.0, 1.0, 1.0, 1.0])
    a = group_advantages(r, 4, scale="none")
    assert a.tolist() == pytest.approx([0.75, -0.25, -0.25, -0.25, 1.5, -0.5, -0.5, -0.5])
    assert torch.equal(compute_advantages("drgrpo", r, 4), a)


def test_groups_of_one_give_zero():
    r = torch.tensor([1.0, 0.0, 0.7])
    assert group_advantages(r, 1).tolist() == [0.0, 0.0, 0.0]
    assert group_advantages(r, 1, scale="none").tolist() == [0.0, 0.0, 0.0]


def test_group_means_zero_and_dtype():
    g = torch.Generator().manual_seed(0)
    r = torch.randint(0, 2, (64,), generator=g)
    a = group_advantages(r, 8)
    assert a.dtype == torch.float32
    assert a.reshape(8, 8).sum(1).abs().max() < 1e-5
    assert torch.isfinite(a).all()


def test_registry():
    r = torch.tensor([3.0, 1.0, 0.0, 0.0])
    assert torch.equal(compute_advantages("grpo", r, 2), group_advantages(r, 2))
    assert set(ADVANTAGE_ESTIMATORS) >= {"grpo", "drgrpo"}

    def sign_adv(rewards, group_size, *, eps=1e-6):
        return torch.sign(group_advantages(rewards, group_size, scale="none"))

    register_advantage_estimator(AdvantageEstimator("test_sign", sign_adv))
    try:
        assert compute_advantages("test_sign", r, 2).tolist() == [1.0, -1.0, 0.0, 0.0]
    finally:
        ADVANTAGE_ESTIMATORS.pop("test_sign")


@pytest.mark.parametrize(
    "args,kwargs,param",
    [
        ((torch.ones(5), 2), {}, "group_size"),
        ((torch.ones(4), 0), {}, "group_size"),
        ((torch.ones(2, 2), 2), {}, "rewards"),
        ((torch.ones(4), 2), {"scale": "mad"}, "scale"),
        ((torch.ones(4), 2), {"eps": -1.0}, "eps"),
    ],
)
def test_bad_input_names_parameter(args, kwargs, param):
    with pytest.raises(ValueError, match=param):
        group_advantages(*args, **kwargs)
    with pytest.raises(ValueError, match="estimator"):
        compute_advantages("ppo", torch.ones(4), 2)


def test_a_new_estimator_is_one_registration(tmp_path):
    """An estimator defined in the tests alone is chosen by ``loss.advantage`` and trains; a verl
    launch refuses it in one line, since it declares no verl mapping, and maps the built-ins."""
    from rlvr.config import ConfigError
    from rlvr.integrations.verl.config import VerlTranslationError, translate
    from rlvr.reproduce.grid import get_grid
    from rlvr.reproduce.runs import eval_config, train_config
    from rlvr.training.train_config import load_train_config
    from rlvr.training.trainer import Trainer

    seen = []

    def leave_one_out(rewards, group_size, *, eps=1e-6):
        """``r_i`` minus the mean of the group's other rewards (RLOO)."""
        seen.append(rewards.numel())
        r = rewards.float().reshape(-1, group_size)
        return (r - (r.sum(1, keepdim=True) - r) / (group_size - 1)).reshape(-1)

    register_advantage_estimator(AdvantageEstimator("toy_loo", leave_one_out))
    try:
        cfg = load_train_config(
            ["profile=micro", "steps=1", "loss.advantage=toy_loo", f"out={tmp_path}"]
        )
        Trainer(cfg).train()
        assert seen == [cfg.prompts_per_step * cfg.group_size]
        setting = get_grid("paper").settings["kk"]
        paper = train_config(setting, "grpo", 0, {"loss.advantage": "toy_loo"})
        ecfg = eval_config(setting, paper, paper.model)
        kw = {"gpus": 8, "run_name": "r", "train_files": ["t"], "val_files": ["v"]}
        with pytest.raises(VerlTranslationError, match="loss.advantage='toy_loo': verl has no"):
            translate(paper, ecfg, **kw)
    finally:
        ADVANTAGE_ESTIMATORS.pop("toy_loo")
    with pytest.raises(ConfigError, match="loss.advantage: .*'toy_loo'"):
        load_train_config(["profile=micro", "loss.advantage=toy_loo", f"out={tmp_path}"])
