"""SQuAD answer normalisation, exact match and token F1.

The normalisation is the one of the SQuAD v1.1 evaluation script, which Search-R1's ``qa_em.py``,
FlashRAG and DPR all reuse: lowercase, drop ASCII punctuation, drop the articles a/an/the, fold
whitespace (applied in the order lower -> punctuation -> articles -> whitespace).
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Iterable

from rlvr.envs.base import coerce_text

_PUNCT = str.maketrans("", "", string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")


def normalize_answer(text: str) -> str:
    """SQuAD normalisation: ``"The  Eiffel-Tower!"`` -> ``"eiffeltower"``."""
    text = text.lower().translate(_PUNCT)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def as_gold_list(golds) -> list[str]:
    """Gold answers as a list of strings: accepts a string, an iterable of strings, or a
    Search-R1/verl ground-truth dict ``{"target": [...]}``; other items go through ``str``."""
    if golds is None:
        return []
    try:
        if isinstance(golds, dict):
            golds = golds.get("target", golds.get("golden_answers", golds.get("answer", [])))
        if isinstance(golds, (str, bytes)):
            golds = [golds]
        return [coerce_text(g) for g in (golds if isinstance(golds, Iterable) else [golds])]
    except Exception:  # noqa: BLE001 - an iterable that raises midway: no usable gold answers
        return []


def exact_match(prediction: str, golds) -> bool:
    """True when the normalised prediction equals any normalised gold answer."""
    pred = normalize_answer(prediction)
    return any(pred == normalize_answer(g) for g in as_gold_list(golds))


def token_f1(prediction: str, gold: str) -> float:
    """SQuAD token-level F1 between one prediction and one gold answer."""
    pred_tokens = normalize_answer(prediction).split()
    gold_tokens = normalize_answer(gold).split()
    if not pred_tokens or not gold_tokens:
        return float(pred_tokens == gold_tokens)
    common = Counter(pred_tokens) & Counter(gold_tokens)
    overlap = sum(common.values())
    if overlap == 0:
        return 0.0
    precision = overlap / len(pred_tokens)
    recall = overlap / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def max_f1(prediction: str, golds) -> float:
    """Best token F1 of the prediction over the gold answers (0 when there are none)."""
    return max((token_f1(prediction, g) for g in as_gold_list(golds)), default=0.0)
