"""A model carries its prompt format (issue 54): ``rlvr eval`` on a tiny base, on a trained run's
folder and on a pretrained chat model prompts it as the reproduce grid does, without the
settings spelled out on the command line; a contradiction is one line; records say what was used.

Before the record, ``rlvr eval model=tiny-kk env=kk ...`` prompted the base with the env's
default ``qwen`` template and system prompt, which it never saw (greedy 0.000 on every size
where the grid measured 0.31 / 0.07 / 0.07).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from rlvr.cli import main
from rlvr.config import ConfigError
from rlvr.envs import warmstart
from rlvr.envs.kk.traces import kk_response
from rlvr.eval.records import read_jsonl
from rlvr.eval.runner import evaluate
from rlvr.models.presets import PRESETS
from rlvr.models.prompt_formats import model_format, with_format
from rlvr.models.tiny import ArchConfig, build_tiny
from rlvr.models.tokenizer import train_tokenizer
from rlvr.prompt_format import FORMAT_FILE, write_format
from rlvr.reproduce.grid import load_grid
from rlvr.reproduce.runs import eval_config, train_config
from rlvr.training.train_config import load_train_config

EVAL = ["group_by=n_people", "group_values=[3]", "n_items=2", "max_new_tokens=8", "batch_size=8"]


def tiny_kk_folder(path: Path) -> Path:
    """A random 1-layer Qwen2 saved as a tiny K&K base: its ``build.json`` says it was
    warm-started on the tiny-kk preset's settings (the ``plain`` template, no system prompt,
    ``<think>``), and its tokenizer is one rlvr trains, as a build's is."""
    build = PRESETS["tiny-kk"]
    env = warmstart.make_env("kk", build.data, "train")
    texts = [env.reset(seed=0, options={"index": i})[0] for i in range(20)]
    tokenizer = train_tokenizer(texts, vocab_size=320)
    arch = ArchConfig(
        hidden_size=32,
        num_layers=1,
        num_heads=2,
        num_kv_heads=1,
        intermediate_size=64,
        max_position_embeddings=512,
    )
    build_tiny(arch, tokenizer, seed=0).save_pretrained(path)
    tokenizer.save_pretrained(path)
    (path / "build.json").write_text(
        json.dumps({"config": {"task": "kk", "data": build.data}}, default=str)
    )
    return path


def grid_records(model: str, env: str = "kk", train: dict | None = None) -> list[dict]:
    """The reproduce grid's evaluation of ``model`` (its kk setting, two 3-person items)."""
    setting = load_grid("tiny").settings[env]
    setting = dataclasses.replace(
        setting,
        model=model,
        group_values=[3],
        n_items=2,
        k=0,
        train={**setting.train, **(train or {})},
    )
    cfg = train_config(setting, "grpo", 0)
    ecfg = dataclasses.replace(
        eval_config(setting, cfg, model), max_new_tokens=8, batch_size=8, device="cpu"
    )
    return evaluate(ecfg, progress=False).records


