"""Warm starts: the supervised data a tiny base model of an environment is built from.

An environment with a warm start declares a ``TraceBuilder`` in its own package
(``rlvr/envs/<env>/traces.py``) and names it in its ``EnvSpec.traces``; ``rlvr.models.build``
reads every one through this module, so a new environment's base is one builder plus its
registration.

Prompts come from the environments themselves (``reset`` on the ``train`` split), so a base
model is trained on exactly the text the RL trainer will show it; a task's ``settings`` are the
environment's keyword arguments plus the builder's trace options (``TraceBuilder.options``), and
the targets are built from the environment's answers.

An example is a list of ``(text, trainable)`` segments (``Segment``, trained by
``rlvr.models.sft``).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from rlvr.envs.registry import ENVS, env_spec, load

#: One piece of an example: its text and whether the model is trained to produce it.
Segment = tuple[str, bool]


@dataclass(frozen=True)
class EvalItem:
    prompt: str
    ground_truth: Any
    group: str
    info: dict[str, Any] = field(default_factory=dict)


def take(it, n: int) -> list:
    return list(itertools.islice(it, n))


def share(settings: dict[str, Any], key: str) -> float:
    """The trace option ``key``: a share of the examples, in [0, 1) (default 0)."""
    value = float(settings.get(key, 0.0))
    if not 0.0 <= value < 1.0:
        raise ValueError(f"{key} must be in [0, 1), got {value}")
    return value


@dataclass(frozen=True)
class TraceBuilder:
    """The warm start of one task (``EnvSpec.traces``): an endless seeded stream of training
    examples, the held-out items a base is checked on, the trace options (``settings`` keys that
    are not env arguments), the response budget of that check (``rlvr.models.evaluate``) and the
    task's tiny settings.

    ``tiny``: the environment settings of the tiny bases and the tiny training profile: the
    ``plain`` template and no system turn. A model trained from scratch learns the response
    format from the warm start, not from instructions, and training cost is linear in tokens:
    the shortest system prompt (46 tokens) would be ~30 % of a 3-person K&K example."""

    examples: Callable[[dict[str, Any], int, str], Iterator[list[Segment]]]
    eval_items: Callable[[dict[str, Any], int, str], list[EvalItem]]
    options: tuple[str, ...] = ()
    max_new_tokens: int = 256
    tiny: Mapping[str, Any] = field(default_factory=dict)
    #: ``unslip(response, ground_truth, settings)``: the response with the planted slip of a
    #: slipped warm start read back (the K&K name slip), so a base draw's acceptance check
    #: (``rlvr.models.accept``) measures what the draw can do, not the slip it was taught.
    unslip: Callable[[str, Any, dict[str, Any]], str] | None = None


def tasks() -> list[str]:
    """The registered environments with a warm start."""
    return [name for name, spec in ENVS.items() if spec.traces is not None]


def builder(task: str) -> TraceBuilder:
    if task not in tasks():
        raise ValueError(f"task must be one of {tuple(tasks())}, got {task!r}")
    return load(env_spec(task).traces)


def tiny_settings(task: str) -> dict[str, Any]:
    """The tiny settings of ``task`` (``TraceBuilder.tiny``)."""
    return dict(builder(task).tiny)


def env_kwargs(task: str, settings: dict[str, Any]) -> dict[str, Any]:
    """The environment's keyword arguments in ``settings`` (trace options removed)."""
    options = builder(task).options
    return {k: v for k, v in settings.items() if k not in options}


def make_env(task: str, settings: dict[str, Any], split: str = "train"):
    """The environment itself (not a Gymnasium wrapper: traces read its attributes)."""
    return env_spec(task).entry()(split=split, **env_kwargs(task, settings))


def as_list(value) -> list:
    """A setting that takes one size or several (``3`` or ``[2, 3, 4]``) as a list."""
    return [value] if isinstance(value, int) else list(value)


def grouped_eval_items(
    task: str, key: str, values, settings: dict[str, Any], n: int, split: str
) -> list[EvalItem]:
    """Items ``0..n-1`` of the ``split`` for each value of the env kwarg ``key`` (one group
    each)."""
    values = as_list(values)
    items = []
    for value in dict.fromkeys(values):
        env = make_env(task, {**settings, key: value}, split)
        for i in range(n):
            prompt, info = env.reset(seed=0, options={"index": i})
            items.append(EvalItem(prompt, info["ground_truth"], f"{task}{value}", {key: value}))
    return items


def example_stream(
    task: str, settings: dict[str, Any], seed: int = 0, split: str = "train"
) -> Iterator[list[Segment]]:
    """An endless, seeded stream of training examples for ``task``."""
    return builder(task).examples(settings, seed, split)


def tokenizer_texts(
    task: str, settings: dict[str, Any], n: int, seed: int = 0, wrap=lambda stream: stream
) -> list[str]:
    """``n`` full texts (prompt + response) of ``task`` for training a tokenizer (``wrap``: an
    iterator around the example stream, a progress bar)."""
    stream = wrap(example_stream(task, settings, seed))
    return ["".join(text for text, _ in ex) for ex in take(stream, n)]


def eval_items(task: str, settings: dict[str, Any], n: int, split: str = "test") -> list[EvalItem]:
    """The first ``n`` held-out items per group (K&K: per size; math: per level; search QA: all
    questions together) of ``task``."""
    return builder(task).eval_items(settings, n, split)
