"""Logic-RL's K&K reward: every rule of docs/design.md §4, bad input, and a no-crash property."""

from __future__ import annotations

import re
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlvr.envs.kk import compute_score, score
from rlvr.envs.kk.reward import answer_status, last_answer, parse_answer

GT = {"Amelia": "knight", "Penelope": "knight", "Evelyn": "knave"}
GOLD = "(1) Amelia is a knight\n(2) Penelope is a knight\n(3) Evelyn is a knave"
WRONG = "(1) Amelia is a knight\n(2) Penelope is a knave\n(3) Evelyn is a knave"


def wrap(answer: str, think: str = "<think> some reasoning </think>") -> str:
    return f"{think}<answer>{answer}</answer>"


def test_correct_scores_three():
    s = score(wrap(GOLD), GT)
    assert (s.reward, s.correct, s.components) == (3.0, True, {"format": 1.0, "answer": 2.0})
    assert s.parsed == GT and s.reason == ""
    assert answer_status(s) == "correct"


def test_format_ok_but_wrong_is_minus_half():
    s = score(wrap(WRONG), GT)
    assert s.components == {"format": 1.0, "answer": -1.5}
    assert s.reward == -0.5 and not s.correct
    assert "Penelope" in s.reason and answer_status(s) == "wrong"


def test_unparseable_answer_missing_name():
    s = score(wrap("(1) Amelia is a knight\n(2) Penelope is a knight\n(3) Someone is a knave"), GT)
    assert s.components == {"format": 1.0, "answer": -2.0} and s.reward == -1.0
    assert "Evelyn" in s.reason and answer_status(s) == "unparseable"


def test_too_many_knight_mentions_is_unparseable():
    s = score(wrap(GOLD + "\nAll knights are honest."), GT)
    assert s.components["answer"] == -2.0 and "4 knight/knave mentions" in s.reason


def test_too_few_mentions_is_unparseable():
    s = score(wrap("(1) Amelia is a knight\n(2) Penelope is a knight"), GT)
    assert s.components["answer"] == -2.0


def test_empty_answer_is_unparseable():
    s = score(wrap("   "), GT)
    assert s.components == {"format": 1.0, "answer": -2.0}


@pytest.mark.parametrize(
    "response",
    [
        f"<answer>{GOLD}</answer>",  # no think
        f"<think>x<answer>{GOLD}</answer>",  # no </think>
        f"</think>x<think><answer>{GOLD}</answer>",  # think tags reversed
        f"<think>x</think><answer>{GOLD}</answer><answer>{GOLD}</answer>",  # two answers
        f"<think>x</think>{GOLD}</answer><answer>",  # answer tags reversed
        f"<think><think>x</think><answer>{GOLD}</answer>",
    ],
)
def test_bad_format_fails_both_parts_even_when_answer_right(response):
    s = score(response, GT)
    assert s.components == {"format": -1.0, "answer": -2.0}
    assert s.reward == -3.0 and not s.correct
    assert s.reason.startswith("format:") and answer_status(s) == "format_failed"


def test_broken_format_with_right_answer_is_reported():
    s = score(f"<answer>{GOLD}</answer>", GT)
    assert s.reward == -3.0 and "answer itself was right" in s.reason and s.parsed == GT


def test_prefilled_think_counts():
    body = f" reasoning </think><answer>{GOLD}</answer>"
    assert score(body, GT, prefilled_think=True).reward == 3.0
    assert score(body, GT, prefilled_think=False).reward == -3.0
    # A second <think> after the prefilled one breaks the format (Logic-RL counts the prompt's).
    assert score("<think>" + body, GT, prefilled_think=True).components["format"] == -1.0


def test_last_answer_tag_rule():
    assert last_answer("<answer>a</answer> text <answer> b </answer>") == "b"
    assert (
        last_answer("<answer>a<answer>b</answer>") == "a<answer>b"
    )  # leftmost-shortest, like finditer
    assert last_answer("<answer>a</answer><answer>unterminated") == "a"
    assert last_answer("no tags") is None
    s = score(f"<think>x</think><answer>{WRONG}</answer><answer>{GOLD}</answer>", GT)
    assert (
        s.parsed == GT and s.reward == -3.0
    )  # parsed from the last tag, but two tags fail the format


