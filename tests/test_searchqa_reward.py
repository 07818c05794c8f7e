"""Search QA reward: SQuAD normalisation, EM/F1, the last-answer rule and its guards."""

import pytest

from rlvr.envs.searchqa import compute_score, exact_match, max_f1, normalize_answer, score, token_f1
from rlvr.envs.searchqa.env import SEARCH_R1_PROMPT
from rlvr.envs.searchqa.reward import INVALID_ACTION_MESSAGE, MAX_ANSWER_TAGS


@pytest.mark.parametrize(
    "raw, norm",
    [
        ("The Eiffel Tower", "eiffel tower"),
        ("  an   apple  ", "apple"),
        ("A.B.C.", "abc"),
        ("Theodore", "theodore"),  # "the" only as a whole word
        ("the the a an", ""),
        ("U.S.A!", "usa"),
        ("Rock 'n' roll", "rock n roll"),
        ("14 December 1972 UTC", "14 december 1972 utc"),
        ("New\tYork\nCity", "new york city"),
        ("Ångström", "ångström"),
        ("", ""),
    ],
)
def test_normalisation_table(raw, norm):
    assert normalize_answer(raw) == norm


def test_exact_match_any_gold_and_f1():
    assert exact_match("the Eiffel tower.", ["Louvre", "Eiffel Tower"])
    assert not exact_match("Eiffel", ["Eiffel Tower"])
    assert token_f1("Eiffel", "Eiffel Tower") == pytest.approx(2 * 1.0 * 0.5 / 1.5)
    assert token_f1("", "") == 1.0 and token_f1("x", "") == 0.0
    assert max_f1("December 1972", ["14 December 1972 UTC", "December 1972"]) == 1.0
    assert max_f1("anything", []) == 0.0


def test_last_answer_counts():
    s = score("<think>hm</think><answer>Paris</answer> wait <answer>Lyon</answer>", ["Lyon"])
    assert s.reward == 1.0 and s.correct and s.parsed == "Lyon"
    assert s.components == {"em": 1.0, "f1": 1.0, "format": 1.0}
    assert score("<answer>Paris</answer> then <answer>Lyon</answer>", ["Paris"]).reward == 0.0


def test_prompt_example_answer_never_counts():
    prompt = SEARCH_R1_PROMPT.format(question="Capital of China?")
    assert "<answer> Beijing </answer>" in prompt
    assert score("I think so.", ["Beijing"]).reward == 0.0  # response only: no answer at all
    assert (
        score(prompt + "no answer", ["Beijing"]).reward == 1.0
    )  # the reason to never pass the prompt


def test_answer_tag_spam_scores_zero():
    ok = "".join(f"<answer>{a}</answer>" for a in ["x", "Lyon"][:MAX_ANSWER_TAGS])
    assert score(ok, ["Lyon"]).reward == 1.0
    spam = "".join(f"<answer>{a}</answer>" for a in ["a", "b", "c", "Lyon"])
    s = score(spam, ["Lyon"])
    assert (
        s.reward == 0.0 and not s.correct and s.components["format"] == 0.0 and "spam" in s.reason
    )
    assert score(spam, ["Lyon"], max_answer_tags=4).reward == 1.0


def test_tool_text_is_not_an_answer():
    transcript = (
        "<search>q</search>\n\n<information>Doc 1(Title: X) <answer>Lyon</answer></information>\n\n"
        + INVALID_ACTION_MESSAGE
    )
    s = score(transcript, ["Lyon"])
    assert s.reward == 0.0 and s.parsed is None
    # the corrective message mentions "<answer> and </answer>": that is not an answer "and"
    assert score(INVALID_ACTION_MESSAGE, ["and"]).reward == 0.0
    assert score(transcript + "<answer>Lyon</answer>", ["Lyon"]).reward == 1.0


def test_unclosed_information_tag_is_policy_text_and_drops_nothing():
    tool = "\n\n<information>Doc 1(Title: \"X\") <answer>Paris</answer></information>\n\n"
    # a stray opening tag the policy wrote: the answer after it still counts ...
    assert score("<information> notes <answer>Lyon</answer>", ["Lyon"]).reward == 1.0
    # ... and it cannot hide answer-tag spam from the count
    spam = "<information>" + "<answer>a</answer>" * 3 + "<answer>Lyon</answer>"
    assert "spam" in score(spam, ["Lyon"]).reason
    # a stray tag before a real tool block: only the real block goes
    s = score("<information> my answer: <answer>Lyon</answer>" + tool, ["Lyon"])
    assert s.reward == 1.0 and s.parsed == "Lyon"
    assert score("<answer>Lyon</answer>" + tool, ["Paris"]).reward == 0.0


@pytest.mark.parametrize(
    "response, parsed, reason_part",
    [
        ("<answer>Lyon", None, "unterminated"),
        ("Lyon</answer>", None, "no <answer>"),
        ("<answer>x <answer>Lyon</answer></answer>", "Lyon", ""),
        ("<answer></answer>", "", "empty answer"),
        ("", None, "no <answer>"),
    ],
)
def test_malformed_tags(response, parsed, reason_part):
    s = score(response, ["Lyon"])
    assert s.parsed == parsed
    assert reason_part in s.reason


def test_never_raises_on_odd_input():
    assert score(b"\xff\xfe<answer>Lyon</answer>", ["Lyon"]).reward == 1.0
    assert score(None, ["x"]).reward == 0.0
    assert score("<answer>" * 200_000, ["x"]).reward == 0.0
    assert (
        score("<answer>" + "a" * 1_000_000 + "</answer>", ["x"]).reward == 0.0
    )  # cut, unterminated
    assert score("<answer>7</answer>", [7]).reward == 1.0
    assert score("<answer>x</answer>", None).reason == "no gold answers given"


def test_verl_signature_accepts_search_r1_ground_truth():
    assert (
        compute_score("nq", "<answer>Paris</answer>", {"target": ["paris", "Paris, France"]}, {})
        == 1.0
    )
    assert compute_score("nq", "<answer>Rome</answer>", "Paris") == 0.0
