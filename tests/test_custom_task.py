"""A task from a file and reward functions in TRL's signature (``env=custom``,
``rlvr.envs.custom``): the five commands of ``docs/custom_tasks.md`` run as written, and the task
goes through the Gymnasium contract, the scorer, the trainer, the evaluation, the verl export and
reward, and the TRL adapters, with its reward functions named as ``module:function``."""

from __future__ import annotations

import json
import pickle
import re
import shlex
import sys
import warnings
from pathlib import Path

import gymnasium as gym
import pytest

from rlvr.cli import main
from rlvr.envs import env_spec

DOC = Path(__file__).resolve().parents[1] / "docs" / "custom_tasks.md"
REWARDS = '''
def exact_match(completions, answer, **kwargs):
    texts = [c if isinstance(c, str) else c[-1]["content"] for c in completions]
    return [1.0 if t.strip() == a else 0.0 for t, a in zip(texts, answer)]


def length(prompts, completions, **kwargs):
    return [float(len(c if isinstance(c, str) else c[-1]["content"])) for c in completions]


def shy(completions, **kwargs):
    return [None for _ in completions]


def broken(completions, **kwargs):
    raise RuntimeError("bug in my reward")


def needs_ids(completions, completion_ids, **kwargs):
    return [0.0 for _ in completions]
'''


@pytest.fixture
def lab(tmp_path, monkeypatch):
    """A working directory with ``lab_rewards.py`` importable, as the ``rlvr`` command makes it."""
    (tmp_path / "lab_rewards.py").write_text(REWARDS)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "lab_rewards", raising=False)
    return tmp_path


def write_rows(path: Path, chat: bool = False, n: int = 4) -> Path:
    rows = []
    for i in range(n):
        prompt = f"{i}+{i}="
        rows.append(
            {
                "prompt": [{"role": "user", "content": prompt}] if chat else prompt,
                "answer": str(2 * i),
                "level": i % 2,
            }
        )
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def doc_blocks() -> tuple[dict[str, str], list[str]]:
    """The files (``<!-- file: X -->`` blocks) and the commands of ``docs/custom_tasks.md``."""
    text = DOC.read_text()
    block = r"<!-- (file: (\S+)|commands) -->\n```\w*\n(.*?)```"
    files, commands = {}, []
    for _, name, body in re.findall(block, text, flags=re.S):
        if name:
            files[name] = body
        else:
            commands = [line for line in body.splitlines() if line.strip()]
    return files, commands


def test_the_docs_five_commands_go_from_a_jsonl_file_to_a_trained_run(tmp_path, monkeypatch):
    files, commands = doc_blocks()
    assert set(files) == {"tasks.jsonl", "my_lab/rewards.py"} and len(commands) == 5
    for name, body in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(body)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    for mod in [m for m in sys.modules if m == "my_lab" or m.startswith("my_lab.")]:
        monkeypatch.delitem(sys.modules, mod)
    for line in commands:
        argv = shlex.split(line)
        assert argv[0] == "rlvr"
        assert main([*argv[1:], *(["progress=false"] if argv[1] == "train" else [])]) == 0, line
    records = [
        json.loads(x) for x in (tmp_path / "runs/mine/metrics.jsonl").read_text().splitlines()
    ]
    assert len(records) == 20 and {"reward/exact_match", "reward/digits"} <= set(records[0])
    assert (tmp_path / "runs/mine/final/model.safetensors").is_file()
    after = json.loads((tmp_path / "evals/after/summary.json").read_text())
    assert after["summary"]["all"]["n_items"] == 4
    import pyarrow.parquet as pq

    rows = pq.read_table(tmp_path / "train.parquet").to_pylist()
    assert rows[0]["extra_info"]["reward"] == ["my_lab.rewards:exact_match"]


