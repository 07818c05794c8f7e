"""verl reward dispatch and parquet export (no verl needed: these are plain functions)."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest

from rlvr.cli import main as cli_main
from rlvr.envs import env_spec
from rlvr.integrations.verl.data import parse_env_args, verl_rows, write_parquet
from rlvr.integrations.verl.reward import compute_score, compute_score_batch, env_for


def kk_answer(gt_text: str, *, think: bool = True) -> str:
    return ("<think>" if think else "") + "reasoning</think><answer>" + gt_text + "</answer>"


def flip_first(gt_text: str) -> str:
    """Swap the first person's role (knight <-> knave)."""
    first, *rest = gt_text.split("\n")
    first = first.replace("knight", "@").replace("knave", "knight").replace("@", "knave")
    return "\n".join([first, *rest])


@pytest.fixture(scope="module")
def kk_rows():
    return list(verl_rows("kk", 3, split="test", seed=0, env_kwargs={"n_people": 3}))


@pytest.fixture(scope="module")
def math_rows():
    return list(verl_rows("math", 3, split="train", seed=0))


def test_env_for_dispatch_and_error():
    assert env_for("rlvr/kk") == "kk"
    assert env_for("rlvr/math/aime24") == "math"
    assert env_for("rlvr/searchqa") == "searchqa"
    assert env_for("kk_logic") == "kk"
    assert env_for("nq") == "searchqa"
    assert env_for("rlvr/Math-v0") == "math"
    with pytest.raises(ValueError, match="data_source"):
        env_for("openai/unknown")
    with pytest.raises(ValueError, match="data_source"):
        compute_score("rlvr/chess", "x", "y", {})


def test_parquet_schema_round_trip(tmp_path, kk_rows, math_rows):
    for name, rows in (("kk", kk_rows), ("math", math_rows)):
        path = write_parquet(rows, tmp_path / f"{name}.parquet")
        table = pq.read_table(path)
        assert table.column_names == [
            "data_source",
            "prompt",
            "ability",
            "reward_model",
            "extra_info",
        ]
        back = table.to_pylist()
        assert back == rows
        for row in back:
            assert row["data_source"] == f"rlvr/{name}"
            assert [m["role"] for m in row["prompt"]] == ["system", "user"]
            assert row["reward_model"]["style"] == "rule"
            assert isinstance(row["reward_model"]["ground_truth"], str)
    assert [r["extra_info"]["index"] for r in kk_rows] == [0, 1, 2]
    assert all(r["extra_info"]["prefilled_think"] is False for r in kk_rows)
    # same seed -> same rows; different index -> different tasks
    assert list(verl_rows("kk", 3, split="test", seed=0, env_kwargs={"n_people": 3})) == kk_rows
    assert (
        len({r["reward_model"]["ground_truth"] + r["prompt"][1]["content"] for r in kk_rows}) == 3
    )


def test_kk_gold_answers_score_full_marks(kk_rows):
    for row in kk_rows:
        gt = row["reward_model"]["ground_truth"]
        res = compute_score(row["data_source"], kk_answer(gt), gt, row["extra_info"])
        assert res == {"score": 3.0, "acc": 1.0, "format": 1.0}
        # flip the first person's role: parsed but wrong -> format 1 + answer -1.5
        wrong = flip_first(gt)
        res = compute_score(row["data_source"], kk_answer(wrong), gt, row["extra_info"])
        assert res["acc"] == 0.0 and res["score"] == pytest.approx(-0.5)
    # Logic-RL data (prefilled "<think>" in the prompt, not in the response) is the alias default
    gt = kk_rows[0]["reward_model"]["ground_truth"]
    assert compute_score("kk_logic", kk_answer(gt, think=False), gt, None)["score"] == 3.0
    assert (
        compute_score("rlvr/kk", kk_answer(gt, think=False), gt, {"prefilled_think": False})[
            "score"
        ]
        == -3.0
    )


def test_math_gold_answers_and_batch(math_rows):
    responses, golds, sources, extras = [], [], [], []
    for row in math_rows:
        gt = row["reward_model"]["ground_truth"]
        responses += [f"so the answer is \\boxed{{{gt}}}", "no boxed answer"]
        golds += [gt, gt]
        sources += [row["data_source"]] * 2
        extras += [row["extra_info"]] * 2
    single = [compute_score(s, r, g, e) for s, r, g, e in zip(sources, responses, golds, extras)]
    assert [x["acc"] for x in single] == [1.0, 0.0] * len(math_rows)
    assert [x["score"] for x in single] == [1.0, 0.0] * len(math_rows)
    assert compute_score_batch(sources, responses, golds, extras) == single


