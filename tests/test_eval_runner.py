"""The evaluation runner on the micro model and the K&K env (seconds)."""

from __future__ import annotations

import json

import pytest
import torch

from rlvr.eval import runner as R
from rlvr.eval.cli import format_summary
from rlvr.eval.records import read_jsonl, save_result
from rlvr.models import build_micro

KK = dict(
    env="kk",
    group_by="n_people",
    group_values=[3, 4],
    n_items=2,
    env_kwargs={"template": "plain"},
    max_new_tokens=6,
    batch_size=4,
)


@pytest.fixture(scope="module")
def micro():
    torch.set_num_threads(1)
    return build_micro(seed=0)


def test_records_summary_and_jsonl(micro, tmp_path):
    model, tok = micro
    cfg = R.EvalConfig(**KK, k=3, pass_ks=[1, 2])
    res = R.evaluate(cfg, model, tok, progress=False)
    assert len(res.records) == 2 * 2 * (1 + 3)
    r0 = res.records[0]
    assert {
        "item",
        "group",
        "mode",
        "response",
        "reward",
        "correct",
        "ground_truth",
        "n_people",
    } <= set(r0)
    assert set(res.summary) == {"3", "4", "all"}
    assert {"greedy", "avg@3", "pass@1", "pass@2", "pass@3"} <= set(res.summary["all"])
    save_result(res, tmp_path)
    back = read_jsonl(tmp_path / "responses.jsonl")
    assert [b["response"] for b in back] == [r["response"] for r in res.records]
    assert json.loads((tmp_path / "summary.json").read_text())["summary"]["all"]["n_items"] == 4
    assert "| all | 4 |" in format_summary(res.summary)
    # Same seed, same responses.
    again = R.evaluate(cfg, model, tok, progress=False)
    assert [r["response"] for r in again.records] == [r["response"] for r in res.records]


def test_rollout_backend_and_generate_agree_when_greedy(micro):
    model, tok = micro
    a = R.evaluate(R.EvalConfig(**KK, backend="rollout"), model, tok, progress=False)
    b = R.evaluate(R.EvalConfig(**KK, backend="generate"), model, tok, progress=False)
    assert [r["response"] for r in a.records] == [r["response"] for r in b.records]


def test_accuracy_counts_with_an_oracle(micro, monkeypatch):
    """A generator that answers items with an even index correctly: accuracy must be exactly 1/2."""
    model, tok = micro
    answers = {}
    env = R.make_env("kk", "test", template="plain", n_people=3)
    for i in range(4):
        prompt, info = env.reset(seed=0, options={"index": i})
        good = f"</think><answer>{info['solution_text_format']}</answer>"
        answers[tuple(tok.encode(prompt, add_special_tokens=False))] = good if i % 2 == 0 else "no"

    def fake(model, tokenizer, cfg):
        return (
            lambda ctxs, temp, seed: [R.Completion(answers[tuple(c)], [1], "eos") for c in ctxs]
        ), "oracle"

    monkeypatch.setattr(R, "make_generate_fn", fake)
    cfg = R.EvalConfig(env="kk", env_kwargs={"template": "plain", "n_people": 3}, n_items=4, k=2)
    res = R.evaluate(cfg, model, tok, progress=False)
    assert (
        res.metric("greedy") == 0.5 and res.metric("avg@2") == 0.5 and res.metric("pass@2") == 0.5
    )
    assert [r["correct"] for r in res.records if r["mode"] == "greedy"] == [
        True,
        False,
        True,
        False,
    ]


def test_config_errors():
    with pytest.raises(ValueError, match="pass_ks"):
        R.EvalConfig(k=2, pass_ks=[4])
    with pytest.raises(ValueError, match="group_by"):
        R.EvalConfig(group_by="n_people")
    with pytest.raises(ValueError, match="nothing"):
        R.EvalConfig(greedy=False, k=0)
    with pytest.raises(ValueError, match="device: must be auto, cpu, mps or cuda"):
        R.EvalConfig(device="gpu")


def test_cuda_without_a_gpu_is_one_line_before_loading(monkeypatch, capsys):
    """A paper-scale evaluation on a machine without a GPU: the CLI's one-line error, not
    torch's traceback from moving the model."""
    from rlvr.cli import main

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(R, "load_model", lambda *a: pytest.fail("loaded a model"))
    assert main(["eval", "model=micro", "env=kk", "device=cuda", "--quiet"]) == 2
    assert "device: 'cuda' but torch sees no CUDA GPU" in capsys.readouterr().err


def test_rlvr_eval_command(tmp_path, capsys):
    from rlvr.cli import main

    out = tmp_path / "ev"
    assert (
        main(
            [
                "eval",
                "model=micro",
                "env=kk",
                "n_items=2",
                "max_new_tokens=4",
                "k=2",
                "device=auto",
                "env_kwargs={template: plain, n_people: 3}",
                f"out={out}",
                "--quiet",
            ]
        )
        == 0
    )
    assert len(read_jsonl(out / "responses.jsonl")) == 2 * 3
    assert "| all | 2 |" in capsys.readouterr().out
