"""Hand-checked tests of rlvr.eval.metrics."""

from __future__ import annotations

import itertools
import math

import pytest

from rlvr.eval import metrics as M


def brute_force_pass_at_k(n: int, c: int, k: int) -> float:
    """Share of all k-subsets of n samples (c correct) that hold at least one correct sample."""
    samples = [True] * c + [False] * (n - c)
    subsets = list(itertools.combinations(range(n), k))
    return sum(any(samples[i] for i in s) for s in subsets) / len(subsets)


@pytest.mark.parametrize("n", [1, 2, 5, 8])
def test_pass_at_k_matches_enumeration(n):
    for c in range(n + 1):
        for k in range(1, n + 1):
            assert M.pass_at_k(n, c, k) == pytest.approx(brute_force_pass_at_k(n, c, k), abs=1e-12)


def test_pass_at_k_closed_forms_and_errors():
    assert M.pass_at_k(10, 3, 1) == pytest.approx(0.3)
    assert M.pass_at_k(16, 0, 16) == 0.0
    assert M.pass_at_k(16, 1, 16) == 1.0
    assert M.pass_at_k(200, 10, 100) == pytest.approx(1 - math.comb(190, 100) / math.comb(200, 100))
    with pytest.raises(ValueError, match="k=5"):
        M.pass_at_k(4, 1, 5)
    with pytest.raises(ValueError, match="c=6"):
        M.pass_at_k(4, 6, 1)
    with pytest.raises(TypeError):
        M.pass_at_k(4.0, 1, 1)


def test_accuracy_and_avg_at_k():
    assert M.accuracy([True, False, True, True]) == 0.75
    assert math.isnan(M.accuracy([]))
    # Item means 1/2 and 1/4 -> 3/8, not the pooled 2/6.
    assert M.avg_at_k([[1, 0], [1, 0, 0, 0]]) == pytest.approx(0.375)
    assert M.mean_pass_at_k([[1, 0], [0, 0]], 1) == pytest.approx(0.25)


def test_em_f1_squad_conventions():
    assert M.normalize_answer("The  Eiffel Tower!") == "eiffel tower"
    assert M.exact_match("the eiffel tower", ["Eiffel Tower"]) == 1.0
    assert M.exact_match("Paris", ["Eiffel Tower", "paris."]) == 1.0
    assert M.exact_match(None, ["x"]) == 0.0
    # pred "eiffel tower paris" vs gold "eiffel tower": P = 2/3, R = 1 -> F1 = 0.8
    assert M.f1_score("Eiffel Tower, Paris", ["the Eiffel Tower"]) == pytest.approx(0.8)
    assert M.f1_score("london", ["paris"]) == 0.0
    assert M.gold_answers({"target": ["a", "b"]}) == ["a", "b"]
    assert M.gold_answers("a") == ["a"]


def _records():
    rec = []
    # item a (3 people): greedy right, 2/4 samples right; item b (4 people): greedy wrong, 0/4.
    for item, group, greedy, samples in (
        ("a", 3, True, [1, 1, 0, 0]),
        ("b", 4, False, [0, 0, 0, 0]),
    ):
        rec.append(
            {
                "item": item,
                "group": group,
                "mode": "greedy",
                "correct": greedy,
                "reward": 3.0 if greedy else -1.0,
            }
        )
        for j, s in enumerate(samples):
            rec.append(
                {"item": item, "group": group, "mode": "sample", "sample": j, "correct": bool(s)}
            )
    return rec


def test_summarize_and_groups():
    s = M.summarize(_records(), ks=(1, 2, 4, 8))
    assert s["n_items"] == 2 and s["greedy"] == 0.5
    assert s["avg@4"] == pytest.approx(0.25) and s["avg@k"] == s["avg@4"]
    assert s["pass@1"] == pytest.approx(0.25)
    # item a: 1 - C(2,2)/C(4,2) = 5/6; item b: 0.
    assert s["pass@2"] == pytest.approx(5 / 12)
    assert s["pass@4"] == pytest.approx(0.5)
    assert "pass@8" not in s
    assert s["greedy_reward"] == pytest.approx(1.0)
    g = M.summarize_by_group(_records(), ks=(2,))
    assert g[3]["greedy"] == 1.0 and g[4]["avg@4"] == 0.0 and g["all"]["greedy"] == 0.5


def test_summarize_reports_em_f1_and_tool_use_per_mode():
    records = [
        {"item": "a", "mode": "greedy", "correct": True, "em": 1.0, "f1": 1.0, "tool_calls": 2},
        {"item": "b", "mode": "greedy", "correct": False, "em": 0.0, "f1": 0.5, "tool_calls": 0},
        {"item": "a", "mode": "sample", "correct": False, "em": 0.0, "f1": 0.0, "tool_calls": 1},
        {"item": "a", "mode": "sample", "correct": True, "em": 1.0, "f1": 1.0, "tool_calls": 1},
        {"item": "b", "mode": "sample", "correct": False, "em": 0.0, "f1": 0.0, "tool_calls": 0},
        {"item": "b", "mode": "sample", "correct": False, "em": 0.0, "f1": 0.0, "tool_calls": 0},
    ]
    out = M.summarize(records, ks=(1, 2))
    assert out["greedy_em"] == 0.5 and out["greedy_f1"] == 0.75
    assert out["greedy_tool_use"] == 0.5 and out["sample_tool_use"] == 0.5
    assert out["avg@2"] == 0.25
    # K&K and math records carry no tool calls: no tool-use key.
    assert "greedy_tool_use" not in M.summarize([{"item": "a", "mode": "greedy", "correct": True}])
