"""Reward functions of a custom task: TRL's signature, named as ``"module:attr"``.

A reward function is what TRL's ``GRPOTrainer`` takes in ``reward_funcs`` (trl 1.16.0,
``trl/trainer/grpo_trainer.py``, ``GRPOTrainer._calculate_rewards``): it is called as
``f(prompts=[...], completions=[...], completion_ids=[...], **columns)``, where ``columns`` are
the dataset's other columns, one list entry per completion, and returns one float per completion
(``None``: no opinion on that one). Completions are strings for a dataset whose prompts are
strings and ``[{"role": "assistant", "content": ...}]`` for one whose prompts are chat messages.
Several functions are combined as TRL combines them: ``sum(weight_i * reward_i)`` over the
functions that gave a number (``reward_weights``, default 1 each).

Here every function is called the same way, except that ``completion_ids`` is not passed (the
pure scorer works on text: a function that needs token ids is refused when the env is made).
The ground truth of a custom task is its dataset row (``prompt`` and every other column), so the
scorer needs nothing but the row and the function names: rows, exports and scored files stay
plain data (picklable, JSON). A function that raises scores ``None`` for that batch, with the
reason in the ``Score`` (``score`` never raises).
"""

from __future__ import annotations

import importlib
import inspect
import json
import math
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from rlvr.config import did_you_mean
from rlvr.envs.base import Score, coerce_text


# -- the names ---------------------------------------------------------------------------------
def parse_refs(value: Any) -> tuple[str, ...]:
    """``reward=`` as a tuple of ``"module:attr"`` names (one name or a list of them; a JSON list
    as text, as a parquet column may hold it)."""
    if isinstance(value, str) and value.strip().startswith("["):
        value = json.loads(value)
    refs = (value,) if isinstance(value, str) else tuple(value or ())
    if not refs:
        raise ValueError("reward: name at least one reward function as module:function")
    for ref in refs:
        module, sep, attr = str(ref).partition(":")
        if not (sep and module and attr):
            raise ValueError(f"reward: {ref!r} is not module:function (e.g. my_lab.rewards:f)")
    return tuple(str(r) for r in refs)


def parse_weights(value: Any, n: int | None = None) -> tuple[float, ...]:
    """``reward_weights=`` as finite floats (a JSON list as text too); ``n`` checks the count."""
    if isinstance(value, str):
        value = json.loads(value) if value.strip().startswith("[") else [value]
    weights = tuple(float(w) for w in (value or ()))
    if any(not math.isfinite(w) for w in weights):
        raise ValueError(f"reward_weights: {list(weights)} must be finite numbers")
    if n is not None and weights and len(weights) != n:
        raise ValueError(f"reward_weights: {len(weights)} weight(s) for {n} reward function(s)")
    return weights


def load_reward(ref: str) -> Callable[..., Any]:
    """The callable ``"module:attr"`` names (``ValueError``, one line, when it cannot)."""
    module_name, _, attr = ref.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise ValueError(
            f"reward: cannot import {module_name!r} ({e}); run from the folder that holds it or "
            "put it on PYTHONPATH"
        ) from None
    func = getattr(module, attr, None)
    if func is None:
        names = [n for n, v in vars(module).items() if callable(v) and not n.startswith("_")]
        raise ValueError(f"reward: {module_name} has no {attr!r}{did_you_mean(attr, names)}")
    if not callable(func):
        raise ValueError(f"reward: {ref} is not callable")
    return func


def check_callable(ref: str, columns: Sequence[str]) -> None:
    """``ValueError`` when ``ref`` cannot be called as TRL calls it on rows with ``columns``
    (a required argument no column fills: a typo in a column name, or ``completion_ids``)."""
    func = load_reward(ref)
    try:
        sig = inspect.signature(func)
    except (TypeError, ValueError):
        return  # a builtin or C callable: nothing to read, it is tried on the first batch
    try:
        sig.bind(prompts=[], completions=[], **{c: [] for c in columns if c != "prompt"})
    except TypeError as e:
        raise ValueError(
            f"reward: {ref} cannot be called with prompts, completions and the dataset's columns "
            f"{sorted(c for c in columns if c != 'prompt')} ({e})"
        ) from None


# -- scoring -----------------------------------------------------------------------------------
def row_of(ground_truth: Any) -> dict[str, Any]:
    """A custom task's ground truth (its dataset row) from a mapping or its JSON text."""
    if isinstance(ground_truth, str):
        ground_truth = json.loads(ground_truth)
    if not isinstance(ground_truth, Mapping):
        raise TypeError(f"ground_truth must be the task's row, got {type(ground_truth).__name__}")
    return dict(ground_truth)


def _names(refs: Sequence[str]) -> list[str]:
    """Component names: each function's own name, numbered when two share one."""
    base = [r.rpartition(":")[2] for r in refs]
    return [b if base.count(b) == 1 else f"{b}_{i}" for i, b in enumerate(base)]


