"""Reward functions and datasets for TRL's ``GRPOTrainer`` built from rlvr's environments.

TRL (tested: 1.16.0) calls each reward function as
``reward_func(prompts=..., completions=..., completion_ids=..., **columns)`` where ``columns`` are
the other dataset columns, one list entry per completion, plus trainer extras (``trainer_state``,
``log_metric``, ...), and expects one float per completion. A completion is a string (standard
dataset) or a list of messages (conversational dataset; with tools, the assistant and tool turns).

- ``reward_func(env)`` (also as ``<env>_reward``: ``kk_reward``, ``math_reward``,
  ``searchqa_reward``...): the reward function of a registered environment, reading the
  ``ground_truth`` column and the environment's scoring options (``EnvSpec.options``: K&K's
  ``prefilled_think``, math's ``require_think``); it calls the environment's own pure scorer
  (math together on the verifier pool, with its hard per-item deadline).
- ``trl_rows`` / ``trl_dataset``: our tasks in TRL's prompt format (``prompt`` as chat messages, or
  the rendered string with ``conversational=False``), with ``ground_truth`` and the scoring options
  as columns.
- multi-turn tool use (search QA) goes through ``rlvr.integrations.trl_env``: the env itself as
  TRL's ``environment_factory``, its tools from the env registry.
"""

from __future__ import annotations

from typing import Any, Callable, Optional, Sequence

from rlvr.envs import env_spec, reset_tasks
from rlvr.integrations.extras import require_extra
from rlvr.models.prompt_formats import export_settings


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


def _reward(env: str) -> Callable[..., list[float]]:
    spec = env_spec(env)

    def reward(prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any) -> list[float]:
        n = len(completions)
        gts = _ground_truths(kwargs, n)
        columns = {k: _column(kwargs, k, n, None) for k in spec.options if k in kwargs}
        options = [spec.read_options({k: v[i] for k, v in columns.items()}) for i in range(n)]
        texts = [completion_text(c) for c in completions]
        return [float(s.reward) for s in spec.score_all(texts, gts, options)]

    reward.__name__ = reward.__qualname__ = f"{env}_reward"
    reward.__doc__ = (
        f"TRL reward of {env}: its scorer on each completion's assistant text against the "
        f"``ground_truth`` column (options read from columns: {sorted(spec.options) or 'none'})."
    )
    return reward


_REWARD_FUNCS: dict[str, Callable[..., list[float]]] = {}


def reward_func(env: str) -> Callable[..., list[float]]:
    """The TRL reward function of a registered env (one function per env, cached)."""
    if env not in _REWARD_FUNCS:
        _REWARD_FUNCS[env] = _reward(env)
    return _REWARD_FUNCS[env]


def __getattr__(name: str):
    """``kk_reward``, ``math_reward``...: ``reward_func`` of the env the name starts with."""
    if name.endswith("_reward"):
        try:
            return reward_func(name.removesuffix("_reward"))
        except ValueError:
            pass
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def trl_rows(
    env: str,
    n: int,
    *,
    split: str = "train",
    seed: int = 0,
    start: int = 0,
    env_kwargs: Optional[dict] = None,
    conversational: bool = True,
    model: Optional[str] = None,
) -> list[dict]:
    """Rows for a TRL prompt-only dataset: ``prompt`` plus ``ground_truth`` and scoring columns.

    ``conversational=True``: ``prompt`` is the chat messages (TRL applies the model's chat
    template); K&K rows then get ``prefilled_think=False``. ``conversational=False``: ``prompt`` is
    the environment's rendered prompt string (``template`` env argument, e.g. ``"qwen"``), and
    ``prefilled_think`` says whether it ends with ``<think>``. ``model``: the env settings start
    from the prompt format that model carries (``rlvr.models.prompt_formats``).
    """
    spec = env_spec(env)
    kwargs = export_settings(model, env, env_kwargs or {}, chat=conversational)
    kwargs.setdefault("split", split)
    return [
        {
            "prompt": [{"role": m["role"], "content": m["content"]} for m in info["messages"]]
            if conversational
            else prompt,
            "ground_truth": spec.export_gold(info),
            "data_source": f"rlvr/{env}",
            "index": i,
            **spec.export_options(kwargs, None if conversational else prompt),
        }
        for i, prompt, info in reset_tasks(env, range(start, start + n), seed=seed, **kwargs)
    ]


def trl_dataset(env: str, n: int, **kwargs: Any):
    """``datasets.Dataset`` of ``trl_rows(env, n, **kwargs)`` (needs the ``datasets`` package, in
    the ``trl`` extra; without it ``MissingExtra``, one line)."""
    try:
        from datasets import Dataset
    except ImportError as e:
        require_extra(e, "trl", "trl_dataset")

    return Dataset.from_list(trl_rows(env, n, **kwargs))
