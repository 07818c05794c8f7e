"""Checks against the real OpenEnv (``openenv`` 0.10.0), run in its own venv by
``scripts/test_integrations.sh openenv``: every registered env served over loopback and driven
with OpenEnv's own client; rewards, observations and ends equal the Gymnasium env's.
"""

from __future__ import annotations

import socket
import threading
import time
from importlib.metadata import version
from pathlib import Path

import gymnasium as gym
import pytest
import uvicorn
from openenv.core import GenericEnvClient

from rlvr.envs import ENVS, env_spec, register_env
from rlvr.integrations.episodes import env_names
from rlvr.integrations.openenv_server import RlvrEnvClient, TextAction, make_app

from _rlvr_toys import TOY

# An env registered outside rlvr (tests/_rlvr_toys.TOY) is served like the built-in ones.
register_env(TOY)

CUSTOM = {
    "dataset": str(Path(__file__).resolve().parents[1] / "data" / "custom_tasks.jsonl"),
    "reward": "rlvr.envs.custom.rewards:exact_match",
}
ENV_KWARGS = {
    "searchqa": {"dataset": "synthetic", "max_turns": 3},
    "kk": {"n_people": 2},
    "math": {"dataset": "synthetic"},
    "custom": CUSTOM,
    TOY.name: {"strict": True},
}


def scripted_actions(name: str, info: dict) -> list[str]:
    """A few turns per env, ending in a correct answer (so rewards are not all the same)."""
    gt = info["ground_truth"]
    if name == "searchqa":
        return [
            "I should look it up.",
            f"<search> {info['question']} </search>",
            f"<think>found it</think><answer> {gt[0]} </answer>",
        ]
    if name == "kk":
        # the prompt ends with the <think> prefill
        return [f"solve</think><answer>{info['solution_text_format']}</answer>"]
    if name == "math":
        return [f"The answer is \\boxed{{{gt}}}."]
    if name == "custom":  # the ground truth is the task's row
        return [gt["answer"]]
    return [str(gt)]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def servers():
    """One uvicorn server per registered env, on loopback, in threads."""
    running = {}
    for name in env_names():
        port = free_port()
        app = make_app(name, max_concurrent_envs=2, **ENV_KWARGS.get(name, {}))
        server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error"))
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        running[name] = (server, thread, f"http://127.0.0.1:{port}")
    deadline = time.time() + 60
    while not all(s.started for s, _, _ in running.values()):
        assert time.time() < deadline, "servers did not start"
        time.sleep(0.1)
    yield {name: url for name, (_, _, url) in running.items()}
    for server, thread, _ in running.values():
        server.should_exit = True
        thread.join(timeout=10)


def test_version_pinned():
    assert version("openenv") == "0.10.0"


@pytest.mark.parametrize("name", sorted(ENVS))
def test_client_episode_equals_gym_env(servers, name):
    ref = gym.make(env_spec(name).id, **ENV_KWARGS.get(name, {}))
    prompt, info = ref.reset(seed=7, options={"index": 3})
    with RlvrEnvClient(base_url=servers[name]).sync() as client:
        result = client.reset(seed=7, index=3)
        assert result.observation.text == prompt and not result.done
        assert result.observation.metadata["index"] == 3
        assert "ground_truth" not in result.observation.metadata  # answers stay on the server
        rewards = []
        for action in scripted_actions(name, info):
            obs, reward, terminated, truncated, step_info = ref.step(action)
            result = client.step(TextAction(text=action))
            assert result.observation.text == obs
            assert result.reward == pytest.approx(reward)
            assert result.done == (terminated or truncated)
            components = result.metadata["reward_components"]
            assert components == pytest.approx(step_info["reward_components"])
            rewards.append(result.reward)
            if result.done:
                break
        assert result.done and result.metadata["correct"] is True
        assert rewards[-1] == max(rewards) > 0
        state = client.state()
        assert state.step_count == len(rewards) and state.env == name


def test_two_sessions_are_isolated_and_generic_client_works(servers):
    url = servers["searchqa"]
    with RlvrEnvClient(base_url=url).sync() as a, GenericEnvClient(base_url=url).sync() as b:
        ra = a.reset(seed=0, index=0)
        rb = b.reset(seed=0, index=1)
        assert ra.observation.text != rb.observation["text"]
        step = b.step({"text": "<answer> nobody </answer>"})
        assert step.done and step.reward == 0.0
        assert not a.step(TextAction(text="<search> x </search>")).done  # a's episode goes on


def test_expose_info_sends_the_whole_info():
    from rlvr.integrations.openenv_server import RlvrEnvironment

    env = RlvrEnvironment("kk", expose_info=True, n_people=2)
    obs = env.reset(seed=0, index=1)
    assert obs.metadata["ground_truth"] and obs.metadata["names"]
    step = env.step(TextAction(text="x"))
    assert step.done and step.metadata["format_error"] is True
    assert "ground_truth" not in RlvrEnvironment("kk", n_people=2).reset(index=1).metadata


def test_bad_input_is_one_clear_error(servers):
    with RlvrEnvClient(base_url=servers["kk"]).sync() as client:
        with pytest.raises(Exception, match="index"):
            client.reset(seed=0, index=-1)
    with pytest.raises(ValueError, match="env"):
        make_app("chess")