def score_batch(
    responses: Sequence[Any],
    ground_truths: Sequence[Any],
    *,
    reward: Any = (),
    reward_weights: Any = (),
    correct_at: float | None = None,
    prefill: str = "",
) -> list[Score]:
    """One ``Score`` per response: every reward function called once on the batch (module
    docstring), the weighted sum as the reward and each function's value as a component. A
    response is correct when its reward reaches ``correct_at`` (default: the sum of the positive
    weights, i.e. every 0/1 function gave 1). A ground truth that is no row scores 0 with the
    reason; the names and weights are checked (``ValueError``) when given, and needed only
    once there is a row to score.
    Never raises on what the policy wrote."""
    if reward:  # names given are checked at once, rows or not (``rlvr score``'s own arguments)
        parse_weights(reward_weights, len(parse_refs(reward)))
    scores: list[Score | None] = [None] * len(responses)
    rows: dict[int, dict[str, Any]] = {}
    for i, gt in enumerate(ground_truths):
        try:
            rows[i] = row_of(gt)
        except (TypeError, ValueError) as e:
            scores[i] = Score(0.0, False, {}, f"invalid ground truth: {e}")
    if not rows:
        return scores  # type: ignore[return-value]
    refs = parse_refs(reward)
    weights = parse_weights(reward_weights, len(refs)) or (1.0,) * len(refs)
    threshold = sum(w for w in weights if w > 0) if correct_at is None else float(correct_at)
    idx = list(rows)
    prompts = [rows[i].get("prompt", "") for i in idx]
    completions = [
        _completion(p, str(prefill) + coerce_text(responses[i])) for p, i in zip(prompts, idx)
    ]
    columns = sorted({k for r in rows.values() for k in r if k != "prompt"})
    kwargs = {c: [rows[i].get(c) for i in idx] for c in columns}
    values, errors = [], []
    for ref in refs:
        try:
            out = list(load_reward(ref)(prompts=prompts, completions=completions, **kwargs))
            if len(out) != len(idx):
                raise ValueError(f"returned {len(out)} values for {len(idx)} completions")
            values.append([None if v is None else float(v) for v in out])
        except Exception as e:  # noqa: BLE001 - a user's function may raise anything
            line = f"reward {ref} raised {type(e).__name__}: {str(e)[:200]}"
            warnings.warn(line, RuntimeWarning, stacklevel=2)
            values.append([None] * len(idx))
            errors.append(line)
    names = _names(refs)
    for j, i in enumerate(idx):
        parts = {name: v[j] for name, v in zip(names, values) if v[j] is not None and v[j] == v[j]}
        total = sum(w * v[j] for w, v in zip(weights, values) if v[j] is not None and v[j] == v[j])
        correct = not errors and total >= threshold
        reason = "; ".join(errors) or ("" if correct else f"reward {total:g} < {threshold:g}")
        scores[i] = Score(float(total), correct, parts, reason, completions[j])
    return scores  # type: ignore[return-value]


def _completion(prompt: Any, text: str) -> Any:
    """A completion as TRL hands it over: text, or one assistant message for a chat prompt."""
    return [{"role": "assistant", "content": text}] if isinstance(prompt, list) else text


def score(response: Any, ground_truth: Any, **options: Any) -> Score:
    """``score_batch`` of one response (the options: ``reward``, ``reward_weights``,
    ``correct_at``, ``prefill``)."""
    return score_batch([response], [ground_truth], **options)[0]


# -- how exported rows carry a task (rlvr.envs: the custom spec) --------------------------------
def row_options(env_kwargs: Mapping[str, Any], prompt: str | None) -> dict[str, Any]:
    """The scoring options a custom task's exported row carries: its reward functions, their
    weights and threshold, and the assistant prefill when the exported prompt ends with it."""
    refs = parse_refs(env_kwargs.get("reward"))
    out: dict[str, Any] = {"reward": list(refs)}
    weights = parse_weights(env_kwargs.get("reward_weights"), len(refs))
    if weights:
        out["reward_weights"] = list(weights)
    if env_kwargs.get("correct_at") is not None:
        out["correct_at"] = float(env_kwargs["correct_at"])
    prefill = str(env_kwargs.get("prefill") or "")
    if prefill and prompt is not None and prompt.endswith(prefill):
        out["prefill"] = prefill
    return out


def gold_json(info: Mapping[str, Any]) -> str:
    """The row as JSON text: verl's parquet ``reward_model.ground_truth`` (one type for every
    row, whatever columns a dataset has)."""
    return json.dumps(row_of(info["ground_truth"]), sort_keys=True)


def exact_match(completions: Sequence[Any], answer: Sequence[Any], **kwargs: Any) -> list[float]:
    """A ready-made reward: 1.0 when the completion's text, stripped, equals the ``answer``
    column, else 0.0 (TRL's signature; the first ``reward=`` to try on a new dataset)."""
    texts = [c if isinstance(c, str) else (c[-1].get("content") or "") for c in completions]
    return [float(t.strip() == str(a).strip()) for t, a in zip(texts, answer)]


__all__ = [
    "check_callable",
    "exact_match",
    "gold_json",
    "load_reward",
    "parse_refs",
    "parse_weights",
    "row_of",
    "row_options",
    "score",
    "score_batch",
]