def test_the_env_keeps_gymnasiums_contract_and_scores_as_trl_combines(lab):
    from gymnasium.utils.env_checker import check_env

    data = write_rows(lab / "t.jsonl")
    kwargs = {"dataset": str(data), "reward": ["lab_rewards:exact_match", "lab_rewards:length"]}
    env = gym.make("rlvr/Custom-v0", reward_weights=[1.0, 0.5], **kwargs)
    check_env(env.unwrapped, skip_render_check=True)
    prompt, info = env.reset(options={"index": 2})
    assert prompt == "2+2=" and info["ground_truth"] == {
        "prompt": "2+2=",
        "answer": "4",
        "level": 0,
    }
    _, reward, terminated, _, step = env.step("4")
    assert terminated and reward == 1.0 + 0.5 * 1 and step["correct"] is True
    assert step["reward_components"] == {"exact_match": 1.0, "length": 1.0}
    _, reward, _, _, step = env.step("no")
    assert reward == 0.5 * 2 and step["correct"] is False  # below 1 + 0.5
    assert pickle.loads(pickle.dumps(env.unwrapped)).reward == tuple(kwargs["reward"])
    env.close()


def test_chat_rows_get_messages_and_none_and_raising_functions_are_left_out(lab):
    from rlvr.envs.custom import score_batch

    data = write_rows(lab / "c.jsonl", chat=True)
    env = gym.make("rlvr/Custom-v0", dataset=str(data), reward="lab_rewards:exact_match")
    assert env.unwrapped.template == "chat"  # TRL's conversational format
    prompt, info = env.reset(options={"index": 1})
    assert info["messages"] == [{"role": "user", "content": "1+1="}]
    assert prompt.startswith("<|im_start|>user\n1+1=")
    assert env.step("2")[1] == 1.0
    row = info["ground_truth"]
    refs = ["lab_rewards:exact_match", "lab_rewards:shy", "lab_rewards:broken"]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        right, wrong = score_batch(["2", "3"], [row, row], reward=refs, correct_at=1.0)
    assert right.reward == 1.0 and right.components == {"exact_match": 1.0}
    assert wrong.reward == 0.0 and not right.correct  # a function raised: nothing is "correct"
    assert "bug in my reward" in right.reason and len(caught) == 1
    assert right.parsed == [{"role": "assistant", "content": "2"}]
    bad = score_batch(["2"], ["not a row"], reward=refs)[0]
    assert bad.reward == 0.0 and bad.reason.startswith("invalid ground truth")


@pytest.mark.parametrize(
    "reward, needle",
    [
        ("lab_rewards:exact_mach", "did you mean 'exact_match'?"),
        ("lab_reward:exact_match", "cannot import 'lab_reward'"),
        ("lab_rewards", "is not module:function"),
        ("lab_rewards:needs_ids", "completion_ids"),
    ],
)
def test_bad_rewards_are_one_line_before_the_model_loads(lab, capsys, monkeypatch, reward, needle):
    from _rlvr_toys import one_line_exit_2, refuse_model_loads

    refuse_model_loads(monkeypatch)
    data = write_rows(lab / "t.jsonl")
    argv = ["train", "env=custom", f"dataset={data}", f"reward={reward}", "profile=micro"]
    one_line_exit_2(capsys, [*argv, "out=r"], needle)


def test_a_column_the_reward_needs_and_the_rows_lack_is_named(lab, capsys):
    from _rlvr_toys import one_line_exit_2

    (lab / "t.jsonl").write_text('{"prompt": "1+1=", "solution": "2"}\n')
    argv = ["eval", "env=custom", "dataset=t.jsonl", "reward=lab_rewards:exact_match"]
    one_line_exit_2(capsys, argv, "missing a required argument: 'answer'", "['solution']")
    (lab / "t.jsonl").write_text('{"prompt": "1+1="}\nnot json\n')
    one_line_exit_2(capsys, argv, "t.jsonl line 2: not a JSON row")
    (lab / "t.jsonl").write_text('{"prompt": "1+1="}\n{"question": "2+2="}\n')
    one_line_exit_2(capsys, argv, "t.jsonl line 2: field 'prompt' must be")


