"""Every env's ``score`` is documented never to raise: not even on objects whose ``__str__``
raises, str subclasses that override it, or ground truths that cannot be iterated."""

from __future__ import annotations

import pytest

from rlvr.envs.base import coerce_text
from rlvr.envs.kk.reward import score as kk_score
from rlvr.envs.math.reward import score as math_score
from rlvr.envs.searchqa.reward import score as qa_score


class BadStr:
    def __str__(self):
        raise RuntimeError("no text for you")


class BadSubclass(str):
    def __str__(self):
        raise RuntimeError("subclass")


class BadIter:
    def __iter__(self):
        raise RuntimeError("iteration")


class NotText:
    def __str__(self):
        return 42  # str() raises TypeError


WEIRD = [BadStr(), BadSubclass("<answer>Lyon</answer>"), NotText(), BadIter()]


def test_coerce_text_never_raises():
    assert [coerce_text(w) for w in WEIRD[:3]] == ["", "<answer>Lyon</answer>", ""]


@pytest.mark.parametrize("weird", WEIRD, ids=lambda w: type(w).__name__)
def test_scores_never_raise(weird):
    assert kk_score(weird, {"Zoey": "knight"}).reward == -3.0
    assert kk_score("<think>x</think><answer>(1) Zoey is a knight</answer>", weird).reward < 0
    assert kk_score("x", {"Zoey": weird}).correct is False
    assert qa_score(weird, ["Lyon"]).reward == (1.0 if isinstance(weird, str) else 0.0)
    assert qa_score("<answer>Lyon</answer>", weird).reward == 0.0
    assert qa_score("<answer>Lyon</answer>", [weird, "Lyon"]).reward == 1.0
    assert math_score(weird, "1", timeout_s=5).reward == 0.0
    assert math_score(r"\boxed{1}", weird, timeout_s=5).reward == 0.0
