"""Bad files get one line, never a traceback: ``rlvr score`` lines that do not parse, missing
inputs and outputs that cannot be written (``/dev/full``) for ``score`` and ``sample``, corrupt
model folders for ``eval`` and ``train``, K&K dataset rows that do not parse (named by file, line
and field), oversized dataset prompts (left out when the dataset is read, with a count), and a
``metrics.jsonl`` whose steps are not integers on ``--resume``."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import torch

from rlvr.agents.metrics import preserve_metrics
from rlvr.agents.rollout.base import SamplingParams
from rlvr.agents.rollout.multiturn import run_episodes
from rlvr.cli import main as rlvr_main
from rlvr.models import build_micro

from _rlvr_toys import LetterEnv, ScriptedBackend
from _rlvr_toys import one_line_exit_2 as _one_line_exit_2

torch.set_num_threads(1)

TRAIN = ["train", "env=kk", "algo=grpo", "profile=micro", "progress=false", "num_threads=1"]
TRAIN += ["steps=1", "group_size=2", "prompts_per_step=2"]


# -- rlvr score / rlvr sample ------------------------------------------------------------------
def _responses(tmp_path: Path) -> tuple[Path, list[dict]]:
    tasks = tmp_path / "tasks.jsonl"
    assert rlvr_main(["sample", "--env", "kk", "-n", "3", "--out", str(tasks)]) == 0
    recs = [json.loads(line) for line in tasks.read_text().splitlines()]
    for r in recs:
        r["response"] = "<answer>(1) x is a knight</answer>"
    return tasks, recs


def test_score_skips_bad_lines_with_their_number_and_keeps_the_rest(tmp_path, capsys):
    _, recs = _responses(tmp_path)
    lines = [json.dumps(recs[0]), "[" * 100_000]
    lines += ['{"response": "a", "ground_truth": ' + "1" * 5000 + "}", "[1, 2]"]
    lines += [json.dumps(r) for r in recs[1:]]
    inp, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    inp.write_text("\n".join(lines) + "\n")
    capsys.readouterr()
    assert rlvr_main(["score", "--env", "kk", str(inp), "--out", str(out)]) == 0
    captured = capsys.readouterr()
    summary = json.loads(captured.out)
    assert summary["scored"] == 3 and summary["skipped"] == 3
    assert [line.split(":")[0] for line in captured.err.splitlines()] == [
        "line 2",
        "line 3",
        "line 4",
    ]
    assert "RecursionError" in captured.err and "4300 digits" in captured.err
    assert [json.loads(line)["seed"] for line in out.read_text().splitlines()] == [0, 1, 2]


def test_missing_input_and_unwritable_output_are_one_line(tmp_path, capsys):
    tasks, recs = _responses(tmp_path)
    inp = tmp_path / "in.jsonl"
    inp.write_text("\n".join(json.dumps(r) for r in recs) + "\n")
    _one_line_exit_2(capsys, ["score", "--env", "kk", str(tmp_path / "nope.jsonl")], "nope.jsonl")
    if os.path.exists("/dev/full"):
        _one_line_exit_2(
            capsys, ["score", "--env", "kk", str(inp), "--out", "/dev/full"], "/dev/full", "space"
        )
        _one_line_exit_2(capsys, ["sample", "--env", "kk", "--out", "/dev/full"], "/dev/full")
    _one_line_exit_2(
        capsys, ["sample", "--env", "kk", "--out", str(tasks / "x.jsonl")], "cannot open"
    )


# -- K&K dataset rows --------------------------------------------------------------------------
GOOD_ROW = {
    "quiz": "A says B is a knave. B says A is a knight.",
    "names": ["A", "B"],
    "solution": [True, False],
    "statements": "(('lying', 1), ('telling-truth', 0))",
}
BAD_ROWS = {
    "parentheses": (json.dumps(dict(GOOD_ROW, statements="(" * 300)), "'statements'"),
    "digits": (
        json.dumps(dict(GOOD_ROW, statements="(('lying', " + "1" * 5000 + "), ('lying', 0))")),
        "'statements'",
    ),
    "no names": (json.dumps({k: v for k, v in GOOD_ROW.items() if k != "names"}), "'names'"),
    "brackets": ("[" * 100_000, "not a JSON row"),
    "nine people": (json.dumps(dict(GOOD_ROW, names=list("ABCDEFGHI"))), "'names'"),
}


@pytest.mark.parametrize("case", sorted(BAD_ROWS))
def test_a_bad_kk_row_names_file_line_and_field(tmp_path, capsys, case):
    line, field = BAD_ROWS[case]
    data = tmp_path / "kk.jsonl"
    data.write_text(json.dumps(GOOD_ROW) + "\n" + line + "\n")
    where = f"{data} line 2"
    _one_line_exit_2(capsys, ["sample", "--env", "kk", "-n", "1", f"dataset={data}"], where, field)
    _one_line_exit_2(
        capsys,
        [*TRAIN, f"out={tmp_path / 'run'}", f"env_kwargs.dataset={data}"],
        where,
        field,
    )


def test_oversized_dataset_prompts_are_left_out_when_read_with_a_count(tmp_path, capsys):
    from rlvr.envs.kk import KnightsKnavesEnv

    big = dict(GOOD_ROW, quiz="A says B is a knave. " * 100_000)  # a 2.1 MB quiz
    data = tmp_path / "kk.jsonl"
    data.write_text("\n".join(json.dumps(r) for r in (GOOD_ROW, big, GOOD_ROW)) + "\n")
    with pytest.warns(RuntimeWarning, match=r"1 of 3 rows left out.*max_prompt_chars=20000"):
        env = KnightsKnavesEnv(dataset=str(data))
    assert env.num_tasks == 2
    assert KnightsKnavesEnv(dataset=str(data), max_prompt_chars=3_000_000).num_tasks == 3
    data.write_text(json.dumps(big) + "\n")
    _one_line_exit_2(
        capsys, ["sample", "--env", "kk", "-n", "1", f"dataset={data}"], "max_prompt_chars"
    )


def test_a_group_shares_one_tokenization_of_its_prompt():
    model, tokenizer = build_micro(seed=0)
    calls = []

    def counting(text, **kwargs):
        calls.append(len(text))
        return tokenizer(text, **kwargs)

    counting.pad_token_id = tokenizer.pad_token_id
    prompts = ["x" * 5000] * 8 + ["y" * 10] * 8
    episodes = run_episodes(
        ScriptedBackend(tokenizer, ["done"]),
        counting,
        [LetterEnv() for _ in prompts],
        prompts,
        SamplingParams(max_new_tokens=4),
        max_response_tokens=4,
        seed=0,
        max_prompt_tokens=32,
    )
    assert sorted(calls) == [10, 5000]  # once per distinct prompt, not once per episode
    assert all(len(e.prompt_ids) == 32 and e.info["prompt_truncated"] for e in episodes[:8])
    episodes[0].prompt_ids.append(-1)  # episodes do not share one list
    assert episodes[1].prompt_ids[-1] != -1


# -- corrupt model folders ---------------------------------------------------------------------
@pytest.fixture(scope="module")
def model_folder(tmp_path_factory) -> Path:
    model, tokenizer = build_micro(seed=0)
    path = tmp_path_factory.mktemp("micro") / "model"
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def _corrupt(folder: Path, how: str) -> None:
    weights, config = folder / "model.safetensors", folder / "config.json"
    if how == "truncated weights":
        weights.write_bytes(weights.read_bytes()[:1000])
    elif how == "empty weights":
        weights.write_bytes(b"")
    elif how == "garbage weights":
        weights.write_bytes(bytes(range(256)) * 400)
    elif how == "no weights":
        weights.unlink()
    elif how == "no config":
        config.unlink()
    elif how == "config not JSON":
        config.write_text("{")
    elif how in ("wrong hidden size", "wrong vocabulary"):
        c = json.loads(config.read_text())
        if how == "wrong hidden size":
            c.update(hidden_size=2 * c["hidden_size"], intermediate_size=2 * c["intermediate_size"])
        else:
            c.update(vocab_size=17)
        config.write_text(json.dumps(c))
    elif how == "tokenizer not JSON":
        (folder / "tokenizer.json").write_text('{"version": 1')
    elif how == "tokenizer without a model":
        (folder / "tokenizer.json").write_text('{"model": 5}')
    elif how == "empty folder":
        for f in folder.iterdir():
            f.unlink()


CORRUPT = {
    "truncated weights": "model.safetensors",
    "empty weights": "model.safetensors",
    "garbage weights": "model.safetensors",
    "no weights": "no weights",
    "no config": "no config.json",
    "config not JSON": "config.json",
    "wrong hidden size": "do not match",
    "wrong vocabulary": "do not match",
    "tokenizer not JSON": "tokenizer",
    "tokenizer without a model": "tokenizer",
    "empty folder": "no config.json",
}


@pytest.mark.parametrize("how", sorted(CORRUPT))
def test_a_corrupt_model_folder_is_one_line_for_eval_and_train(tmp_path, capsys, model_folder, how):
    folder = tmp_path / "model"
    shutil.copytree(model_folder, folder)
    _corrupt(folder, how)
    needle = CORRUPT[how]
    _one_line_exit_2(
        capsys,
        ["eval", f"model={folder}", "env=kk", "n_items=1", f"out={tmp_path / 'ev'}", "--quiet"],
        "model:",
        needle,
    )
    _one_line_exit_2(capsys, [*TRAIN, f"model={folder}", f"out={tmp_path / 'run'}"], needle)
    assert not (tmp_path / "run" / "metrics.jsonl").exists()


def test_eval_on_a_bad_dataset_or_out_is_one_line(tmp_path, capsys, model_folder):
    base = ["eval", f"model={model_folder}", "env=kk", "n_items=1", "--quiet"]
    blocker = tmp_path / "file"
    blocker.write_text("")
    _one_line_exit_2(capsys, [*base, f"out={blocker / 'ev'}"], "out:", str(blocker))
    data = tmp_path / "kk.jsonl"
    data.write_text("[" * 100_000 + "\n")
    _one_line_exit_2(
        capsys,
        [*base, f"out={tmp_path / 'ev'}", f"env_kwargs.dataset={data}"],
        "env_kwargs",
        f"{data} line 1",
    )


# -- metrics.jsonl on --resume -----------------------------------------------------------------
@pytest.mark.parametrize("step", [None, "2", [2], 2.0, True])
def test_a_metrics_line_whose_step_is_not_an_integer_is_moved_aside(tmp_path, step):
    path = tmp_path / "metrics.jsonl"
    lines = [json.dumps({"step": 1}), json.dumps({"step": step}), json.dumps({"step": 2})]
    path.write_text("\n".join(lines) + "\n")
    side = preserve_metrics(path, keep_through_step=2)
    assert path.read_text().splitlines() == lines[:1]
    assert side.read_text().splitlines() == lines[1:]  # moved, never deleted


def test_resume_over_a_crafted_metrics_line(tmp_path, capsys):
    out = tmp_path / "run"
    args = [*TRAIN[:-3], "group_size=2", "prompts_per_step=2", f"out={out}", "save_every=1"]
    assert rlvr_main([*args, "steps=1"]) == 0
    with open(out / "metrics.jsonl", "a") as f:
        f.write('{"step": null}\n{"step": "x"}\n')
    assert rlvr_main([*args, "steps=2", "--resume"]) == 0
    steps = [json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2]
