"""Search QA reward: exact match of the last ``<answer>`` against any gold answer
(docs/design.md §4).

``score(response, golds)`` is pure and never raises. It reads only text the policy wrote:

- pass the response (or the transcript of all turns); the prompt is never scored, so the
  prompt's example ``<answer> Beijing </answer>`` cannot count (Search-R1's ``qa_em.py`` scores
  prompt + response and works around this by ignoring the first match; we do not need to);
- closed ``<information>...</information>`` blocks (the innermost ones: a block holds no other
  ``<information>``) and the env's corrective message are removed before parsing, because
  retrieved passages and the corrective text (which itself mentions ``<answer> and
  </answer>``) are tool output, not answers. The env always closes its blocks, so an
  ``<information>`` without a closing tag was written by the policy and stays as text: nothing
  after it is dropped (Search-R1's ``verl/utils/reward_score/qa_em.py`` at commit a14dc3a4 strips
  nothing and scores the last ``<answer>`` of the whole text; we strip only what the tool wrote);
- the answer is the content of the last closed ``<answer>...</answer>``; with nested or repeated
  opening tags it is the text after the last ``<answer>`` that precedes the last ``</answer>``;
- answer-tag spam: more than ``max_answer_tags`` opening ``<answer>`` tags (default 2) scores 0,
  so hedging with many answers cannot pay.

Reward = EM in {0, 1}. Components: ``em``, ``f1`` (SQuAD token F1, informational) and
``format`` (1 when a closed answer was found and the response was not spam).
"""

from __future__ import annotations

import re

from rlvr.envs.base import MAX_RESPONSE_CHARS, Score, coerce_text
from rlvr.envs.searchqa.normalize import as_gold_list, exact_match, max_f1, normalize_answer

#: More opening ``<answer>`` tags than this in a response scores 0 (answer-tag spam).
MAX_ANSWER_TAGS = 2

#: Search-R1's corrective observation for a turn with neither a search nor an answer
#: (``search_r1/llm_agent/generation.py``, ``execute_predictions``).
INVALID_ACTION_MESSAGE = (
    "\nMy previous action is invalid. If I want to search, I should put the query between "
    "<search> and </search>. If I want to give the final answer, I should put the answer "
    "between <answer> and </answer>. Let me try again.\n"
)

#: A closed tool block holding no other opening tag (so a stray ``<information>`` the policy wrote
#: before a real block does not swallow the text between them).
_INFORMATION_BLOCK = re.compile(r"<information>(?:(?!<information>).)*?</information>", re.DOTALL)


def strip_tool_text(text: str) -> str:
    """Remove what a tool wrote (``<information>`` blocks, the corrective message) from a
    transcript."""
    text = text.replace(INVALID_ACTION_MESSAGE.strip(), " ")
    return _INFORMATION_BLOCK.sub(" ", text)


def last_tag_content(text: str, tag: str) -> str | None:
    """Content of the last closed ``<tag>...</tag>``: the text after the last ``<tag>`` that
    precedes the last ``</tag>``, up to the next ``</tag>``; None when there is no closed block.
    Linear time, no regex backtracking."""
    close = text.rfind(f"</{tag}>")
    if close < 0:
        return None
    open_ = text.rfind(f"<{tag}>", 0, close)
    if open_ < 0:
        return None
    # Nested "<a>x <a>y</a></a>": the innermost closed block, "y".
    return text[open_ + len(tag) + 2 : close].split(f"</{tag}>", 1)[0]


def extract_answer(response: str) -> str | None:
    """The policy's final answer: last closed ``<answer>`` block of the non-tool text, stripped."""
    content = last_tag_content(strip_tool_text(coerce_text(response)), "answer")
    return None if content is None else content.strip()


def score(response, golds, *, max_answer_tags: int = MAX_ANSWER_TAGS) -> Score:
    """EM reward of a response (or multi-turn transcript) against gold answers; never raises."""
    text = strip_tool_text(coerce_text(response)[:MAX_RESPONSE_CHARS])
    gold_list = as_gold_list(golds)
    n_tags = text.count("<answer>")
    answer = last_tag_content(text, "answer")
    if answer is None:
        reason = (
            "unterminated <answer> tag" if n_tags else "no <answer>...</answer> in the response"
        )
        return Score(0.0, False, {"em": 0.0, "f1": 0.0, "format": 0.0}, reason, None)
    answer = answer.strip()
    f1 = max_f1(answer, gold_list)
    if n_tags > max_answer_tags:
        reason = f"answer-tag spam: {n_tags} <answer> tags > {max_answer_tags}"
        return Score(0.0, False, {"em": 0.0, "f1": f1, "format": 0.0}, reason, answer)
    em = exact_match(answer, gold_list)
    if em:
        reason = ""
    elif not gold_list:
        reason = "no gold answers given"
    elif not normalize_answer(answer):
        reason = "empty answer"
    else:
        reason = "answer does not match any gold answer"
    return Score(float(em), em, {"em": float(em), "f1": f1, "format": 1.0}, reason, answer)


def compute_score(data_source, solution_str, ground_truth, extra_info=None) -> float:
    """verl's reward signature; ``ground_truth`` may be a list, a string or
    ``{"target": [...]}``."""
    return score(solution_str, ground_truth).reward


# -- how exported rows carry a task (rlvr.envs.registry: the search QA spec) ---------------------
def gold_answers(info: dict) -> list[str]:
    """A reset ``info``'s gold answers as a list of strings."""
    return [str(a) for a in as_gold_list(info["ground_truth"])]


def search_r1_gold(info: dict) -> dict[str, list[str]]:
    """The gold in Search-R1's parquet layout, ``{"target": [answers]}``."""
    return {"target": gold_answers(info)}
