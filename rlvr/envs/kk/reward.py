"""The Knights & Knaves reward of Logic-RL (Xie et al. 2025, arXiv 2502.14768,
``kk.compute_score``).

Rules (docs/design.md §4)::

    format  +1  exactly one each of <think>, </think>, <answer>, </answer>, in that order
                (a prefilled <think> in the prompt counts), else -1
    answer  +2  every role right; -1.5 parsed but wrong; -2 unparseable, or the format failed
    reward = format + answer, in [-3, 3]

The answer is the last ``<answer>...</answer>`` (non-overlapping, leftmost-shortest matches, as
``re.finditer(r"<answer>(.*?)</answer>")`` would find them); it parses when the number of
"knight"/"knave" substrings equals the number of people and every name matches
``\\bName\\b\\s+is\\s+a\\s+(knight|knave)`` (case-insensitive). Format and answer failures are
reported separately (Logic-RL's own format-error metric counted the wrong value).
"""

from __future__ import annotations

import re
from typing import Any, Mapping

from rlvr.envs.base import Score, coerce_text

THINK_OPEN, THINK_CLOSE, ANSWER_OPEN, ANSWER_CLOSE = "<think>", "</think>", "<answer>", "</answer>"
FORMAT_REWARD = 1.0
ANSWER_CORRECT, ANSWER_WRONG, ANSWER_UNPARSEABLE = 2.0, -1.5, -2.0
ROLES = ("knight", "knave")

_GT_LINE = re.compile(r"\b([A-Za-z]+)\b.*?\b(knight|knave)\b", re.IGNORECASE)


def parse_solution_text_format(text: str) -> dict[str, str]:
    """Logic-RL's gold layout ``(1) Zoey is a knight\\n...`` -> {name: role}, one line per
    person."""
    out: dict[str, str] = {}
    for line in text.split("\n"):
        m = _GT_LINE.search(line.strip())
        if m:
            out[m.group(1)] = m.group(2).lower()
    return out


def normalize_ground_truth(ground_truth: Any) -> dict[str, str]:
    """Accept {name: "knight"/"knave" or bool}, Logic-RL's {"solution_text_format": ...} or that
    text."""
    if isinstance(ground_truth, str):
        gt = parse_solution_text_format(ground_truth)
    elif isinstance(ground_truth, Mapping) and "solution_text_format" in ground_truth:
        gt = parse_solution_text_format(str(ground_truth["solution_text_format"]))
    elif isinstance(ground_truth, Mapping):
        gt = {}
        for name, role in ground_truth.items():
            if isinstance(role, bool):
                role = "knight" if role else "knave"
            role = str(role).strip().lower()
            if role not in ROLES:
                raise ValueError(f"role of {name!r} must be 'knight' or 'knave', got {role!r}")
            gt[str(name)] = role
    else:
        raise TypeError(f"ground_truth must be a dict or str, got {type(ground_truth).__name__}")
    if not gt:
        raise ValueError("ground_truth names no person")
    return gt


def check_format(text: str) -> tuple[bool, str]:
    """Logic-RL ``validate_response_structure``: each tag exactly once and in order."""
    tags = (THINK_OPEN, THINK_CLOSE, ANSWER_OPEN, ANSWER_CLOSE)
    problems = [f"{t} x{c}" for t in tags if (c := text.count(t)) != 1]
    if problems:
        return False, "tag counts " + ", ".join(problems) + " (each must appear exactly once)"
    positions = [text.find(t) for t in tags]
    if positions != sorted(positions):
        return False, "tags out of order (need <think> </think> <answer> </answer>)"
    return True, ""


def last_answer(text: str) -> str | None:
    """The stripped content of the last non-overlapping ``<answer>...</answer>``, in linear time."""
    pos, last = 0, None
    while True:
        start = text.find(ANSWER_OPEN, pos)
        if start < 0:
            break
        end = text.find(ANSWER_CLOSE, start + len(ANSWER_OPEN))
        if end < 0:
            break
        last = (start + len(ANSWER_OPEN), end)
        pos = end + len(ANSWER_CLOSE)
    return None if last is None else text[last[0] : last[1]].strip()


def parse_answer(answer_text: str, names: list[str]) -> tuple[dict[str, str] | None, str]:
    """Logic-RL ``parse_model_answer``: (roles by name, "") or (None, why it did not parse)."""
    lowered = answer_text.lower()
    mentions = lowered.count("knight") + lowered.count("knave")
    if mentions != len(names):
        return None, f"{mentions} knight/knave mentions for {len(names)} people"
    out = {}
    for name in names:
        m = re.search(
            rf"\b{re.escape(name)}\b\s+is\s+a\s+\b(knight|knave)\b", answer_text, re.IGNORECASE
        )
        if not m:
            return None, f"no 'is a knight/knave' statement for {name}"
        out[name] = m.group(1).lower()
    return out, ""


