"""The digits env (``rlvr/Digits-v0``): its reward, its tasks, and what it is for: a random
model's groups have reward variance on it, so the quick paths (micro profile, smoke grid) train."""

from __future__ import annotations

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import rlvr  # noqa: F401  (registers the envs)
from rlvr.agents.metrics import no_variance_line
from rlvr.envs import env_spec
from rlvr.envs.digits import SYSTEM_PROMPT, DigitsEnv, score, task_at
from rlvr.integrations.verl.reward import compute_score
from rlvr.models.prompt_formats import with_format
from rlvr.prompt_format import write_format
from rlvr.training.train_config import load_train_config, profile_env
from rlvr.training.trainer import Trainer


def test_reward_is_digit_share_plus_the_exact_sum():
    assert score("14", "14").reward == 2.0 and score(" 14\n", "14").correct
    s = score("12", "14")
    assert (s.reward, s.correct, s.reason) == (1.0, False, "wrong sum")
    s = score("a1b2", "14")
    assert s.components == {"format": 0.5, "answer": 0.0} and s.reason == "not a number alone"
    assert score("", "14").reward == 0.0 and score("", "14").reason == "empty response"
    assert score(None, "3").reward == 0.0  # never raises
    assert score("x" * 10 + "14", "14").reward == pytest.approx(2 / 12)


def test_env_contract_and_tasks():
    env = gym.make("rlvr/Digits-v0", n_digits=[1, 2], template="plain")
    check_env(env.unwrapped)
    prompt, info = env.reset(seed=0, options={"index": 1})
    a, b, n = task_at(1, "train", [1, 2])
    assert n == 2 and 10 <= a < 100 and f"What is {a} + {b}?" in prompt
    assert info["ground_truth"] == str(a + b) and info["n_digits"] == 2
    _, reward, terminated, _, info = env.step(str(a + b))
    assert terminated and reward == 2.0 and info["correct"]
    assert task_at(1, "test", [1, 2]) != task_at(1, "train", [1, 2])  # separate streams
    assert task_at(5, "train", [1]) == task_at(5, "train", [1])


@pytest.mark.parametrize("bad", [0, 5, [], "2", True])
def test_bad_n_digits_is_one_line(bad):
    with pytest.raises(ValueError, match="n_digits must be"):
        DigitsEnv(n_digits=bad)


def test_registered_and_scored_through_verls_signature():
    spec = env_spec("digits")
    assert spec.id == "rlvr/Digits-v0" and spec.group_key == "n_digits"
    assert compute_score("rlvr/digits", "14", "14", {})["score"] == 2.0
    # its prompt format: what a model trained on it carries (rlvr.models.prompt_formats)
    assert spec.prompt_settings({"template": "plain"}) == {
        "template": "plain",
        "system_prompt": SYSTEM_PROMPT,
    }
    assert spec.traces is None and not spec.verl.agent_loop  # no tiny base, single-turn


def test_a_model_trained_on_digits_carries_its_format(tmp_path, capsys):
    final = tmp_path / "final"
    final.mkdir()
    write_format(final, "digits", {"template": "plain", "n_digits": 1, "split": "train"}, "micro")
    kwargs, fmt = with_format(str(final), "digits", {})
    assert kwargs == {"template": "plain", "n_digits": 1} and not fmt.from_scratch
    # evaluated on another env (the smoke grid's K&K): that env's own settings, said in one line
    assert with_format(str(final), "kk", {"template": "plain"})[0] == {"template": "plain"}
    assert "was made for env=digits" in capsys.readouterr().err


def test_the_micro_profile_defaults_to_digits():
    assert profile_env("micro") == "digits"
    cfg = load_train_config(["profile=micro", "out=x"])
    assert cfg.env == "digits" and cfg.env_kwargs == {"template": "plain", "n_digits": 1}
    kk = load_train_config(["profile=micro", "env=kk", "out=x"])
    assert kk.env == "kk" and kk.env_kwargs["n_people"] == 2
    assert profile_env("tiny") == ""  # no env named: TrainConfig's default


def test_micro_trains_on_digits_and_says_when_groups_lack_variance(tmp_path, capsys):
    """On digits a random micro model's groups have reward variance (non-zero gradient); on
    K&K every response scores -3 and the run says so in one line."""
    common = ["profile=micro", "steps=2", "progress=false", "num_threads=1"]
    records = Trainer(load_train_config([*common, f"out={tmp_path / 'd'}"])).train()
    assert all(r["grad_norm"] > 0 and r["reward/std"] > 0 for r in records)
    assert "no reward variance" not in capsys.readouterr().err
    records = Trainer(load_train_config([*common, "env=kk", f"out={tmp_path / 'k'}"])).train()
    assert all(r["groups/zero_std"] == 1.0 for r in records)
    assert no_variance_line(2, 2) in capsys.readouterr().err.splitlines()


def test_no_variance_line():
    assert no_variance_line(0, 5) is None
    assert no_variance_line(3, 5, engine="rlvr verl") == (
        "[rlvr verl] 3 of 5 steps had no reward variance in any group (every advantage 0): "
        "no policy-gradient update on them"
    )
