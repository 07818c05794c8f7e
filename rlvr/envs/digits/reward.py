"""The digits env's reward: ``format`` (the share of the response's characters that are ASCII
digits) + ``answer`` (1 for exactly the sum), in [0, 2] (the package docstring)."""

from __future__ import annotations

from typing import Any

from rlvr.envs.base import Score, coerce_text


def score(response: Any, ground_truth: Any) -> Score:
    """``format`` (share of digit characters) + ``answer`` (1 for exactly the sum); never
    raises."""
    text = coerce_text(response)
    share = sum(c in "0123456789" for c in text) / len(text) if text else 0.0
    parsed = text.strip()
    correct = parsed == str(ground_truth).strip()
    answer = 1.0 if correct else 0.0
    if correct:
        reason = ""
    elif not parsed:
        reason = "empty response"
    elif parsed.isdigit():
        reason = "wrong sum"
    else:
        reason = "not a number alone"
    return Score(share + answer, correct, {"format": share, "answer": answer}, reason, parsed)
