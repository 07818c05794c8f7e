"""Math loaders (against ../shared/data) and the synthetic generator."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from rlvr.envs.math import DATASETS, load_dataset, score_batch
from rlvr.envs.math.data import gold_answer, gsm8k_gold, olympiad_gold
from rlvr.envs.math.synthetic import LEVELS, generate_dataset, generate_problem, problem_split

EXPECTED_COUNTS = {
    "math500": 500,
    "aime24": 30,
    "amc23": 40,
    "minerva": 272,
    "olympiadbench": 675,
    "gsm8k": 1319,
}
#: Measured over every record of each set (see docs/envs_math.md): all golds verify against
#: themselves wrapped in \boxed{}. The test checks an evenly spaced sample to stay fast.
SELF_VERIFY_RATE = {name: 1.0 for name in EXPECTED_COUNTS}
SAMPLE = 25


def test_gold_normalisers():
    assert gsm8k_gold("She pays 3 * 4 = <<3*4=12>>12.\n#### 1,234") == "1234"
    assert olympiad_gold(["$\\frac{1}{2}$"]) == "\\frac{1}{2}"
    assert olympiad_gold(["$3$", "$4$"]) == "3, 4"
    assert gold_answer({"answer": 27.0}, "amc") == "27"
    assert gold_answer({"answer": 2.5}) == "2.5"
    assert gold_answer({"solution": "so $\\boxed{\\frac{1}{2}}$. Then \\boxed{7}"}) == "7"
    assert gold_answer({"final_answer": ["$x$"]}) == "x"
    assert gold_answer({"reward_model": {"ground_truth": "5"}}) == "5"


def test_local_jsonl_and_errors(tmp_path):
    path = tmp_path / "mine.jsonl"
    path.write_text(json.dumps({"question": "1+1?", "answer": "#### 2"}) + "\n")
    (rec,) = load_dataset(path)
    assert rec == {"problem": "1+1?", "ground_truth": "2", "source": "mine", "id": "mine/0"}
    with pytest.raises(FileNotFoundError, match="neither a known name"):
        load_dataset(tmp_path / "absent.jsonl")
    with pytest.raises(ValueError, match="answer_format"):
        load_dataset(path, answer_format="nope")
    with pytest.raises(ValueError, match="split"):
        load_dataset("math500", split="train")


@pytest.mark.parametrize("name", list(EXPECTED_COUNTS))
def test_loader_counts_and_golds_self_verify(shared_data, name):
    recs = load_dataset(name, data_dir=shared_data)
    assert len(recs) == EXPECTED_COUNTS[name] == DATASETS[name].size
    for r in recs:
        assert set(r) >= {"problem", "ground_truth", "source", "id"}
        assert r["problem"].strip() and r["ground_truth"].strip() and r["source"] == name
    assert len({r["id"] for r in recs}) == len(recs)
    step = max(1, len(recs) // SAMPLE)
    golds = [r["ground_truth"] for r in recs[::step]]
    scores = score_batch([f"\\boxed{{{g}}}" for g in golds], golds, workers=2, timeout_s=10.0)
    rate = sum(s.correct for s in scores) / len(scores)
    assert rate >= SELF_VERIFY_RATE[name], [
        (g, s.reason) for g, s in zip(golds, scores) if not s.correct
    ]


def test_dataset_specific_golds(shared_data):
    assert load_dataset("amc23", data_dir=shared_data)[0]["ground_truth"] == "27"
    minerva = load_dataset("minerva", data_dir=shared_data)[0]
    assert minerva["ground_truth"] and "\\boxed" not in minerva["ground_truth"]
    assert all(
        "$" not in r["ground_truth"] for r in load_dataset("olympiadbench", data_dir=shared_data)
    )
    assert load_dataset("gsm8k", data_dir=shared_data)[0]["ground_truth"] == "18"


# -- synthetic ------------------------------------------------------------------------------------
def test_synthetic_levels_and_answers_verify_against_their_solutions():
    problems = [generate_problem(i, difficulty=d) for d in LEVELS for i in range(8)]
    assert {p.difficulty for p in problems} == set(LEVELS)
    assert all(len(p.problem) < 80 for p in problems)
    scores = score_batch([p.solution for p in problems], [p.answer for p in problems], workers=2)
    assert all(s.correct for s in scores), [
        (p.problem, p.solution) for p, s in zip(problems, scores) if not s.correct
    ]


def test_synthetic_levels_are_what_they_say():
    assert generate_problem(0, difficulty=1).problem.count(" ") == 3  # "Compute a op b."
    assert "(" in generate_problem(0, difficulty=2).problem
    assert "/" in generate_problem(0, difficulty=3).problem
    assert generate_problem(0, difficulty=4).problem.startswith("Solve for x:")
    assert all(
        generate_problem(i, difficulty=5).problem.split()[0] in ("Solve", "Find") for i in range(10)
    )


def test_synthetic_train_and_test_never_share_a_problem():
    train = generate_dataset(400, split="train", difficulty=[1, 3])
    test = generate_dataset(100, split="test", difficulty=[1, 3])
    assert not {r["problem"] for r in train} & {r["problem"] for r in test}
    assert all(problem_split(r["problem"]) == "test" for r in test)


def test_synthetic_seed_and_difficulty_errors():
    assert generate_problem(3, seed=1) != generate_problem(3, seed=2)
    with pytest.raises(ValueError, match="difficulty"):
        generate_problem(0, difficulty=6)
    with pytest.raises(ValueError, match="split"):
        generate_problem(0, split="val")
    with pytest.raises(ValueError, match="index"):
        generate_problem(-1)


def test_synthetic_is_identical_across_processes():
    code = (
        "import json; from rlvr.envs.math.synthetic import generate_dataset;"
        "print(json.dumps(generate_dataset(30, split='test', seed=7)))"
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code],
            stdout=subprocess.PIPE,
            text=True,
            env={"PYTHONHASHSEED": seed, "PATH": ""},
        )
        for seed in ("1", "2")
    ]
    outs = [p.communicate(timeout=120)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert outs[0] == outs[1]
    assert json.loads(outs[0]) == generate_dataset(30, split="test", seed=7)