def test_searchqa_and_mixed_batch(kk_rows):
    gt = {"target": ["Paris", "City of Paris"]}
    assert (
        compute_score("rlvr/searchqa", "<think>x</think><answer> paris </answer>", gt, {})["score"]
        == 1.0
    )
    assert compute_score("nq", "<answer>Lyon</answer>", ["Paris"], None)["score"] == 0.0
    kk_gt = kk_rows[0]["reward_model"]["ground_truth"]
    batch = compute_score_batch(
        ["rlvr/searchqa", "rlvr/kk", "rlvr/math"],
        ["<answer>Paris</answer>", kk_answer(kk_gt), "\\boxed{2}"],
        [gt, kk_gt, "2"],
        [{}, {"prefilled_think": False}, {}],
    )
    assert [b["score"] for b in batch] == [1.0, 3.0, 1.0]
    assert all(set(b) == {"score", "acc", "format"} for b in batch)
    with pytest.raises(ValueError, match="lengths differ"):
        compute_score_batch(["rlvr/kk"], [], [], None)


def test_scorers_never_raise_on_hostile_text(kk_rows):
    gt = kk_rows[0]["reward_model"]["ground_truth"]
    for text in ["", "<answer>" * 1000, "\x00\xff" * 10, "x" * 1_000_000]:
        assert compute_score("rlvr/kk", text, gt, {})["acc"] == 0.0
        assert compute_score("rlvr/searchqa", text, ["a"], {})["acc"] == 0.0


def test_encode_ground_truth_searchqa_and_bad_env():
    gold = env_spec("searchqa").export_gold({"ground_truth": ["a", "b"]}, "verl")
    assert gold == {"target": ["a", "b"]}
    with pytest.raises(ValueError, match="env"):
        env_spec("chess")
    assert parse_env_args(["n_people=5", "dataset=aime24"]) == {"n_people": 5, "dataset": "aime24"}
    with pytest.raises(ValueError, match="--env-arg"):
        parse_env_args(["oops"])


def test_searchqa_rows_select_the_agent_loop(tmp_path):
    rows = list(verl_rows("searchqa", 3, split="train", seed=0))
    for row in rows:
        assert row["agent_name"] == "rlvr_searchqa" and row["data_source"] == "rlvr/searchqa"
        assert row["ability"] == "qa" and row["prompt"][-1]["role"] == "user"
        assert row["extra_info"]["question"] in row["prompt"][-1]["content"]
        golds = row["reward_model"]["ground_truth"]["target"]
        assert golds and all(isinstance(g, str) for g in golds)
        assert compute_score(row["data_source"], f"<answer>{golds[0]}</answer>", golds)["acc"]
    path = write_parquet(rows, tmp_path / "qa.parquet")
    assert pq.read_table(path).to_pylist() == rows
    assert "agent_name" not in next(iter(verl_rows("kk", 1, env_kwargs={"n_people": 3})))
    # a public QA set exports without a corpus or a running retrieval service (no search is run)
    qa = tmp_path / "qa.jsonl"
    qa.write_text('{"question": "Who wrote it?", "golden_answers": ["Ann", "Ann B."]}\n')
    (row,) = verl_rows("searchqa", 1, split="test", env_kwargs={"dataset": str(qa)})
    assert row["data_source"] == "rlvr/searchqa/qa" and row["agent_name"] == "rlvr_searchqa"
    assert row["extra_info"]["question"] == "Who wrote it?"
    assert row["reward_model"]["ground_truth"] == {"target": ["Ann", "Ann B."]}


def test_prepare_verl_cli(tmp_path, capsys):
    out = tmp_path / "d" / "kk.parquet"
    assert (
        cli_main(
            [
                "prepare-verl",
                "kk",
                "--n",
                "2",
                "--split",
                "test",
                "--out",
                str(out),
                "--env-arg",
                "n_people=4",
            ]
        )
        == 0
    )
    rows = pq.read_table(out).to_pylist()
    assert len(rows) == 2 and rows[0]["extra_info"]["split"] == "test"
    assert rows[0]["reward_model"]["ground_truth"].count("\n") == 3  # four people, one line each
    assert "wrote 2 kk tasks" in capsys.readouterr().out
