"""Checks against the real verifiers 0.4.0, run in its own venv by
``scripts/test_integrations.sh verifiers``: verifiers' own evaluation entry point (``vf-eval``)
plays every registered env against a scripted OpenAI-compatible server on loopback; the rewards
it records equal the Gymnasium env's on the same replies, the components are its metrics.

verifiers runs its chat harness as a PEP 723 script through ``uv`` (installed in the venv),
which resolves the script's few dependencies from the package index on the first run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest
from openai_stub import ScriptedChatServer

from rlvr.envs import ENVS
from rlvr.integrations.episodes import Episode

N_TASKS = 4
ENV_KWARGS = {
    "searchqa": {"dataset": "synthetic", "max_turns": 3},
    "kk": {"n_people": 2, "prefill_think": False},
    "math": {"dataset": "synthetic"},
    "custom": {
        "dataset": str(Path(__file__).resolve().parents[1] / "data" / "custom_tasks.jsonl"),
        "reward": "rlvr.envs.custom.rewards:exact_match",
    },
}


def task_table(name: str) -> dict[str, dict]:
    """The env's info per task, keyed by the prompt's user text (what the server sees)."""
    ep = Episode(name, **ENV_KWARGS.get(name, {}))
    table = {}
    for i in range(N_TASKS):
        ep.reset(seed=0, index=i)
        user = [m["content"] for m in ep.messages if m["role"] == "user"][0]
        table[user] = {**ep.info, "index": i}
    return table


def scripted_reply(name: str, table: dict[str, dict]):
    """Correct answers on even tasks, wrong ones on odd tasks; search QA searches first."""

    def reply(messages: list[dict]) -> str:
        user = [m["content"] for m in messages if m["role"] == "user"]
        info = table[user[0]]
        right = info["index"] % 2 == 0
        gt = info["ground_truth"]
        if name == "searchqa":
            if len(user) == 1:
                return f"<think>look it up</think><search> {info['question']} </search>"
            return f"<answer> {gt[0] if right else 'nobody'} </answer>"
        if name == "kk":
            body = info["solution_text_format"] if right else "(1) nobody is a knight"
            return f"<think>solve</think><answer>{body}</answer>"
        if name == "math":
            return f"So the answer is \\boxed{{{gt if right else '-12345'}}}."
        if name == "custom":  # the ground truth is the task's row
            return gt["answer"] if right else "-12345"
        if name == "digits":  # a wrong sum is all digits too: format 1, answer 0
            return gt if right else str(int(gt) + 1)
        return "<answer>x</answer>"

    return reply


def run_vf_eval(name: str, server: ScriptedChatServer, out: Path) -> list[dict]:
    env = dict(
        os.environ,
        STUB_API_KEY="stub",
        PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""),
    )
    cmd = [
        os.path.join(os.path.dirname(sys.executable), "vf-eval"),
        "rlvr_verifiers",
        "--env.taskset.env",
        name,
        "--env.taskset.env-kwargs",
        json.dumps(ENV_KWARGS.get(name, {})),
        "-n",
        str(N_TASKS),
        "--no-push",
        "--no-rich",
        "--client.base-url",
        server.url,
        "--client.api-key-var",
        "STUB_API_KEY",
        "-m",
        "stub-model",
        "-o",
        str(out),
    ]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    (traces,) = list(out.glob("*/traces.jsonl"))
    return [json.loads(line) for line in traces.read_text().splitlines() if line.strip()]


def test_version_pinned():
    assert version("verifiers") == "0.4.0"


def test_load_environment_returns_a_verifiers_env_per_registered_env():
    """Every registered env, one registered outside rlvr included (``tests/_rlvr_toys.TOY``)."""
    import verifiers.v1 as vf

    from rlvr.integrations.verifiers_env import RlvrEnv, load_environment

    from _rlvr_toys import TOY, registered

    with registered(TOY):
        for name in sorted(ENVS):
            env = load_environment(name, n=2, **ENV_KWARGS.get(name, {}))
            assert isinstance(env, vf.Env) and isinstance(env, RlvrEnv)
            tasks = list(env.taskset)
            assert [t.data.name for t in tasks] == [f"{name}#0", f"{name}#1"]
        assert tasks[1].data.prompt == "Write the number 10.\n"  # the toy's, last by name
    with pytest.raises(Exception, match="env"):
        load_environment("chess")


@pytest.mark.parametrize("name", sorted(ENVS))
def test_vf_eval_rewards_equal_the_gym_env(name, tmp_path):
    table = task_table(name)
    with ScriptedChatServer(scripted_reply(name, table)) as server:
        episodes = run_vf_eval(name, server, tmp_path)
    assert len(episodes) == N_TASKS
    rewards = []
    for episode in episodes:
        assert episode["ok"] and not episode["errors"]
        (trace,) = episode["traces"]
        info = trace["task"]["data"]["info"]
        messages = [n["message"] for n in trace["nodes"]]
        replies = [m["content"] for m in messages if m["role"] == "assistant"]
        assert replies
        # replay the same replies on the Gymnasium env
        ref = Episode(name, **ENV_KWARGS.get(name, {}))
        ref.reset(seed=info["seed"], index=info["index"])
        for reply in replies:
            t = ref.step(reply)
        assert t.done and trace["info"]["rlvr_done"] is True
        assert trace["rewards"] == {name: {"score": t.reward, "weight": 1.0}}
        assert trace["metrics"] == {f"{name}/{k}": v for k, v in t.components.items()}
        if name == "searchqa":  # multi-turn: the observation went back as a user turn
            users = [m["content"] for m in messages if m["role"] == "user"]
            assert len(replies) == 2 and users[1].lstrip().startswith("<information>Doc 1(Title: ")
        rewards.append((info["index"], t.reward))
    best = max(r for _, r in rewards)
    assert all((r == best) == (i % 2 == 0) for i, r in rewards)  # right vs wrong answers