def cli_records(tmp_path: Path, *args: str) -> tuple[list[dict], dict]:
    out = tmp_path / "ev"
    assert main(["eval", *args, *EVAL, f"out={out}", "--quiet"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    return read_jsonl(out / "responses.jsonl"), summary


def same(a: list[dict], b: list[dict]) -> None:
    keys = ("item", "prompt", "response", "reward", "correct")
    assert [{k: r[k] for k in keys} for r in a] == [{k: r[k] for k in keys} for r in b]


def test_eval_of_a_tiny_base_by_folder_prompts_it_as_the_grid_does(tmp_path, capsys):
    base = tiny_kk_folder(tmp_path / "tiny-kk-base")
    records, summary = cli_records(tmp_path, f"model={base}", "env=kk")
    same(records, grid_records(str(base)))
    assert records[0]["prompt"].startswith("User: ")  # plain, no system turn
    assert records[0]["prompt"].endswith("Assistant: <think>")
    assert summary["prompt_format"] == {
        "template": "plain",
        "system_prompt": "",
        "prefill_think": True,
        "answer_prefill": "",
        "source": f"model: {base / 'build.json'}",
    }
    assert "prompt format: template='plain'" in capsys.readouterr().out


def test_eval_of_a_trained_run_folder_uses_the_run_s_format(tmp_path):
    base = tiny_kk_folder(tmp_path / "tiny-kk-base")
    run = tmp_path / "run"
    overrides = ["profile=micro", "env=kk", f"model={base}", "steps=1", f"out={run}"]
    assert main(["train", *overrides, "progress=false"]) == 0
    record = json.loads((run / "final" / FORMAT_FILE).read_text())
    assert record["env"] == "kk" and record["base"] == str(base)
    assert record["env_kwargs"]["template"] == "plain" and "split" not in record["env_kwargs"]
    records, summary = cli_records(tmp_path, f"model={run / 'final'}", "env=kk")
    same(records, grid_records(str(run / "final")))
    assert summary["prompt_format"]["template"] == "plain"
    # A run folder written before the record: the run's config.yaml beside final/ says it.
    (run / "final" / FORMAT_FILE).unlink()
    fmt = model_format(str(run / "final"))
    assert fmt.env == "kk" and fmt.env_kwargs["template"] == "plain" and fmt.from_scratch


def test_explicit_settings_win_and_a_contradiction_is_one_line(tmp_path, capsys):
    base = str(tiny_kk_folder(tmp_path / "b"))
    kwargs, _ = with_format(base, "kk", {"n_people": [3]})
    assert kwargs["n_people"] == [3] and kwargs["template"] == "plain"
    # Trained from scratch: another template scores the prompt, not the model: refused.
    with pytest.raises(ConfigError, match="trained from scratch on one prompt format"):
        with_format(base, "kk", {"template": "qwen"})
    with pytest.raises(ConfigError, match="env_kwargs.template='qwen'"):
        load_train_config(["profile=micro", "env=kk", f"model={base}", "env_kwargs.template=qwen"])
    assert main(["eval", f"model={base}", "env=kk", "env_kwargs.template=qwen", *EVAL]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "trained from scratch" in err[0]
    # Made for another environment: said once, nothing passed on.
    kwargs, fmt = with_format(base, "math", {}, say=(said := []).append)
    assert kwargs == {} and fmt.env == "kk" and "made for env=kk" in said[0]


def test_a_record_that_is_not_one_is_refused_in_one_line(tmp_path):
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / FORMAT_FILE).write_text("[1, 2]")
    with pytest.raises(ConfigError, match="not a JSON object"):
        model_format(str(folder))
    (folder / FORMAT_FILE).write_text('{"env": 3, "env_kwargs": {}}')
    with pytest.raises(ConfigError, match="needs 'env'"):
        model_format(str(folder))
    write_format(folder, "kk", {"template": "plain", "split": "train"}, base="micro")
    fmt = model_format(str(folder))
    assert fmt.env_kwargs == {"template": "plain"} and not fmt.from_scratch


def test_sample_for_a_model_then_score_marks_its_right_answers_right(tmp_path):
    """``rlvr sample --model`` prompts as the model was trained; the rows carry the scoring
    options their prompts imply, so ``rlvr score`` counts the prefilled ``<think>`` (right
    answers scored -3 before: issue 52, item 6)."""
    base = tiny_kk_folder(tmp_path / "b")
    tasks = tmp_path / "tasks.jsonl"
    assert (
        main(
            [
                "sample",
                "--env",
                "kk",
                "-n",
                "3",
                "--model",
                str(base),
                "--out",
                str(tasks),
                "n_people=3",
            ]
        )
        == 0
    )
    rows = [json.loads(line) for line in tasks.read_text().splitlines()]
    assert all(r["prompt"].endswith("Assistant: <think>") and r["prefilled_think"] for r in rows)
    answered = tmp_path / "answered.jsonl"
    answered.write_text("".join(json.dumps({**r, "response": kk_response(r)}) + "\n" for r in rows))
    scored = tmp_path / "scored.jsonl"
    assert main(["score", "--env", "kk", str(answered), "--out", str(scored)]) == 0
    assert [json.loads(x)["reward"] for x in scored.read_text().splitlines()] == [3.0] * 3


def test_exports_for_a_model_start_from_its_format(tmp_path):
    from rlvr.integrations.trl_rewards import trl_rows
    from rlvr.integrations.verl.data import verl_rows

    base = str(tiny_kk_folder(tmp_path / "b"))
    rows = trl_rows("kk", 2, model=base, conversational=False, env_kwargs={"n_people": 3})
    assert rows[0]["prompt"].startswith("User: ") and rows[0]["prefilled_think"] is True
    # A chat export is rendered by the consumer's chat template, which a base trained from
    # scratch on the plain layout never saw: refused in one line.
    with pytest.raises(ConfigError, match="chat export"):
        trl_rows("kk", 2, model=base)
    with pytest.raises(ConfigError, match="chat export"):
        list(verl_rows("kk", 2, model=base))
    assert (
        main(
            [
                "prepare-verl",
                "kk",
                "--out",
                str(tmp_path / "x.parquet"),
                "--n",
                "2",
                "--model",
                base,
            ]
        )
        == 2
    )


gguf = pytest.importorskip("gguf")


@pytest.fixture
def tiny_chat_model(tmp_path, monkeypatch):
    """A pretrained chat model registered as rlvr's SmolLM2 loader would register one."""
    from test_pretrained import write_tiny_llama

    from rlvr.models import pretrained as P

    path = write_tiny_llama(tmp_path / "Tiny.Q4_1.gguf")
    src = P.GGUFSource("tiny-wheel", "0.0.1", "tiny/Tiny.Q4_1.gguf", "nobody/tiny", "MIT")
    monkeypatch.setitem(P.PRETRAINED, "tiny-chat", src)
    monkeypatch.setattr(P, "gguf_path", lambda name: path)
    monkeypatch.setattr(P, "source_version", lambda name: "0.0.1")
    monkeypatch.setenv("RLVR_HOME", str(tmp_path / "home"))
    return "tiny-chat"


def test_eval_of_a_pretrained_chat_model_uses_its_chat_template(tiny_chat_model, tmp_path):
    records, summary = cli_records(tmp_path, f"model={tiny_chat_model}", "env=kk")
    # The grid's smol profile spells the template out; the name alone now gives the same.
    same(records, grid_records(tiny_chat_model, train={"env_kwargs.template": "chat"}))
    assert records[0]["prompt"].startswith("<|im_start|>")
    assert summary["prompt_format"]["template"] == "chat"
    # Its folder carries the same format (build.json names the model).
    from rlvr.models.pretrained import pretrained_dir

    assert model_format(str(pretrained_dir(tiny_chat_model))).env_kwargs == {"template": "chat"}
    # A pretrained model may be prompted otherwise: one warning line, the explicit value wins.
    said: list[str] = []
    kwargs, _ = with_format(tiny_chat_model, "kk", {"template": "qwen"}, say=said.append)
    assert kwargs["template"] == "qwen" and len(said) == 1
