"""The algorithm registry: one registered ``Algorithm`` per method, one file per algorithm.

An ``Algorithm`` says everything the update loop (``rlvr.agents.update``), the verl actor
extension, the reproduce grid and the plots need to know about a method:

- ``weight``: the per-token weight on the clipped surrogate (a scheme of ``rlvr.agents.weights``,
  or ``None`` for ``w = 1``) and ``params``, which ``WeightConfig`` fields it reads;
- ``stages``: the token stages of one batch, each a full pass of optimizer steps (Lopti's two);
- ``select_tokens``: a token selection made on the current training forward (80/20);
- ``needs_old_logprobs``: whether old-policy log-probs are needed even when the update is
  on-policy (the weight or the stages read them);
- ``label`` and ``color`` for tables and figures.

Every module of this package is imported when the registry is first read, so a new method is one
file here that calls ``register_algorithm`` (see ``docs/algorithms.md``). A module outside the
package registers the same way once imported (``rlvr train ... plugins=my.module``).
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

#: ``params(weight_config) -> dict`` of keyword arguments for the weight scheme / selection.
ParamsFn = Callable[[Any], dict[str, Any]]
#: ``stages(old_logprobs, mask, params) -> [Stage, ...]`` (masks ``[B, T]``).
StagesFn = Callable[[torch.Tensor, torch.Tensor, Mapping[str, Any]], list["Stage"]]
#: ``select_tokens(entropy, mask, params) -> bool mask [B, T]`` on the current forward.
SelectFn = Callable[[torch.Tensor, torch.Tensor, Mapping[str, Any]], torch.Tensor]


@dataclass(frozen=True)
class Stage:
    """One pass of optimizer steps over the whole batch restricted to ``tokens`` (bool ``[B, T]``).

    Outside ``tokens`` the advantage is zero and KL does not count, while the loss is still
    averaged over every response token (the normaliser stays the full response mask).
    """

    name: str
    tokens: torch.Tensor


@dataclass(frozen=True)
class Algorithm:
    name: str
    label: str
    color: str
    #: A scheme registered in ``rlvr.agents.weights`` (``None``: every token weighs 1).
    weight: str | None = None
    #: ``WeightConfig`` -> keyword parameters of ``weight`` and of ``select_tokens``/``stages``.
    params: ParamsFn = field(default=lambda wc: {})
    #: Stages of one batch in order (``None``: one stage over all response tokens).
    stages: StagesFn | None = None
    #: Number of stages ``stages`` returns (optimizer steps per mini-batch and epoch).
    n_stages: int = 1
    #: Token selection on the current training forward (``None``: all response tokens).
    select_tokens: SelectFn | None = None
    #: Old-policy log-probs are needed even on-policy (the weight or the stages read them).
    needs_old_logprobs: bool = False
    #: Where the method and its constants come from (shown by ``rlvr algorithms``).
    source: str = ""


ALGORITHMS: dict[str, Algorithm] = {}
_discovered = False


def register_algorithm(algorithm: Algorithm) -> Algorithm:
    """Add ``algorithm`` to the registry (a second, different one under the same name raises)."""
    known = ALGORITHMS.get(algorithm.name)
    if known is not None and known != algorithm:
        raise ValueError(f"algo: {algorithm.name!r} is already registered")
    ALGORITHMS[algorithm.name] = algorithm
    return algorithm


def _discover() -> None:
    global _discovered
    if _discovered:
        return
    _discovered = True
    for module in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{module.name}")


def algorithm_names() -> list[str]:
    """Registered algorithm names (registration order: the built-ins by module name)."""
    _discover()
    return list(ALGORITHMS)


def get_algorithm(name: str) -> Algorithm:
    """The registered algorithm ``name`` (``ValueError`` naming the known ones otherwise)."""
    _discover()
    algo = ALGORITHMS.get(name)
    if algo is None:
        raise ValueError(f"algo: {name!r} is not one of {sorted(ALGORITHMS)}")
    return algo


def load_plugins(modules: list[str] | tuple[str, ...]) -> None:
    """Import each module of ``modules`` (dotted names) so that its algorithms register."""
    for name in modules:
        try:
            importlib.import_module(name)
        except ImportError as e:
            raise ValueError(f"plugins: cannot import {name!r}: {e}") from e


__all__ = [
    "ALGORITHMS",
    "Algorithm",
    "Stage",
    "algorithm_names",
    "get_algorithm",
    "load_plugins",
    "register_algorithm",
]
