"""TRL environment classes built from the env registry, without TRL (the real GRPOTrainer run is
in tests/integrations/trl_check.py)."""

from __future__ import annotations

import inspect

import pytest

from rlvr.envs import env_spec
from rlvr.integrations.episodes import env_names
from rlvr.integrations.trl_env import (
    environment_class,
    environment_factory,
    episode_reward,
    final_assistant_text,
)


def public_methods(cls) -> list[str]:
    # what GRPOTrainer lists: functions on the class, minus private ones
    return sorted(
        n for n, _ in inspect.getmembers(cls, predicate=inspect.isfunction) if not n.startswith("_")
    )


def test_one_class_per_registered_env_with_its_tools():
    for name in env_names():
        cls = environment_class(name)
        assert environment_class(name) is cls
        assert public_methods(cls) == sorted(["reset", *[t.name for t in env_spec(name).tools]])
    sig = inspect.signature(environment_class("searchqa").search)
    assert list(sig.parameters) == ["self", "query"] and sig.return_annotation is str
    assert "Args:\n    query:" in environment_class("searchqa").search.__doc__
    with pytest.raises(ValueError, match="env"):
        environment_class("chess")


def test_search_tool_and_episode_reward():
    factory = environment_factory("searchqa", dataset="synthetic", max_turns=2)
    a, b = factory(), factory()
    assert a is not b
    a.reset(index=0, seed=0, prompt=[])
    b.reset(index=0, seed=0)
    info = a._episode.info
    assert a.search(query=info["question"]).startswith("\n\n<information>Doc 1")
    assert b.search(info["question"]) and "limit" in b.search("again")  # 2nd call hits max_turns
    with pytest.raises(ValueError, match="query"):
        a.search(q="x")
    gold = info["ground_truth"][0]
    done = [
        {"role": "assistant", "content": "", "tool_calls": []},
        {"role": "tool", "name": "search", "content": "..."},
        {"role": "assistant", "content": f"<answer> {gold} </answer>"},
    ]
    metrics = {}
    assert episode_reward(
        ["p", "p"], [done, done], environments=[a, b], log_metric=metrics.__setitem__
    ) == [1.0, 0.0]  # b was truncated
    assert metrics == {"searchqa/em": 0.5, "searchqa/f1": 0.5, "searchqa/format": 0.5}
    with pytest.raises(ValueError, match="environment_factory"):
        episode_reward(["p"], ["x"])


def test_single_turn_env_reward_is_the_envs():
    env = environment_factory("kk", n_people=2, prefill_think=False)()
    env.reset(index=1, seed=0)
    truth = env._episode.info["solution_text_format"]
    good = [{"role": "assistant", "content": f"<think>x</think><answer>{truth}</answer>"}]
    assert episode_reward(["p"], [good], environments=[env]) == [3.0]
    assert final_assistant_text("plain") == "plain" and final_assistant_text([]) == ""
