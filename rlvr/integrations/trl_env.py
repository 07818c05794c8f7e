"""rlvr's environments as TRL environments: ``GRPOTrainer(environment_factory=...)``.

TRL 1.16.0 (``trl/trainer/grpo_trainer.py``, ``GRPOTrainer.__init__`` and
``_generate_and_score_completions``) creates one environment instance per rollout from the
factory (pooled and reused), calls ``reset(**example)`` with the dataset row before generation,
and exposes every public method of the class other than ``reset`` and ``get_reward`` as a tool:
its name, type hints and Google-style docstring become the tool schema
(``transformers.utils.get_json_schema``), and a call is ``method(**arguments)`` parsed from the
chat template's tool-call format. Reward functions receive the per-rollout instances as the
``environments`` keyword (``GRPOTrainer._calculate_rewards``).

- ``environment_class(env)``: the TRL environment class of a registered env, built from the
  registry: ``reset`` and one method per tool of its ``EnvSpec`` (search QA: ``search``,
  backed by the env's retriever: an in-process index or a ``rlvr retrieval-serve`` URL through
  the env's ``retriever=`` argument). Single-turn envs (K&K, math) get ``reset`` alone.
- ``environment_factory(env, **env_kwargs)``: the zero-argument factory TRL takes.
- ``episode_reward``: the reward function. TRL calls ``get_reward()`` without arguments, but the
  policy's final answer is plain assistant text that never reaches the environment through a
  tool, so the reward is a reward function instead: it ends each rollout's episode with the
  final assistant message and returns the Gymnasium env's reward (our scorer's); the reward
  components are logged as ``<env>/<component>`` metrics.
- ``trl_env_dataset(env, n)``: prompts as chat messages with the ``index``/``seed`` columns that
  ``reset`` reads to put the environment on the same task.

A tool call is the env step it stands for (``search(query)`` is ``<search> query </search>``),
so turn limits, observation text and the reward are the env's own.
"""

from __future__ import annotations

import inspect
from typing import Any, Callable, Sequence

from rlvr.envs import Tool, env_spec
from rlvr.integrations.episodes import Episode, Transition, check_env_name, episode_rows
from rlvr.models.prompt_formats import export_settings


class RlvrEnvironment:
    """Base of the generated classes; only ``reset`` and the tools are public (TRL turns every
    other public method into a tool)."""

    _env_name: str = ""

    def __init__(self, **env_kwargs: Any):
        self._episode = Episode(self._env_name, **env_kwargs)

    def reset(self, **example: Any) -> None:
        """Start the episode of the row's task (``index``, ``seed`` columns; a random task of
        the env's split without them). Returns None: the prompt is the row's ``prompt``."""
        self._episode.reset(seed=example.get("seed"), index=example.get("index"))
        return None

    def _finish(self, final_text: str) -> Transition:
        return self._episode.finish(final_text)


def _tool_method(tool: Tool) -> Callable[..., str]:
    """A method ``tool.name(self, <tool.argument>: str) -> str`` stepping the env."""

    def method(self: RlvrEnvironment, *args: Any, **kwargs: Any) -> str:
        if args:
            kwargs.setdefault(tool.argument, args[0])
        if set(kwargs) != {tool.argument}:
            raise ValueError(
                f"{tool.name} takes one argument {tool.argument!r}, got {sorted(kwargs)}"
            )
        t = self._episode.call_tool(tool.name, kwargs[tool.argument])
        if t.done and not t.observation:
            return "The episode is over (turn limit reached); no more tool calls."
        return t.observation

    method.__name__ = method.__qualname__ = tool.name
    method.__doc__ = (
        f"{tool.description}\n\nArgs:\n    {tool.argument}: {tool.argument_doc}\n\n"
        f"Returns:\n    {tool.returns}\n"
    )
    method.__annotations__ = {tool.argument: str, "return": str}
    method.__signature__ = inspect.Signature(
        [
            inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD),
            inspect.Parameter(
                tool.argument, inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=str
            ),
        ],
        return_annotation=str,
    )
    return method


_CLASSES: dict[str, type] = {}


def environment_class(env: str) -> type:
    """The TRL environment class of a registered env (one class per env, cached)."""
    check_env_name(env)
    if env not in _CLASSES:
        members: dict[str, Any] = {
            "_env_name": env,
            "__module__": __name__,
            "__doc__": f"rlvr's {env} environment for TRL's GRPOTrainer.",
        }
        for tool in env_spec(env).tools:
            members[tool.name] = _tool_method(tool)
        name = "".join(part.capitalize() for part in env.split("_")) + "Environment"
        _CLASSES[env] = type(name, (RlvrEnvironment,), members)
    return _CLASSES[env]


def environment_factory(
    env: str, *, model: str | None = None, **env_kwargs: Any
) -> Callable[[], RlvrEnvironment]:
    """``environment_factory`` for ``GRPOTrainer``: makes instances of ``environment_class(env)``
    with ``env_kwargs`` (e.g. ``dataset="nq", retriever="http://127.0.0.1:8000"``), over the
    prompt format ``model`` carries when given (``rlvr.models.prompt_formats``)."""
    cls = environment_class(env)
    env_kwargs = export_settings(model, env, env_kwargs, chat=True)
    cls(**env_kwargs)._episode.close()  # bad env arguments fail here, not inside the trainer

    def factory() -> RlvrEnvironment:
        return cls(**env_kwargs)

    return factory


def final_assistant_text(completion: Any) -> str:
    """The last assistant message's text of a conversational completion (a string as is)."""
    if isinstance(completion, str):
        return completion
    for message in reversed(list(completion or [])):
        if isinstance(message, dict) and message.get("role") == "assistant":
            content = message.get("content") or ""
            if isinstance(content, list):
                content = "".join(c.get("text", "") for c in content if isinstance(c, dict))
            return str(content)
    return ""


def episode_reward(
    prompts: Sequence[Any],
    completions: Sequence[Any],
    *,
    environments: Sequence[RlvrEnvironment] | None = None,
    log_metric: Callable[[str, float], None] | None = None,
    **kwargs: Any,
) -> list[float]:
    """TRL reward function: each rollout's episode ended with its final assistant message; the
    Gymnasium env's reward. Needs ``environment_factory`` (TRL passes ``environments``)."""
    if environments is None:
        raise ValueError("environments: episode_reward needs GRPOTrainer(environment_factory=...)")
    if len(environments) != len(completions):
        raise ValueError(f"environments: {len(environments)} for {len(completions)} completions")
    finals = [e._finish(final_assistant_text(c)) for e, c in zip(environments, completions)]
    if log_metric is not None and finals:
        env = environments[0]._episode.name
        for key in sorted({k for t in finals for k in t.components}):
            mean = sum(t.components.get(key, 0.0) for t in finals) / len(finals)
            log_metric(f"{env}/{key}", mean)
    return [t.reward for t in finals]


def trl_env_dataset(env: str, n: int, **kwargs: Any):
    """``datasets.Dataset`` of ``episodes.episode_rows(env, n, **kwargs)``: ``prompt`` (chat
    messages), ``index`` and ``seed``, which ``reset`` reads; ``model=`` as for
    ``environment_factory``."""
    from datasets import Dataset

    model = kwargs.pop("model", None)
    if model is not None:
        kwargs["env_kwargs"] = export_settings(
            model, env, kwargs.get("env_kwargs") or {}, chat=True
        )
    return Dataset.from_list(episode_rows(env, n, **kwargs))
