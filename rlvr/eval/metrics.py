"""Evaluation metrics: accuracy, avg@k, unbiased pass@k, exact match / F1, and grouped summaries.

Pure functions over per-response records, so figures and tables are recomputed from the saved
JSONL without rerunning a model. A record is a mapping with at least ``item`` (the task index),
``mode`` (``"greedy"`` or ``"sample"``) and ``correct``; optional keys are ``group`` (e.g. the
number of K&K people, a math difficulty, QA hops), ``reward``, ``em`` and ``f1``.
"""

from __future__ import annotations

import re
import string
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k of one item with ``c`` correct out of ``n`` samples.

    Chen et al. 2021 ("Evaluating Large Language Models Trained on Code", Eq. 1 and Fig. 3):
    ``1 - C(n - c, k) / C(n, k)``, computed as a running product to stay exact for large n.
    """
    if not (
        isinstance(n, (int, np.integer))
        and isinstance(c, (int, np.integer))
        and isinstance(k, (int, np.integer))
    ):
        raise TypeError(f"pass_at_k: n, c, k must be integers, got n={n!r}, c={c!r}, k={k!r}")
    if k < 1 or k > n:
        raise ValueError(f"pass_at_k: k={k} must satisfy 1 <= k <= n={n}")
    if c < 0 or c > n:
        raise ValueError(f"pass_at_k: c={c} must satisfy 0 <= c <= n={n}")
    if n - c < k:
        return 1.0
    return float(1.0 - np.prod(1.0 - k / np.arange(n - c + 1, n + 1)))


def accuracy(correct: Iterable[bool]) -> float:
    """Share of true values (NaN for an empty input)."""
    arr = np.asarray(list(correct), dtype=float)
    return float(arr.mean()) if arr.size else float("nan")


def avg_at_k(correct_per_item: Sequence[Sequence[bool]]) -> float:
    """avg@k: mean over items of the share of correct samples (each item's k samples)."""
    if not correct_per_item:
        return float("nan")
    return float(np.mean([np.mean(np.asarray(c, dtype=float)) for c in correct_per_item]))


def mean_pass_at_k(correct_per_item: Sequence[Sequence[bool]], k: int) -> float:
    """Mean over items of the unbiased pass@k (each item's samples must number at least k)."""
    if not correct_per_item:
        return float("nan")
    return float(np.mean([pass_at_k(len(c), int(sum(map(bool, c))), k) for c in correct_per_item]))


# -- QA exact match and F1 (SQuAD v1.1 evaluation script conventions) -------------------------
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = set(string.punctuation)


def normalize_answer(text: Any) -> str:
    """SQuAD normalisation: lowercase, drop punctuation and articles, fold whitespace."""
    s = "" if text is None else str(text)
    s = s.lower()
    s = "".join(ch for ch in s if ch not in _PUNCT)
    s = _ARTICLES.sub(" ", s)
    return " ".join(s.split())


def gold_answers(ground_truth: Any) -> list[str]:
    """The gold answer strings of a QA ground truth (a string, a list, or a dict holding one)."""
    if ground_truth is None:
        return []
    if isinstance(ground_truth, str):
        return [ground_truth]
    if isinstance(ground_truth, Mapping):
        for key in ("target", "answers", "golden_answers", "answer", "aliases"):
            if key in ground_truth:
                return gold_answers(ground_truth[key])
        return []
    if isinstance(ground_truth, (list, tuple, np.ndarray)):
        return [str(g) for g in ground_truth if g is not None]
    return [str(ground_truth)]


def exact_match(prediction: Any, golds: Sequence[str]) -> float:
    """1.0 when the normalised prediction equals any normalised gold answer."""
    if prediction is None:
        return 0.0
    p = normalize_answer(prediction)
    return float(any(p == normalize_answer(g) for g in golds))


def f1_score(prediction: Any, golds: Sequence[str]) -> float:
    """Best token-level F1 over gold answers (SQuAD v1.1 ``f1_score``)."""
    if prediction is None or not golds:
        return 0.0
    pred_tokens = normalize_answer(prediction).split()
    best = 0.0
    for g in golds:
        gold_tokens = normalize_answer(g).split()
        common = Counter(pred_tokens) & Counter(gold_tokens)
        overlap = sum(common.values())
        if overlap == 0:
            continue
        precision = overlap / len(pred_tokens)
        recall = overlap / len(gold_tokens)
        best = max(best, 2 * precision * recall / (precision + recall))
    return best


#: Answer metrics an environment may declare (``EnvSpec.answer_metrics``):
#: ``name -> fn(parsed answer, ground truth) -> float``.
ANSWER_METRICS = {
    "em": lambda parsed, ground_truth: exact_match(parsed, gold_answers(ground_truth)),
    "f1": lambda parsed, ground_truth: f1_score(parsed, gold_answers(ground_truth)),
}


# -- Summaries over records --------------------------------------------------------------------
def correct_by_item(
    records: Iterable[Mapping[str, Any]], mode: str, key: str = "correct"
) -> dict[Any, list[float]]:
    """``item -> [value of key for each response of that item in this mode]`` (insertion order)."""
    out: dict[Any, list[float]] = defaultdict(list)
    for r in records:
        if r.get("mode") == mode:
            out[r["item"]].append(float(r.get(key, 0.0) or 0.0))
    return dict(out)


def summarize(records: Sequence[Mapping[str, Any]], ks: Sequence[int] = (1,)) -> dict[str, float]:
    """Metrics of one evaluation: greedy accuracy, avg@n and pass@k of the samples, EM/F1 and
    reward.

    Returns flat keys: ``n_items``, ``greedy`` (accuracy of the greedy response), ``avg@n`` (n =
    samples per item; also under ``avg@k``), ``pass@k`` for each k in ``ks`` not above n,
    ``greedy_em``/``greedy_f1`` and ``sample_em``/``sample_f1`` when records carry them,
    ``greedy_tool_use``/``sample_tool_use`` (share of episodes with at least one tool call) when
    records carry ``tool_calls``, and the mean ``reward`` of each mode.
    """
    out: dict[str, float] = {}
    greedy = correct_by_item(records, "greedy")
    sample = correct_by_item(records, "sample")
    items = set(greedy) | set(sample)
    out["n_items"] = float(len(items))
    if greedy:
        out["greedy"] = avg_at_k(list(greedy.values()))
    if sample:
        per_item = list(sample.values())
        n = min(len(v) for v in per_item)
        out["n_samples"] = float(n)
        out["avg@k"] = avg_at_k(per_item)
        out[f"avg@{n}"] = out["avg@k"]
        for k in ks:
            if 1 <= k <= n:
                out[f"pass@{k}"] = mean_pass_at_k(per_item, k)
    for mode, prefix in (("greedy", "greedy"), ("sample", "sample")):
        mode_records = [r for r in records if r.get("mode") == mode]
        if not mode_records:
            continue
        for key in ANSWER_METRICS:
            if any(key in r for r in mode_records):
                out[f"{prefix}_{key}"] = float(
                    np.mean([float(r.get(key, 0.0)) for r in mode_records])
                )
        if any("tool_calls" in r for r in mode_records):
            out[f"{prefix}_tool_use"] = float(
                np.mean([int(r.get("tool_calls", 0)) > 0 for r in mode_records])
            )
        if any("reward" in r for r in mode_records):
            out[f"{prefix}_reward"] = float(
                np.mean([float(r.get("reward", 0.0)) for r in mode_records])
            )
    return out


def summarize_by_group(
    records: Sequence[Mapping[str, Any]], ks: Sequence[int] = (1,), group_key: str = "group"
) -> dict[Any, dict[str, float]]:
    """``summarize`` per value of ``group_key`` (e.g. K&K accuracy by number of people), plus
    ``"all"``."""
    groups: dict[Any, list[Mapping[str, Any]]] = defaultdict(list)
    for r in records:
        groups[r.get(group_key)].append(r)
    out = {g: summarize(rs, ks) for g, rs in sorted(groups.items(), key=lambda kv: str(kv[0]))}
    out["all"] = summarize(records, ks)
    return out


__all__ = [
    "ANSWER_METRICS",
    "accuracy",
    "avg_at_k",
    "correct_by_item",
    "exact_match",
    "f1_score",
    "gold_answers",
    "mean_pass_at_k",
    "normalize_answer",
    "pass_at_k",
    "summarize",
    "summarize_by_group",
]
