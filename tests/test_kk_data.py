"""Loading Logic-RL's K&K parquet files (from ../shared/data) and other sources."""

from __future__ import annotations

import json
import sys

import pyarrow.parquet as pq
import pytest
from gymnasium.utils.env_checker import check_env

from rlvr.envs.kk import KnightsKnavesEnv, kk_prompt, load_dataset, score, solutions
from rlvr.envs.kk.cot import solve_with_trace


@pytest.fixture(scope="module")
def kk_dir(shared_data):
    path = shared_data / "knights_knaves_logicrl"
    if not path.is_dir():
        pytest.skip(f"{path} not found")
    return path


@pytest.mark.parametrize("n", [3, 5, 7])
def test_parquet_records_and_gold_scores_three(kk_dir, n):
    path = kk_dir / f"{n}ppl" / "test.parquet"
    rows = pq.read_table(path).to_pylist()
    records = list(load_dataset(path))
    assert len(records) == len(rows) == 100
    for rec, row in zip(records, rows):
        assert (
            rec["n_people"] == n == len(rec["names"]) and list(rec["ground_truth"]) == rec["names"]
        )
        assert rec["prompt"] == row["prompt"][0]["content"]
        # Our prompt builder reproduces Logic-RL's prompt byte for byte.
        assert kk_prompt(rec["quiz"])[0] == rec["prompt"]
        # Our solver agrees with mem-kk-logic's solution, and the CoT reaches it.
        knights = tuple(r == "knight" for r in rec["ground_truth"].values())
        assert solutions(rec["statements"]) == [knights] == [tuple(row["solution"])]
        assert solve_with_trace(rec["statements"], rec["names"])[0] == knights
        # Echoing Logic-RL's gold answer scores +3 against both ground-truth forms.
        gold = row["reward_model"]["ground_truth"]
        response = f" I reasoned. </think><answer>{gold['solution_text_format']}</answer>"
        assert score(response, gold, prefilled_think=True).reward == 3.0
        assert score(response, rec["ground_truth"], prefilled_think=True).reward == 3.0


def test_directory_and_size_filter(kk_dir):
    records = list(load_dataset(kk_dir, n_people=[4, 6]))
    assert len(records) == 200 and {r["n_people"] for r in records} == {4, 6}


def test_env_on_parquet(kk_dir):
    env = KnightsKnavesEnv(dataset=str(kk_dir / "3ppl" / "test.parquet"), split="test")
    assert env.num_tasks == 100
    check_env(env)
    prompt, info = env.reset(seed=0, options={"index": 0})
    row = pq.read_table(kk_dir / "3ppl" / "test.parquet").slice(0, 1).to_pylist()[0]
    assert prompt == row["prompt"][0]["content"]
    _, r, *_ = env.step(f" ok </think><answer>{row['solution_text_format']}</answer>")
    assert r == 3.0
    with pytest.raises(ValueError, match="n_people"):
        KnightsKnavesEnv(dataset=str(kk_dir / "3ppl" / "test.parquet"), n_people=5)


def test_jsonl_in_kk_layout(tmp_path):
    row = {
        "quiz": (
            "A very special island ... You meet 2 inhabitants: Zoey and Liam. "
            "Zoey said, \"Liam is a knave\". "
            "Liam said, \"Zoey is a knave and Liam is a knight\". "
            "So who is a knight and who is a knave?"
        ),
        "names": ["Zoey", "Liam"],
        "solution": [False, True],
        "statements": "(('lying', 1), ('and', ('lying', 0), ('telling-truth', 1)))",
        "index": 0,
    }
    path = tmp_path / "2ppl.jsonl"
    path.write_text(json.dumps(row) + "\n")
    (rec,) = load_dataset(path)
    assert rec["ground_truth"] == {"Zoey": "knave", "Liam": "knight"}
    assert rec["solution_text_format"] == "(1) Zoey is a knave\n(2) Liam is a knight"
    assert rec["prompt"].endswith("<think>") and rec["cot"]


def test_missing_path_and_hub_without_datasets(tmp_path, monkeypatch):
    with pytest.raises(FileNotFoundError):
        load_dataset(tmp_path / "nope.parquet")
    with pytest.raises(FileNotFoundError):
        load_dataset("not-a-hub-name")
    monkeypatch.setitem(sys.modules, "datasets", None)  # makes `import datasets` fail
    with pytest.raises(ImportError, match=r"rlvr\[hub\]"):
        load_dataset("K-and-K/knights-and-knaves")
