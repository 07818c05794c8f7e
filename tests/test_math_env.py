"""rlvr/Math-v0 through gymnasium."""

from __future__ import annotations

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import rlvr  # noqa: F401  (registers the ids)


def test_check_env_synthetic():
    env = gym.make("rlvr/Math-v0", dataset="synthetic")
    check_env(env.unwrapped)


def test_check_env_math500(shared_data):
    env = gym.make("rlvr/Math-v0", dataset="math500", data_dir=str(shared_data))
    check_env(env.unwrapped)
    prompt, info = env.reset(seed=0, options={"index": 0})
    assert info["ground_truth"] == r"\left( 3, \frac{\pi}{2} \right)"
    _, reward, *_ = env.step(r"So it is $\boxed{(3, \frac{\pi}{2})}$.")
    assert reward == 1.0


def test_reset_contract_and_determinism():
    env = gym.make("rlvr/Math-v0", dataset="synthetic", difficulty=[1, 2], template="plain")
    p1, i1 = env.reset(seed=5)
    p2, i2 = env.reset(seed=5)
    assert (p1, i1) == (p2, i2)
    assert p1.startswith("System: ") and p1.endswith("Assistant: ")
    assert i1["messages"][-1] == {"role": "user", "content": i1["problem"]}
    assert isinstance(i1["ground_truth"], str) and i1["difficulty"] in (1, 2)
    _, i3 = env.reset(seed=99, options={"index": 3})
    _, i4 = env.reset(seed=1, options={"index": 3})
    assert i3["ground_truth"] == i4["ground_truth"] and i3["id"] == i4["id"]
    with pytest.raises(ValueError, match="index"):
        env.reset(options={"index": -1})


def test_step_contract():
    env = gym.make("rlvr/Math-v0", dataset="synthetic", difficulty=1, template="none")
    _, info = env.reset(seed=0)
    gt = info["ground_truth"]
    obs, reward, terminated, truncated, info = env.step(f"easy: \\boxed{{{gt}}}")
    assert (reward, terminated, truncated, info["correct"]) == (1.0, True, False, True)
    assert info["reward/answer"] == 1.0 and info["reward/format"] == 1.0
    assert info["timed_out"] is False and info["reason"] == ""
    _, reward, *_, info = env.step("I don't know")
    assert (reward, info["correct"], info["reason"]) == (0.0, False, "no_boxed")


def test_require_think_and_timeout_in_env():
    env = gym.make(
        "rlvr/Math-v0", dataset="synthetic", difficulty=1, require_think=True, timeout_s=0.5
    )
    prompt, info = env.reset(seed=0)
    assert "<think>" in prompt
    gt = info["ground_truth"]
    assert env.step(f"\\boxed{{{gt}}}")[1] == 0.0
    assert env.step(f"<think>ok</think>\\boxed{{{gt}}}")[1] == 1.0
    tower = "2^{" * 5 + "2" + "}" * 5
    *_, info = env.step(f"<think>hm</think>\\boxed{{{tower}}}")
    assert info["timed_out"] is True and info["correct"] is False


def test_answer_form_in_env_scores_the_prefill_and_refuses_expressions():
    env = gym.make("rlvr/Math-v0", difficulty=1, prefill="\\boxed{", answer_form="number")
    _, info = env.reset(seed=0)
    problem = info["problem"].removeprefix("Compute ").rstrip(".")
    *_, info_expr = env.step(problem + "}")
    assert info_expr["reason"] == "not_a_number" and not info_expr["correct"]
    env.reset(seed=0)
    assert env.step(f"{info['ground_truth']}}}")[1] == 1.0
    with pytest.raises(ValueError, match="answer_form"):
        gym.make("rlvr/Math-v0", answer_form="value")


def test_local_jsonl_dataset(tmp_path):
    path = tmp_path / "tiny.jsonl"
    path.write_text('{"problem": "2+2?", "answer": "4"}\n{"problem": "3+3?", "answer": 6.0}\n')
    env = gym.make("rlvr/Math-v0", dataset=str(path))
    _, info = env.reset(options={"index": 1})
    assert info["ground_truth"] == "6" and info["source"] == "tiny"


def test_bad_kwargs_name_the_parameter():
    with pytest.raises(ValueError, match="template"):
        gym.make("rlvr/Math-v0", template="chatml")
    with pytest.raises(ValueError, match="difficulty"):
        gym.make("rlvr/Math-v0", difficulty=9)
    with pytest.raises(ValueError, match="timeout_s"):
        gym.make("rlvr/Math-v0", timeout_s=0)