@settings(deadline=None)
@given(st.lists(st.sampled_from(["<answer>", "</answer>", "a", "b", " "]), max_size=25))
def test_last_answer_matches_regex_finditer(parts):
    text = "".join(parts)
    matches = list(re.finditer(r"<answer>(.*?)</answer>", text, re.DOTALL))
    expected = matches[-1].group(1).strip() if matches else None
    assert last_answer(text) == expected


def test_name_rule_is_word_bounded_and_case_insensitive():
    assert (
        parse_answer("amelia IS A Knight, penelope is  a knight, evelyn is\na knave", list(GT))[0]
        == GT
    )
    assert (
        parse_answer("Ameliaa is a knight, Penelope is a knight, Evelyn is a knave", list(GT))[0]
        is None
    )
    assert (
        parse_answer("Amelia was a knight, Penelope is a knight, Evelyn is a knave", list(GT))[0]
        is None
    )


@pytest.mark.parametrize(
    "gt",
    [
        GT,
        {"solution_text_format": GOLD, "statements": "()"},
        GOLD,
        {"Amelia": True, "Penelope": True, "Evelyn": False},
    ],
)
def test_ground_truth_forms(gt):
    assert score(wrap(GOLD), gt).reward == 3.0
    assert score(wrap(WRONG), gt).reward == -0.5


@pytest.mark.parametrize("gt", [None, {}, {"Amelia": "wizard"}, 42, ""])
def test_invalid_ground_truth_never_raises(gt):
    s = score(wrap(GOLD), gt)
    assert s.components["answer"] == -2.0 and "invalid ground truth" in s.reason


BAD_INPUTS = [
    None,
    "",
    b"\xff\xfe\x00<think>\x80</think><answer>\xc3(</answer>",
    "x" * 1_000_000,
    "<think>" + "a" * 1_000_000,
    "<answer>" * 200_000,
    ("<answer>" + "Amelia is a knight " * 3 + "</answer>") * 5_000,
    "<think>" + "Amelia " + " " * 500_000 + "is",
    "<think></think><answer>Amelia" + " " * 90_000 + "</answer>",
    12345,
]


@pytest.mark.parametrize("response", BAD_INPUTS, ids=range(len(BAD_INPUTS)))
def test_bad_input_never_raises_and_stays_fast(response):
    t0 = time.perf_counter()
    s = score(response, GT, prefilled_think=True)
    assert time.perf_counter() - t0 < 1.0
    assert -3.0 <= s.reward <= 3.0 and not s.correct and s.reason


@settings(max_examples=300, deadline=None)
@given(
    st.text(max_size=400)
    | st.lists(
        st.sampled_from(
            [
                "<think>",
                "</think>",
                "<answer>",
                "</answer>",
                "Amelia is a knight",
                "Penelope is a knave",
                "Evelyn is a knave",
                "Penelope is a knight",
                "knight",
                "\n",
                " ",
                "(1)",
            ]
        ),
        max_size=20,
    ).map("".join),
    st.booleans(),
)
def test_no_text_crashes_score(text, prefilled):
    s = score(text, GT, prefilled_think=prefilled)
    assert -3.0 <= s.reward <= 3.0
    assert s.reward == sum(s.components.values())
    assert s.components["format"] in (1.0, -1.0) and s.components["answer"] in (2.0, -1.5, -2.0)
    assert s.correct == (s.reward == 3.0)


def test_an_answer_prefill_is_scored_in_front_of_the_response():
    """``answer_prefill``: the env's text after ``<think>`` (an answer-only layout for small
    models)."""
    prefill = "</think><answer>(1)"
    rest = GOLD.removeprefix("(1)") + "</answer>"
    assert GOLD.startswith("(1)")
    assert score(
        rest, {"solution_text_format": GOLD}, prefilled_think=True, answer_prefill=prefill
    ).correct
    missing = score(rest, {"solution_text_format": GOLD}, prefilled_think=True)
    assert not missing.correct and missing.reward == -3.0  # no </think>: the format fails
    out = compute_score(
        "kk_logic", rest, {"solution_text_format": GOLD}, {"answer_prefill": prefill}
    )
    assert out["score"] == 3.0


def test_verl_compute_score_counts_prefill_by_default():
    gt = {"solution_text_format": GOLD}
    out = compute_score("kk_logic", f" r </think><answer>{GOLD}</answer>", gt, None)
    assert out["score"] == 3.0 and out["acc"] == 1.0 and out["format"] == 1.0
    out = compute_score(
        "kk_logic", f" r </think><answer>{GOLD}</answer>", gt, {"prefilled_think": False}
    )
    assert out["score"] == -3.0
