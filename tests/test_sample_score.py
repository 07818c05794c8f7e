"""``rlvr sample`` then ``rlvr score``: a sampled row answered right scores the env's maximum
reward, for every single-turn environment rlvr registers and the prompt settings that change how
a response is read (K&K's ``<think>`` prefill, math's assistant prefill and ``</think>`` rule, a
custom task's chat prompts). Rows carry the ground truth every export carries
(``EnvSpec.export_gold``) and the scoring options their prompt implies (issue 52, item 6)."""

from __future__ import annotations

import json

import pytest

from rlvr.cli import main
from rlvr.envs import ENVS, env_spec

REWARDS = "def exact(completions, answer, **kw):\n" + (
    "    texts = [c if isinstance(c, str) else c[-1]['content'] for c in completions]\n"
    "    return [float(t.strip() == a) for t, a in zip(texts, answer)]\n"
)


def _custom_files(tmp_path, chat: bool) -> list[str]:
    (tmp_path / "round_trip_rewards.py").write_text(REWARDS)
    rows = [
        {
            "prompt": [{"role": "user", "content": f"{i}+1="}] if chat else f"{i}+1=",
            "answer": str(i + 1),
        }
        for i in range(3)
    ]
    (tmp_path / "tasks.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return [f"dataset={tmp_path / 'tasks.jsonl'}", "reward=round_trip_rewards:exact"]


def right_answer(env: str, row: dict) -> str:
    """A response that solves the sampled ``row`` in the form its env rewards most."""
    gt = row["ground_truth"]
    if env == "kk":  # Logic-RL's layout; the prefilled <think> is counted, not repeated
        text = f"{'' if row['prefilled_think'] else '<think>'}solved</think><answer>{gt}</answer>"
        prefill = row.get("answer_prefill", "")
        if prefill:  # the env's prefill ends the prompt: the response goes on from it
            assert text.startswith("solved" + prefill)
        return text.removeprefix("solved" + prefill)
    if env == "math":
        answer = f"\\boxed{{{gt}}}"
        if row.get("prefill"):
            answer = answer.removeprefix(row["prefill"])
        return f"</think> {answer}" if row.get("require_think") else answer
    if env == "custom":
        return gt["answer"]
    if env == "digits":  # the sum alone: every character a digit, and right
        return str(gt)
    raise AssertionError(f"no right answer written for env {env!r}: add it here")


#: (env, key=value settings, the reward of a right answer)
CASES = [
    ("kk", ["n_people=3"], 3.0),
    ("kk", ["n_people=2", "template=plain", "prefill_think=false"], 3.0),
    ("kk", ["n_people=2", "template=chat", "answer_prefill=</think><answer>"], 3.0),
    ("math", ["dataset=synthetic"], 1.0),
    ("math", ["dataset=synthetic", "prefill=\\boxed{", "template=plain"], 1.0),
    ("math", ["dataset=synthetic", "require_think=true", "answer_form=number"], 1.0),
    ("digits", ["n_digits=2"], 2.0),
    ("custom", ["chat=false"], 1.0),
    ("custom", ["chat=true", "template=qwen"], 1.0),
]


def test_every_single_turn_env_has_a_case():
    single = {name for name, spec in ENVS.items() if not spec.multi_turn}
    assert single <= {env for env, _, _ in CASES}


@pytest.mark.parametrize("env, settings, best", CASES)
def test_sample_then_score_gives_right_answers_the_most_reward(
    tmp_path, monkeypatch, env, settings, best
):
    monkeypatch.syspath_prepend(str(tmp_path))
    if env == "custom":
        chat = settings[0] == "chat=true"
        settings = [*_custom_files(tmp_path, chat), *settings[1:]]
    tasks, answered, scored = (tmp_path / f"{n}.jsonl" for n in ("tasks", "answered", "scored"))
    argv = ["sample", "--env", env, "-n", "3", "--out", str(tasks), *settings]
    assert main(argv) == 0
    rows = [json.loads(line) for line in tasks.read_text().splitlines()]
    answered.write_text(
        "".join(json.dumps({**r, "response": right_answer(env, r)}) + "\n" for r in rows)
    )
    assert main(["score", "--env", env, str(answered), "--out", str(scored)]) == 0
    out = [json.loads(line) for line in scored.read_text().splitlines()]
    assert [r["reward"] for r in out] == [best] * 3, [r["reason"] for r in out]
    assert all(r["correct"] for r in out)


def test_sampled_ground_truth_is_what_every_export_carries(tmp_path):
    """One form: Logic-RL's answer lines in ``sample``, TRL and verl rows alike; the K&K scorer
    reads the env's own name -> role mapping the same."""
    from rlvr.integrations.trl_rewards import trl_rows
    from rlvr.integrations.verl.data import verl_rows

    tasks = tmp_path / "tasks.jsonl"
    assert main(["sample", "--env", "kk", "-n", "2", "--out", str(tasks), "n_people=3"]) == 0
    sampled = [json.loads(line)["ground_truth"] for line in tasks.read_text().splitlines()]
    trl = [r["ground_truth"] for r in trl_rows("kk", 2, env_kwargs={"n_people": 3})]
    verl = [
        r["reward_model"]["ground_truth"] for r in verl_rows("kk", 2, env_kwargs={"n_people": 3})
    ]
    assert all(isinstance(g, str) and g.startswith("(1) ") for g in sampled + trl + verl)
    lines = [line.split(") ", 1)[1].split(" is a ") for line in sampled[0].splitlines()]
    response = f"<think>solved</think><answer>{sampled[0]}</answer>"
    spec = env_spec("kk")
    assert spec.score(response, dict(lines)).reward == spec.score(response, sampled[0]).reward == 3
