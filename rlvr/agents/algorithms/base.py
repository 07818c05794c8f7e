"""What a method is: an ``Algorithm``, the typed ``Param``s it reads, its ``Stage``s.

An ``Algorithm`` holds everything every engine needs to know about a method (its fields below):
its weight function, the ``WeightConfig`` fields it reads (each a ``Param`` with its type,
default and interval: the one range check), its stages or token selection, what verl needs and
how it is drawn. ``rlvr.agents.weights.token_weights`` applies a weight (no gradient, masked
zeros); ``rlvr.training.update`` runs the stages; ``Algorithm.verl_path`` says how verl runs it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from rlvr import registries
from rlvr.config import check_interval

if TYPE_CHECKING:  # the registry itself needs no torch: a configuration is checked without it
    import torch

#: ``fn(*, logprobs, mask, logits, old_logprobs, entropy, **params) -> w`` (tensors ``[B, T]``).
WeightFn = Callable[..., "torch.Tensor"]
#: ``params(weight_config) -> dict`` of keyword arguments for the weight / selection / stages.
ParamsFn = Callable[[Any], dict[str, Any]]
#: ``stages(old_logprobs, mask, params) -> [Stage, ...]`` (masks ``[B, T]``).
StagesFn = Callable[["torch.Tensor", "torch.Tensor", Mapping[str, Any]], list["Stage"]]
#: ``select_tokens(entropy, mask, params) -> bool mask [B, T]`` on the current forward.
SelectFn = Callable[["torch.Tensor", "torch.Tensor", Mapping[str, Any]], "torch.Tensor"]
#: ``calibrate(params, *, logprobs, logits, mask) -> (params, record)``: the parameters set to
#: ``CALIBRATED`` filled from the current policy's first batch, and what the run records of it.
CalibrateFn = Callable[..., tuple[dict[str, Any], dict[str, Any]]]
#: Inputs of every weight function besides its parameters.
INPUTS = ("logprobs", "mask", "logits", "old_logprobs", "entropy")
#: A parameter's value when the method sets it from the model's own first batch
#: (``Algorithm.calibrate``): the trainer replaces it by a number before the first update.
CALIBRATED = "calibrated"


def pending_calibration(params: Mapping[str, Any]) -> list[str]:
    """The parameters of ``params`` still ``CALIBRATED``."""
    return [k for k, v in params.items() if isinstance(v, str) and v == CALIBRATED]


@dataclass(frozen=True)
class Param:
    """A ``WeightConfig`` field: its type and default, the interval a set value must lie in
    (``"(0, 1]"``, ``"(-inf, inf)"`` for "finite"; ``None`` always passes, it means "the
    method's default"), and the keyword the method passes it as (``ar_alpha`` -> ``alpha``)."""

    name: str
    default: Any
    type: Any = float
    interval: str = ""
    keyword: str = ""

    @property
    def arg(self) -> str:
        return self.keyword or self.name

    def check(self, value: Any, key: str = "") -> None:
        """``ConfigError`` (a ``ValueError``) naming ``key`` (default: the field) when a set
        ``value`` lies outside the interval."""
        if self.interval and value is not None and not pending_calibration({"": value}):
            check_interval(key or self.name, value, self.interval)


@dataclass(frozen=True)
class Stage:
    """One pass of optimizer steps over the whole batch restricted to ``tokens`` (bool ``[B, T]``).

    Outside ``tokens`` the advantage is zero and KL does not count, while the loss is still
    averaged over every response token (the normaliser stays the full response mask).
    """

    name: str
    tokens: torch.Tensor


def _fields_as_keywords(algorithm: "Algorithm") -> ParamsFn:
    return lambda wc: {p.arg: getattr(wc, p.name) for p in algorithm.fields}


@dataclass(frozen=True)
class Algorithm:
    name: str
    label: str
    color: str
    #: The weight function (``None``: every token weighs 1).
    weight: WeightFn | None = None
    #: The ``WeightConfig`` fields the method reads.
    fields: tuple[Param, ...] = ()
    #: ``WeightConfig`` -> keyword parameters (``None``: each field under its keyword).
    params: ParamsFn | None = None
    #: Stages of one batch in order (``None``: one stage over all response tokens).
    stages: StagesFn | None = None
    #: Number of stages ``stages`` returns (optimizer steps per mini-batch and epoch).
    n_stages: int = 1
    #: Token selection on the current training forward (``None``: all response tokens).
    select_tokens: SelectFn | None = None
    #: ``selected(params, n) ->`` tokens ``select_tokens`` keeps of ``n`` valid ones.
    selected: Callable[[Mapping[str, Any], int], int] | None = None
    #: Old-policy log-probs are needed even on-policy (the weight or the stages read them).
    needs_old_logprobs: bool = False
    #: The weight reads only (old) log-probs, so verl can run it as a registered policy loss.
    policy_loss: bool = False
    #: ``needs_logits(params)``: the weight reads the sampled token's logit.
    needs_logits: Callable[[Mapping[str, Any]], bool] = field(default=lambda params: False)
    #: Other forms a reproduction also launches: name -> ``TrainConfig`` overrides.
    variants: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    #: Where the method and its constants come from (shown by ``rlvr algorithms``).
    source: str = ""
    #: Fills the parameters set to ``CALIBRATED`` from the first batch (``None``: none are).
    calibrate: CalibrateFn | None = None

    def parameters(self, wc) -> dict[str, Any]:
        """The keyword parameters of ``WeightConfig`` ``wc``, each inside its field's interval
        (``ValueError`` naming it)."""
        params = (self.params or _fields_as_keywords(self))(wc)
        for p in self.fields:
            p.check(params.get(p.arg), p.arg)
        return params

    def verl_path(self, params: Mapping[str, Any], kl_weighting: str = "none") -> str:
        """How the method reaches verl: ``vanilla`` (verl's own loss: no weight, no selection, no
        stages), ``policy_loss`` (a registered policy loss: a weight of log-probs only) or
        ``actor_loss`` (the whole actor loss through ``set_loss_fn``: anything else, a weight
        still to be calibrated, which needs state across calls, and a weighted KL term, which
        verl adds outside a policy loss)."""
        if self.stages is not None or self.select_tokens is not None:
            return "actor_loss"
        if self.weight is None:
            return "vanilla"
        plain = self.policy_loss and not self.needs_logits(params) and kl_weighting == "none"
        return "policy_loss" if plain and not pending_calibration(params) else "actor_loss"


def require(name: str, value: torch.Tensor | None, like: torch.Tensor, method: str) -> torch.Tensor:
    """``value``, which method ``method`` needs, shaped like ``like`` (ValueError otherwise)."""
    if value is None:
        raise ValueError(f"{name}: weight scheme {method!r} needs {name}")
    if value.shape != like.shape:
        raise ValueError(
            f"{name}: shape {tuple(value.shape)} != logprobs shape {tuple(like.shape)}"
        )
    return value


ALGORITHMS: dict[str, Algorithm] = {}


def register_algorithm(algorithm: Algorithm) -> Algorithm:
    """Add ``algorithm`` to the registry (a second, different one under the same name raises)."""
    return registries.add(ALGORITHMS, algorithm.name, algorithm, "algo")
