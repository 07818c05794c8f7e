"""One text episode of any registered rlvr environment: the layer every stack adapter shares.

The Gymnasium environments are the one implementation of each task. ``Episode`` drives one of
them through text only (``reset`` -> prompt and chat messages, ``step(text)``, a tool call
rendered as the env action it stands for, ``finish(final_text)``), so an adapter to TRL,
verifiers or OpenEnv only translates its library's calls into these; it never parses a response
or scores one itself. Which envs exist, which are multi-turn and their tools come from the env
registry (``rlvr.envs.registry``): a new env registered there appears in every adapter.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym

from rlvr.envs import ENVS, Tool, env_spec, require_env


def env_names() -> list[str]:
    """Short names of every registered env (``kk``, ``math``, ``searchqa``, ...)."""
    return sorted(ENVS)


def check_env_name(env: str) -> str:
    """``env`` if it names a registered env, else a one-line ``ValueError`` (``ConfigError``)."""
    require_env(env)
    return env


def jsonable(value: Any) -> Any:
    """``value`` made JSON-safe for a wire format: containers recursively, numbers kept (a NaN
    or infinity becomes None), anything else as ``str``."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [jsonable(v) for v in value]
    if hasattr(value, "item") and callable(value.item):  # numpy scalars
        try:
            return jsonable(value.item())
        except (TypeError, ValueError):
            pass
    return str(value)


@dataclass(frozen=True)
class Transition:
    """What one ``gymnasium`` step returned, with ``done = terminated or truncated``."""

    observation: str
    reward: float
    terminated: bool
    truncated: bool
    info: dict = field(default_factory=dict)

    @property
    def done(self) -> bool:
        return self.terminated or self.truncated

    @property
    def components(self) -> dict[str, float]:
        """The reward breakdown the env's scorer reported (``info["reward_components"]``)."""
        return dict(self.info.get("reward_components") or {})


class Episode:
    """One env instance, reused across episodes (``reset`` starts a new one).

    Args:
        env: a registered short name (``kk``, ``math``, ``searchqa``).
        **env_kwargs: the env's own arguments, as for ``gymnasium.make``.
    """

    def __init__(self, env: str, **env_kwargs: Any):
        self.name = check_env_name(env)
        spec = env_spec(env)
        self.env_id = spec.id
        self.env_kwargs = dict(env_kwargs)
        self.env = gym.make(self.env_id, **self.env_kwargs)
        self.multi_turn = spec.multi_turn
        self.tools: dict[str, Tool] = {t.name: t for t in spec.tools}
        self.prompt: str | None = None
        self.info: dict = {}
        self.steps: list[Transition] = []

    # -- episode ------------------------------------------------------------------------------
    def reset(self, seed: int | None = None, index: int | None = None) -> tuple[str, dict]:
        """Start an episode: task ``index`` of the env's split when given (``options["index"]``,
        which every rlvr env accepts), else one drawn with ``seed``."""
        options = {} if index is None else {"index": _as_index(index)}
        self.prompt, self.info = self.env.reset(
            seed=None if seed is None else int(seed), options=options
        )
        self.steps = []
        return self.prompt, self.info

    @property
    def messages(self) -> list[dict[str, str]]:
        """The prompt as chat messages (``info["messages"]``) for stacks that template it."""
        self._check_started()
        return [{"role": m["role"], "content": m["content"]} for m in self.info["messages"]]

    @property
    def done(self) -> bool:
        return bool(self.steps) and self.steps[-1].done

    def step(self, text: Any) -> Transition:
        """One policy turn; after the end of an episode a ``RuntimeError`` (as the env does)."""
        self._check_started()
        obs, reward, terminated, truncated, info = self.env.step(text)
        transition = Transition(str(obs), float(reward), bool(terminated), bool(truncated), info)
        self.steps.append(transition)
        return transition

    def call_tool(self, name: str, value: Any) -> Transition:
        """The tool call ``name(value)`` taken as the env step it stands for; a call after the
        episode ended is not stepped and returns the last transition."""
        self._check_started()
        if name not in self.tools:
            raise ValueError(
                f"tool: {name!r} is not a tool of {self.name} "
                f"(tools: {sorted(self.tools) or 'none'})"
            )
        if self.done:
            return self.steps[-1]
        return self.step(self.tools[name].action(value))

    def finish(self, text: Any) -> Transition:
        """End the episode with the policy's final text: stepped unless the episode already
        ended (a tool call hit the turn limit), in which case that last transition stands."""
        self._check_started()
        if self.done:
            return self.steps[-1]
        return self.step(text)

    @property
    def reward(self) -> float:
        """The episode's reward: the env's reward on its last step (0 while it runs)."""
        return self.steps[-1].reward if self.done else 0.0

    @property
    def components(self) -> dict[str, float]:
        return self.steps[-1].components if self.done else {}

    def close(self) -> None:
        self.env.close()

    def _check_started(self) -> None:
        if self.prompt is None:
            raise RuntimeError("call reset() before using the episode")


def _as_index(index: Any) -> int:
    if isinstance(index, bool) or not hasattr(index, "__index__"):
        raise ValueError(f"index: must be an int, got {index!r}")
    return int(index.__index__())


def episode_rows(
    env: str, n: int, *, seed: int = 0, start: int = 0, env_kwargs: dict | None = None
) -> list[dict]:
    """Rows ``{"prompt": chat messages, "index": i, "seed": seed}`` for tasks ``start..start+n``
    of ``env``: what a stack's dataset needs to reset an ``Episode`` on the same task."""
    if n < 0:
        raise ValueError(f"n: must be >= 0, got {n}")
    episode = Episode(env, **(env_kwargs or {}))
    try:
        rows = []
        for i in range(start, start + n):
            episode.reset(seed=seed, index=i)
            rows.append({"prompt": episode.messages, "index": i, "seed": seed})
        return rows
    finally:
        episode.close()