def score(
    response: Any, ground_truth: Any, *, prefilled_think: bool = False, answer_prefill: str = ""
) -> Score:
    """Score one response; never raises. ``prefilled_think``: the prompt ended with ``<think>``,
    then ``answer_prefill`` (the env's): both are scored in front of the response."""
    text = coerce_text(answer_prefill) + coerce_text(response)
    processed = THINK_OPEN + text if prefilled_think else text
    format_ok, format_reason = check_format(processed)
    format_score = FORMAT_REWARD if format_ok else -FORMAT_REWARD
    try:
        gt = normalize_ground_truth(ground_truth)
    except Exception as exc:  # noqa: BLE001 - a ground truth whose __str__ raises included
        return Score(
            format_score + ANSWER_UNPARSEABLE,
            False,
            {"format": format_score, "answer": ANSWER_UNPARSEABLE},
            f"invalid ground truth: {coerce_text(exc) or type(exc).__name__}",
        )
    answer_text = last_answer(processed)
    pred, parse_reason = (
        parse_answer(answer_text, list(gt)) if answer_text else (None, "empty or missing <answer>")
    )
    if not format_ok:
        answer_score, reason = ANSWER_UNPARSEABLE, f"format: {format_reason}"
        if pred == gt:
            reason += " (the answer itself was right)"
    elif pred is None:
        answer_score, reason = ANSWER_UNPARSEABLE, f"answer unparseable: {parse_reason}"
    elif pred == gt:
        answer_score, reason = ANSWER_CORRECT, ""
    else:
        wrong = [n for n in gt if pred[n] != gt[n]]
        answer_score, reason = ANSWER_WRONG, "answer wrong for " + ", ".join(wrong)
    return Score(
        reward=format_score + answer_score,
        correct=answer_score == ANSWER_CORRECT,
        components={"format": format_score, "answer": answer_score},
        reason=reason,
        parsed=pred,
    )


def answer_status(result: Score) -> str:
    """``correct`` / ``wrong`` / ``unparseable`` / ``format_failed``: the answer outcome for
    logging."""
    if result.components.get("format", -1.0) < 0:
        return "format_failed"
    return {ANSWER_CORRECT: "correct", ANSWER_WRONG: "wrong"}.get(
        result.components.get("answer"), "unparseable"
    )


def compute_score(
    data_source: str, solution_str: str, ground_truth: Any, extra_info: dict | None = None
) -> dict:
    """verl's reward signature. verl passes the response alone, and Logic-RL's prompts end with
    ``<think>``, so the prefill is counted unless ``extra_info["prefilled_think"]`` is False;
    ``extra_info["answer_prefill"]``: the env's text after it (``row_options``)."""
    info = extra_info or {}
    prefilled = bool(info.get("prefilled_think", True))
    after = str(info.get("answer_prefill") or "")
    result = score(solution_str, ground_truth, prefilled_think=prefilled, answer_prefill=after)
    return {"score": result.reward, "acc": float(result.correct), **result.components}


# -- how exported rows carry a task (rlvr.envs.registry: the K&K spec) ---------------------------
def gold_text(info: Mapping[str, Any]) -> str:
    """A reset ``info``'s gold in Logic-RL's text layout ``(1) Name is a knight`` (one line per
    person), which ``score`` reads back."""
    text = info.get("solution_text_format")
    if text:
        return str(text)
    gt = info["ground_truth"]
    return "\n".join(
        f"({i}) {name} is a {role}" for i, (name, role) in enumerate(gt.items(), start=1)
    )


def row_options(env_kwargs: Mapping[str, Any], prompt: str | None) -> dict[str, Any]:
    """``prefilled_think``: whether the exported prompt ends with ``<think>``, before the env's
    ``answer_prefill`` when it ends with that too (then ``answer_prefill`` is set, so that
    ``rlvr score`` and verl's reward score a row's response as the env did); a chat export,
    ``prompt=None``, is rendered by the consumer's chat template and has neither."""
    if prompt is None:
        return {"prefilled_think": False}
    after = str(env_kwargs.get("answer_prefill") or "")
    out: dict[str, Any] = {}
    if after and prompt.endswith(after):
        prompt = prompt[: -len(after)]
        out["answer_prefill"] = after
    return {"prefilled_think": prompt.rstrip().endswith(THINK_OPEN), **out}