def test_trl_and_verl_adapters_take_the_task_through_the_registry(lab, tmp_path):
    from rlvr.integrations.trl_rewards import reward_func, trl_rows
    from rlvr.integrations.verl.data import verl_rows
    from rlvr.integrations.verl.reward import compute_score

    data = write_rows(lab / "t.jsonl")
    kwargs = {"dataset": str(data), "reward": "lab_rewards:exact_match"}
    rows = trl_rows("custom", 3, env_kwargs=kwargs)
    assert rows[1]["prompt"] == [{"role": "user", "content": "1+1="}]
    assert rows[1]["ground_truth"]["answer"] == "2" and rows[1]["reward"] == [kwargs["reward"]]
    columns = {k: [r[k] for r in rows] for k in rows[0] if k != "prompt"}
    answers = [[{"role": "assistant", "content": r["ground_truth"]["answer"]}] for r in rows]
    assert reward_func("custom")([r["prompt"] for r in rows], answers, **columns) == [1.0] * 3
    (row,) = verl_rows("custom", 1, start=3, env_kwargs=kwargs)
    gold = row["reward_model"]["ground_truth"]
    assert json.loads(gold)["answer"] == "6"
    assert json.loads(json.dumps(row)) == row  # plain data: the reward names travel as strings
    assert compute_score(row["data_source"], "6", gold, row["extra_info"])["score"] == 1.0
    assert compute_score(row["data_source"], "7", gold, row["extra_info"])["score"] == 0.0
    assert env_spec("custom").verl.ability == "custom"


def test_a_test_dataset_is_the_evaluation_split(lab):
    from rlvr.eval.runner import EvalConfig, evaluate

    train, test = write_rows(lab / "train.jsonl", n=4), write_rows(lab / "test.jsonl", n=2)
    kwargs = {"dataset": str(train), "test_dataset": str(test), "reward": "lab_rewards:length"}
    result = evaluate(EvalConfig(model="micro", env="custom", env_kwargs=kwargs, n_items=9))
    assert result.summary["all"]["n_items"] == 2 and len(result.records) == 2
    assert gym.make("rlvr/Custom-v0", **kwargs).unwrapped.num_tasks == 4


def test_top_level_keys_stand_for_env_kwargs_on_both_commands(lab):
    from rlvr.eval.cli import load_eval_config
    from rlvr.training.train_config import load_train_config

    data = write_rows(lab / "t.jsonl")
    argv = ["env=custom", f"dataset={data}", "reward=lab_rewards:exact_match"]
    cfg = load_train_config([*argv, "reward_weights=[2]", "out=r"])
    assert cfg.env_kwargs == {
        "dataset": str(data),
        "reward": "lab_rewards:exact_match",
        "reward_weights": [2],
    }
    assert load_eval_config(None, argv).env_kwargs == {"dataset": str(data), "reward": argv[2][7:]}
    with pytest.raises(Exception, match="given both"):
        load_train_config([*argv, "env_kwargs.reward=x:y", "out=r"])
    with pytest.raises(Exception, match="unknown key"):
        load_train_config(["env=kk", f"dataset={data}", "out=r"])  # only the custom env's keys


def test_score_and_prepare_verl_refuse_a_bad_reward_or_a_missing_dataset_in_one_line(
    lab, capsys, tmp_path
):
    from _rlvr_toys import one_line_exit_2

    data = write_rows(lab / "t.jsonl")
    rows = lab / "rows.jsonl"
    rows.write_text(
        json.dumps({"response": "0", "ground_truth": {"prompt": "0+0=", "answer": "0"}})
    )
    one_line_exit_2(capsys, ["score", "--env", "custom", str(rows), "reward=nope"], "nope")
    one_line_exit_2(
        capsys,
        ["prepare-verl", "custom", "--n", "2", "--out", str(tmp_path / "x.parquet")],
        "needs dataset=FILE",
    )
    assert main(["score", "--env", "custom", str(rows), "reward=lab_rewards:exact_match"]) == 0
    assert '"accuracy": 1.0' in capsys.readouterr().out and data.exists()
