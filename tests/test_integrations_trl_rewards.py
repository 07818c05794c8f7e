"""TRL reward functions on plain strings and message lists (no TRL needed)."""

from __future__ import annotations

import pytest

from rlvr.integrations.trl_rewards import (
    completion_text,
    kk_reward,
    math_reward,
    reward_func,
    searchqa_reward,
    trl_rows,
)


@pytest.fixture(scope="module")
def kk_rows():
    return trl_rows("kk", 2, split="test", env_kwargs={"n_people": 3})


def test_rows_are_trl_prompt_format(kk_rows):
    row = kk_rows[0]
    assert [m["role"] for m in row["prompt"]] == ["system", "user"]
    assert row["prefilled_think"] is False and row["data_source"] == "rlvr/kk"
    text_rows = trl_rows("kk", 2, split="test", env_kwargs={"n_people": 3}, conversational=False)
    assert isinstance(text_rows[0]["prompt"], str)
    assert text_rows[0]["prefilled_think"] is text_rows[0]["prompt"].rstrip().endswith("<think>")
    assert [r["ground_truth"] for r in text_rows] == [r["ground_truth"] for r in kk_rows]


def test_kk_reward_strings_and_messages(kk_rows):
    gts = [r["ground_truth"] for r in kk_rows]
    good = [f"<think>x</think><answer>{gt}</answer>" for gt in gts]
    prompts = [r["prompt"] for r in kk_rows]
    assert kk_reward(prompts, good, ground_truth=gts, prefilled_think=[False, False]) == [3.0, 3.0]
    # conversational completions: a list with one assistant message
    msgs = [[{"role": "assistant", "content": g}] for g in good]
    assert kk_reward(prompts, msgs, ground_truth=gts, trainer_state=None) == [3.0, 3.0]
    assert kk_reward(prompts, ["", "<answer>"], ground_truth=gts) == [-3.0, -3.0]
    with pytest.raises(ValueError, match="ground_truth"):
        kk_reward(prompts, good)
    with pytest.raises(ValueError, match="prefilled_think"):
        kk_reward(prompts, good, ground_truth=gts, prefilled_think=[True])


def test_math_and_searchqa_rewards():
    out = math_reward(
        ["p"] * 3,
        ["\\boxed{1/2}", "\\boxed{0.5}", "\\boxed{3}"],
        ground_truth=["\\frac{1}{2}"] * 3,
        require_think=[False, False, True],
    )
    assert out == [1.0, 1.0, 0.0]
    assert searchqa_reward(
        ["p", "p"],
        ["<answer>The Paris</answer>", "<answer>Rome</answer>"],
        ground_truth=[["Paris"], {"target": ["Paris"]}],
    ) == [1.0, 0.0]
    assert reward_func("math") is math_reward
    with pytest.raises(ValueError, match="env"):
        reward_func("chess")


def test_completion_text_skips_tool_turns():
    completion = [
        {
            "role": "assistant",
            "content": "<think>look it up</think>",
            "tool_calls": [{"name": "search"}],
        },
        {"role": "tool", "name": "search", "content": "Doc 1(Title: x) <answer>Berlin</answer>"},
        {"role": "assistant", "content": "<answer>Paris</answer>"},
    ]
    text = completion_text(completion)
    assert "Berlin" not in text and text.endswith("<answer>Paris</answer>")
    assert searchqa_reward(["p"], [completion], ground_truth=[["Paris"]]) == [1.0]
