"""Reward functions and datasets for TRL's ``GRPOTrainer`` built from rlvr's environments.

TRL (tested: 1.16.0) calls each reward function as
``reward_func(prompts=..., completions=..., completion_ids=..., **columns)`` where ``columns`` are
the other dataset columns, one list entry per completion, plus trainer extras (``trainer_state``,
``log_metric``, ...), and expects one float per completion. A completion is a string (standard
dataset) or a list of messages (conversational dataset; with tools, the assistant and tool turns).

- ``kk_reward``, ``math_reward``, ``searchqa_reward``: ready-made reward functions reading the
  ``ground_truth`` column (``REWARD_FUNCS`` by environment name); each calls the environment's own
  pure scorer (math on the verifier pool with its hard per-item deadline).
- ``trl_rows`` / ``trl_dataset``: our tasks in TRL's prompt format (``prompt`` as chat messages, or
  the rendered string with ``conversational=False``), with ``ground_truth`` and the scoring options
  as columns.
- ``SearchToolEnvironment``: the search environment for ``GRPOTrainer(environment_factory=...)``
  (TRL's multi-turn tool interface): its ``search`` method is the tool; the reward stays
  ``searchqa_reward`` on the assistant's text. TRL drives tools through the chat template's
  tool-call format (e.g. Qwen2.5's ``<tool_call>`` JSON), not Search-R1's ``<search>`` tags.
"""

from __future__ import annotations

from typing import Any, Callable, Optional, Sequence

from rlvr.integrations.verl_data import encode_ground_truth

ENVS = ("kk", "math", "searchqa")


def completion_text(completion: Any) -> str:
    """The policy's own text of one completion: a string as is; for messages, the assistant turns
    joined (tool turns are what the tool wrote, never scored)."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, dict):
        completion = [completion]
    parts = []
    for message in completion or []:
        if isinstance(message, dict) and message.get("role", "assistant") == "assistant":
            content = message.get("content") or ""
            if isinstance(content, list):  # multimodal-style [{"type": "text", "text": ...}]
                content = "".join(c.get("text", "") for c in content if isinstance(c, dict))
            parts.append(str(content))
    return "\n".join(parts)


def _column(kwargs: dict, name: str, n: int, default: Any) -> list:
    values = kwargs.get(name)
    if values is None:
        return [default] * n
    values = list(values)
    if len(values) != n:
        raise ValueError(f"{name}: {len(values)} values for {n} completions")
    return values


def _ground_truths(kwargs: dict, n: int) -> list:
    if kwargs.get("ground_truth") is None:
        raise ValueError("ground_truth: the dataset needs a 'ground_truth' column (see trl_rows)")
    return _column(kwargs, "ground_truth", n, None)


def kk_reward(prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any) -> list[float]:
    """K&K reward in [-3, 3] (Logic-RL format + answer); column ``prefilled_think`` (default
    False: a conversational prompt is not prefilled with ``<think>``)."""
    from rlvr.envs.kk import score

    n = len(completions)
    gts = _ground_truths(kwargs, n)
    prefilled = _column(kwargs, "prefilled_think", n, False)
    return [
        float(score(completion_text(c), gt, prefilled_think=bool(p)).reward)
        for c, gt, p in zip(completions, gts, prefilled)
    ]


def math_reward(prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any) -> list[float]:
    """Math reward 1/0: last ``\\boxed{}`` verified by math-verify on the worker pool, each item
    under the environment's hard deadline; column ``require_think`` (default False)."""
    from rlvr.envs.math import score_batch

    n = len(completions)
    gts = _ground_truths(kwargs, n)
    require = _column(kwargs, "require_think", n, False)
    texts = [completion_text(c) for c in completions]
    out: list[float] = [0.0] * n
    for flag in (False, True):
        idx = [i for i in range(n) if bool(require[i]) is flag]
        if idx:
            scores = score_batch([texts[i] for i in idx], [gts[i] for i in idx], require_think=flag)
            for i, s in zip(idx, scores):
                out[i] = float(s.reward)
    return out


def searchqa_reward(
    prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any
) -> list[float]:
    """Search QA exact match 1/0 of the last ``<answer>`` in the assistant's text against any
    gold answer (``ground_truth``: a list of answers or ``{"target": [...]}``)."""
    from rlvr.envs.searchqa.reward import score

    n = len(completions)
    gts = _ground_truths(kwargs, n)
    return [float(score(completion_text(c), gt).reward) for c, gt in zip(completions, gts)]


REWARD_FUNCS: dict[str, Callable[..., list[float]]] = {
    "kk": kk_reward,
    "math": math_reward,
    "searchqa": searchqa_reward,
}


