"""Gymnasium environments with verifiable rewards.

``import rlvr`` registers them; ``gymnasium.make("rlvr/KnightsKnaves-v0", n_people=3)`` etc.
Entry points are strings, so importing one environment never imports another.
"""

from __future__ import annotations

import importlib
import inspect

import gymnasium as gym

from rlvr.envs.base import AnyText, Score, SingleTurnEnv, Tool, coerce_text

ENV_IDS = {
    "rlvr/KnightsKnaves-v0": "rlvr.envs.kk.env:KnightsKnavesEnv",
    "rlvr/Math-v0": "rlvr.envs.math.env:MathEnv",
    "rlvr/SearchQA-v0": "rlvr.envs.searchqa.env:SearchQAEnv",
}

#: Short names used on the command line and in configs -> (gymnasium id, pure scorer).
ENV_NAMES = {
    "kk": ("rlvr/KnightsKnaves-v0", "rlvr.envs.kk:score"),
    "math": ("rlvr/Math-v0", "rlvr.envs.math:score"),
    "searchqa": ("rlvr/SearchQA-v0", "rlvr.envs.searchqa:score"),
}

#: The tools of each multi-turn env, for stacks that call tools by name (TRL's environment
#: methods, verifiers' and OpenEnv's tool calls): a call ``name(argument)`` is the env step
#: ``Tool.action``. A new multi-turn env lists its tools here and every adapter exposes them.
ENV_TOOLS: dict[str, tuple[Tool, ...]] = {
    "rlvr/SearchQA-v0": (
        Tool(
            name="search",
            argument="query",
            template="<search> {} </search>",
            description="Search the knowledge base (titled passages) for a query.",
            argument_doc="What to look up, as a short search-engine query.",
            returns="The best matching passages inside <information>, one per line as "
            "\"Doc i(Title: title) text\".",
        ),
    ),
}


def env_tools(name: str) -> tuple[Tool, ...]:
    """The tools of an env (short name or gymnasium id); () for single-turn envs."""
    return ENV_TOOLS.get(env_id(name), ())


def env_id(name: str) -> str:
    """``"kk"`` -> ``"rlvr/KnightsKnaves-v0"``; a full gymnasium id passes through."""
    if name in ENV_NAMES:
        return ENV_NAMES[name][0]
    if name in ENV_IDS:
        return name
    raise ValueError(
        f"unknown env {name!r}; choose one of {sorted(ENV_NAMES)} or {sorted(ENV_IDS)}"
    )


def env_accepts(name: str, kwarg: str) -> bool:
    """Whether the env ``name`` (short name or gymnasium id) takes keyword ``kwarg``."""
    entry = gym.spec(name if name in gym.registry else env_id(name)).entry_point
    if isinstance(entry, str):
        module, attr = entry.split(":")
        entry = getattr(importlib.import_module(module), attr)
    params = inspect.signature(entry).parameters
    return kwarg in params or any(p.kind is p.VAR_KEYWORD for p in params.values())


def make_env(name: str, split: str | None = None, **kwargs) -> gym.Env:
    """``gymnasium.make`` of an env by short name (``kk``) or gymnasium id.

    ``split`` is passed when given and the env takes one; an env without splits is built
    without it.
    """
    gid = name if name in gym.registry else env_id(name)
    if split is not None and env_accepts(gid, "split"):
        kwargs["split"] = split
    return gym.make(gid, **kwargs)


def get_scorer(name: str):
    """The pure ``score(response, ground_truth, **kw) -> Score`` function of an env."""
    short = next((k for k, (i, _) in ENV_NAMES.items() if i == name), name)
    if short not in ENV_NAMES:
        raise ValueError(f"unknown env {name!r}; choose one of {sorted(ENV_NAMES)}")
    module, attr = ENV_NAMES[short][1].split(":")
    return getattr(importlib.import_module(module), attr)


def register_all() -> None:
    for env_id, entry_point in ENV_IDS.items():
        if env_id not in gym.registry:
            gym.register(id=env_id, entry_point=entry_point, disable_env_checker=True)


__all__ = [
    "AnyText",
    "Score",
    "SingleTurnEnv",
    "Tool",
    "coerce_text",
    "ENV_IDS",
    "ENV_NAMES",
    "ENV_TOOLS",
    "env_accepts",
    "env_id",
    "env_tools",
    "get_scorer",
    "make_env",
    "register_all",
]
