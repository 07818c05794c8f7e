"""The text-episode layer the TRL, verifiers and OpenEnv adapters share (no third-party stack)."""

from __future__ import annotations

import math

import gymnasium as gym
import pytest

from rlvr.envs import ENVS, env_spec
from rlvr.integrations.episodes import Episode, env_names, episode_rows, jsonable


def test_every_registered_env_is_listed_and_tools_come_from_the_registry():
    assert env_names() == sorted(ENVS)
    assert [t.name for t in env_spec("searchqa").tools] == ["search"]
    assert env_spec("kk").tools == () and env_spec("math").tools == ()
    search = env_spec("searchqa").tools[0]
    assert search.action("  capital of France ") == "<search> capital of France </search>"


@pytest.mark.parametrize("name", ["kk", "math"])
def test_single_turn_episode_equals_the_gym_env(name):
    ep = Episode(name)
    assert not ep.multi_turn and ep.tools == {}
    prompt, info = ep.reset(seed=3, index=5)
    ref = gym.make(env_spec(name).id)
    ref_prompt, ref_info = ref.reset(seed=3, options={"index": 5})
    assert prompt == ref_prompt and ep.messages == ref_info["messages"]
    text = "<think>x</think><answer>nothing</answer> \\boxed{7}"
    t = ep.finish(text)
    _, reward, terminated, truncated, ref_step = ref.step(text)
    assert t.done and t.reward == reward and (t.terminated, t.truncated) == (terminated, truncated)
    assert ep.reward == reward and ep.components == ref_step["reward_components"]
    assert ep.finish("again") is t  # an ended episode is not stepped twice
    with pytest.raises(ValueError, match="tool"):
        ep.call_tool("search", "x")


def test_search_tool_call_is_the_env_step_it_stands_for():
    ep = Episode("searchqa", dataset="synthetic", max_turns=2)
    assert ep.multi_turn and list(ep.tools) == ["search"]
    _, info = ep.reset(seed=0, index=0)
    t = ep.call_tool("search", info["question"])
    assert not t.done and t.observation.startswith("\n\n<information>Doc 1(Title: ")
    assert ep.reward == 0.0 and ep.components == {}
    final = ep.finish(f"<answer> {info['ground_truth'][0]} </answer>")
    assert final.terminated and ep.reward == 1.0 and ep.components["em"] == 1.0
    # the turn limit: the second search truncates, the final text is not stepped
    ep.reset(seed=0, index=0)
    ep.call_tool("search", "a")
    t = ep.call_tool("search", "b")
    assert t.truncated and ep.finish("<answer>x</answer>") is t and ep.reward == 0.0


def test_rows_errors_and_jsonable():
    rows = episode_rows("kk", 2, seed=1, start=4)
    assert [r["index"] for r in rows] == [4, 5] and rows[0]["prompt"][-1]["role"] == "user"
    with pytest.raises(ValueError, match="env"):
        Episode("chess")
    with pytest.raises(RuntimeError, match="reset"):
        Episode("kk").step("x")
    with pytest.raises(ValueError, match="index"):
        Episode("kk").reset(index="3")
    assert jsonable({"a": (1, 2.5), 3: {math.nan}, "o": object}) == {
        "a": [1, 2.5],
        "3": [None],
        "o": str(object),
    }


class EchoEnv(gym.Env):
    """A new multi-turn env: ``<ask>x</ask>`` is answered with ``echo: x``; ``<done>`` ends."""

    def __init__(self):
        from rlvr.envs import AnyText

        self.observation_space, self.action_space = AnyText(1000), AnyText(1000)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return "Say <done> after asking.", {"messages": [{"role": "user", "content": "Ask."}]}

    def step(self, action):
        if "<done>" in action:
            return "", 1.0, True, False, {"reward_components": {"done": 1.0}}
        return f"echo: {action[5:-6]}", 0.0, False, False, {"reward_components": {}}


def test_a_newly_registered_env_appears_in_the_adapters_without_code():
    from rlvr.envs import EnvSpec, Tool, register_env
    from rlvr.integrations.trl_env import environment_factory, episode_reward

    ask = Tool("ask", "text", "<ask>{}</ask>", "Ask something.", "What to ask.", "The echo.")
    register_env(
        EnvSpec(
            "echo",
            "rlvr/Echo-v0",
            EchoEnv,
            "rlvr.envs.kk:score",
            0.0,
            multi_turn=True,
            tools=(ask,),
        )
    )
    try:
        assert "echo" in env_names()
        env = environment_factory("echo")()
        env.reset(index=0)
        assert env.ask(text="hi") == "echo: hi" and env._episode.multi_turn
        done = [{"role": "assistant", "content": "<done>"}]
        assert episode_reward(["p"], [done], environments=[env]) == [1.0]
    finally:
        ENVS.pop("echo")
        gym.registry.pop("rlvr/Echo-v0", None)