def reward_func(env: str) -> Callable[..., list[float]]:
    """The TRL reward function of ``env`` (``kk``, ``math``, ``searchqa``)."""
    if env not in REWARD_FUNCS:
        raise ValueError(f"env: {env!r} is not one of {sorted(REWARD_FUNCS)}")
    return REWARD_FUNCS[env]


def trl_rows(
    env: str,
    n: int,
    *,
    split: str = "train",
    seed: int = 0,
    start: int = 0,
    env_kwargs: Optional[dict] = None,
    conversational: bool = True,
) -> list[dict]:
    """Rows for a TRL prompt-only dataset: ``prompt`` plus ``ground_truth`` and scoring columns.

    ``conversational=True``: ``prompt`` is the chat messages (TRL applies the model's chat
    template); K&K rows then get ``prefilled_think=False``. ``conversational=False``: ``prompt`` is
    the environment's rendered prompt string (``template`` env argument, e.g. ``"qwen"``), and
    ``prefilled_think`` says whether it ends with ``<think>``.
    """
    import gymnasium as gym

    import rlvr  # noqa: F401  (registers the gymnasium ids)
    from rlvr.envs import env_id

    if env not in ENVS:
        raise ValueError(f"env: {env!r} is not one of {list(ENVS)}")
    kwargs = dict(env_kwargs or {})
    kwargs.setdefault("split", split)
    handle = gym.make(env_id(env), **kwargs)
    rows = []
    try:
        for i in range(start, start + n):
            prompt, info = handle.reset(seed=seed, options={"index": i})
            gt = encode_ground_truth(env, info)
            row: dict[str, Any] = {
                "prompt": [{"role": m["role"], "content": m["content"]} for m in info["messages"]]
                if conversational
                else prompt,
                "ground_truth": gt["target"] if env == "searchqa" else gt,
                "data_source": f"rlvr/{env}",
                "index": i,
            }
            if env == "kk":
                row["prefilled_think"] = (not conversational) and prompt.rstrip().endswith(
                    "<think>"
                )
            elif env == "math":
                row["require_think"] = bool(kwargs.get("require_think", False))
            rows.append(row)
    finally:
        handle.close()
    return rows


def trl_dataset(env: str, n: int, **kwargs: Any):
    """``datasets.Dataset`` of ``trl_rows(env, n, **kwargs)`` (needs the ``datasets`` package)."""
    from datasets import Dataset

    return Dataset.from_list(trl_rows(env, n, **kwargs))


class SearchToolEnvironment:
    """Search QA for ``GRPOTrainer(environment_factory=...)``: one instance per rollout.

    TRL exposes every public method except ``reset`` as a tool (name, type hints and docstring
    become the tool schema) and calls ``reset(**example)`` before each rollout. ``retriever`` is
    any object with rlvr's ``SearchIndex.search(queries, k) -> [[Hit]]`` API; ``max_calls``
    bounds the searches per rollout (Search-R1's max turns). The reward is ``searchqa_reward``.
    """

    def __init__(self, retriever: Any, *, top_k: int = 3, max_calls: int = 4):
        if top_k < 1:
            raise ValueError(f"top_k: must be >= 1, got {top_k}")
        if max_calls < 1:
            raise ValueError(f"max_calls: must be >= 1, got {max_calls}")
        self._retriever = retriever
        self._top_k = top_k
        self._max_calls = max_calls
        self._calls = 0

    def reset(self, **example: Any) -> None:
        self._calls = 0
        return None

    def search(self, query: str) -> str:
        """Search the knowledge base (Wikipedia passages) for a query.

        Args:
            query: What to look up, as a short search-engine query.

        Returns:
            The best matching passages, one per line as 'Doc i(Title: "title") text'.
        """
        if self._calls >= self._max_calls:
            return f"Search limit reached ({self._max_calls} searches); answer with what you have."
        self._calls += 1
        query = str(query)[:1000]
        if not query.strip():
            return "Empty query: write what to search for."
        from rlvr.envs.searchqa.env import format_passages  # the env's own rendering

        hits = self._retriever.search([query], k=self._top_k)[0]
        return format_passages(hits) or "No results."


def search_environment_factory(
    retriever: Any, **kwargs: Any
) -> Callable[[], SearchToolEnvironment]:
    """``environment_factory`` for TRL: a zero-argument callable making ``SearchToolEnvironment``s
    that share one (read-only) ``retriever``."""

    def factory() -> SearchToolEnvironment:
        return SearchToolEnvironment(retriever, **kwargs)

    return factory
