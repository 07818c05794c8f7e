"""rlvr/KnightsKnaves-v0: the gymnasium contract, splits, templates and step info."""

from __future__ import annotations

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import rlvr  # noqa: F401  (registers the ids)
from rlvr.envs.kk import SHORT_SYSTEM_PROMPT, KnightsKnavesEnv, compute_score
from rlvr.envs.kk.reward import row_options
from rlvr.envs.kk.traces import KK


def answer_for(info) -> str:
    return "\n".join(
        f"({i}) {n} is a {r}" for i, (n, r) in enumerate(info["ground_truth"].items(), 1)
    )


def test_make_and_check_env():
    env = gym.make("rlvr/KnightsKnaves-v0", n_people=3)
    check_env(env.unwrapped)
    prompt, info = env.reset(seed=3)
    assert prompt.startswith("<|im_start|>system\n") and prompt.endswith(
        "<|im_start|>assistant\n<think>"
    )
    assert info["n_people"] == 3 and list(info["ground_truth"]) == info["names"]
    assert set(info["ground_truth"].values()) <= {"knight", "knave"}
    assert [m["role"] for m in info["messages"]] == ["system", "user"]
    assert info["cot"].endswith(info["solution_text_format"])


def test_reset_is_deterministic_and_index_addressable():
    env = KnightsKnavesEnv(n_people=4)
    assert env.reset(seed=11)[0] == env.reset(seed=11)[0]
    assert env.reset(seed=11)[0] != env.reset(seed=12)[0]
    a = env.reset(seed=0, options={"index": 7})
    b = KnightsKnavesEnv(n_people=4).reset(seed=99, options={"index": 7})
    assert a[0] == b[0] and a[1]["ground_truth"] == b[1]["ground_truth"]


@pytest.mark.parametrize(
    "response,reward,status,fmt_err,ans_err",
    [
        ("GOLD", 3.0, "correct", False, False),
        ("WRONG", -0.5, "wrong", False, True),
        (" x </think><answer>nobody</answer>", -1.0, "unparseable", False, True),
        ("<think> x </think><answer>GOLD_TEXT</answer>", -3.0, "format_failed", True, False),
    ],
)
def test_step_rewards_and_separate_error_flags(response, reward, status, fmt_err, ans_err):
    env = KnightsKnavesEnv(n_people=3)
    _, info = env.reset(seed=5)
    gold = answer_for(info)
    first = info["names"][0]
    wrong = (
        gold.replace(f"{first} is a knight", f"{first} is a KNAVE")
        if f"{first} is a knight" in gold
        else gold.replace(f"{first} is a knave", f"{first} is a knight")
    )
    response = {
        "GOLD": f" r </think><answer>{gold}</answer>",
        "WRONG": f" r </think><answer>{wrong}</answer>",
    }.get(response, response.replace("GOLD_TEXT", gold))
    obs, r, terminated, truncated, step_info = env.step(response)
    assert (r, terminated, truncated) == (reward, True, False)
    assert step_info["correct"] == (status == "correct")
    assert step_info["answer_status"] == status
    assert (step_info["format_error"], step_info["answer_error"]) == (fmt_err, ans_err)
    assert step_info["reward/format"] + step_info["reward/answer"] == r


def test_list_of_sizes_and_test_split():
    env = KnightsKnavesEnv(n_people=[2, 5], split="test")
    assert env.num_tasks == 200
    sizes = [env.reset(seed=0, options={"index": i})[1]["n_people"] for i in range(4)]
    assert sizes == [2, 5, 2, 5]
    with pytest.raises(ValueError, match="index"):
        env.reset(options={"index": 200})
    train = KnightsKnavesEnv(n_people=3, split="train")
    assert train.num_tasks is None
    assert (
        train.reset(seed=0, options={"index": 0})[0]
        != KnightsKnavesEnv(n_people=3, split="test").reset(seed=0, options={"index": 0})[0]
    )


def test_templates_prefill_and_system_prompt():
    env = KnightsKnavesEnv(template="plain", prefill_think=False, system_prompt=SHORT_SYSTEM_PROMPT)
    prompt, info = env.reset(seed=1)
    assert prompt.startswith("System: Think inside") and prompt.endswith("Assistant: ")
    assert (
        env.step(f" r </think><answer>{answer_for(info)}</answer>")[1] == -3.0
    )  # no prefill: <think> missing
    assert env.step(f"<think> r </think><answer>{answer_for(info)}</answer>")[1] == 3.0
    bare, _ = KnightsKnavesEnv(template="none").reset(seed=1)
    assert "<|im_start|>" not in bare and bare.endswith("\n<think>")


def test_an_answer_prefill_starts_the_turn_and_is_scored_in_front():
    """``answer_prefill`` follows ``<think>``: a model answers at once in the rewarded layout,
    and the response is scored with both in front (as verl's reward and ``rlvr score`` read
    the row)."""
    prefill = "</think><answer>(1)"
    env = KnightsKnavesEnv(n_people=2, template="plain", answer_prefill=prefill)
    prompt, info = env.reset(seed=1)
    assert prompt.endswith("Assistant: <think>" + prefill)
    assert info["prefill"] == "<think>" + prefill
    rest = answer_for(info).removeprefix("(1)") + "</answer>"
    assert env.step(rest)[1] == 3.0
    env.reset(seed=1)
    assert env.step(f"<think> r </think><answer>{answer_for(info)}</answer>")[1] < 0
    options = row_options({"answer_prefill": prefill}, prompt)
    assert options == {"prefilled_think": True, "answer_prefill": prefill}
    assert compute_score("kk_logic", rest, info["ground_truth"], options)["score"] == 3.0
    assert row_options({}, prompt) == {"prefilled_think": False}  # the prompt ends otherwise
    with pytest.raises(ValueError, match="answer_prefill"):
        KnightsKnavesEnv(answer_prefill=1)


def test_warm_start_traces_refuse_an_answer_prefill():
    with pytest.raises(ValueError, match="answer_prefill"):
        next(KK.examples({**KK.tiny, "answer_prefill": "</think>"}, 0, "train"))


@pytest.mark.parametrize(
    "kwargs,word",
    [
        ({"n_people": 1}, "n_people"),
        ({"n_people": []}, "n_people"),
        ({"split": "dev"}, "split"),
        ({"template": "chatml"}, "template"),
        ({"depth": 1}, "depth"),
        ({"test_size": 0}, "test_size"),
    ],
)
def test_bad_kwargs(kwargs, word):
    with pytest.raises(ValueError, match=word):
        KnightsKnavesEnv(**kwargs)


def test_step_before_reset_and_bad_actions():
    env = KnightsKnavesEnv()
    with pytest.raises(RuntimeError):
        env.step("x")
    env.reset(seed=0)
    for action in [b"\xff\xfe", "", "<answer>" * 10_000, None]:
        _, r, done, _, info = env.step(action)
        assert r == -3.0 and done and info["format_error"]
