"""The algorithm registry: one registered ``Algorithm`` per method, one file per method.

A method's file holds everything every engine needs (``base.Algorithm``): its weight function
(the math, named as in its paper), the ``WeightConfig`` fields it reads with their defaults and
intervals, its stages or token selection, and what verl needs. Every module of this package is
imported with it, so a new method is one file here that calls ``register_algorithm`` (see
``docs/algorithms.md``); a module elsewhere registers the same way once imported
(``rlvr train ... plugins=my.module``, its parameters in ``weights.extra``).

``WeightConfig`` is generated from the registered fields: the typed ``weights.*`` section of
``rlvr train`` (``rlvr.training.train_config``), of verl's ``rlvr.params`` and of the verl plugin's
policy-loss config.
"""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil
from typing import Any, Optional

from rlvr.agents.algorithms.base import (
    ALGORITHMS,
    Algorithm,
    Param,
    Stage,
    pending_calibration,
    register_algorithm,
)
from rlvr.config import did_you_mean

for _module in pkgutil.iter_modules(__path__):
    if _module.name != "base":
        importlib.import_module(f"{__name__}.{_module.name}")


def algorithm_names() -> list[str]:
    """Registered algorithm names (registration order: the built-ins by module name)."""
    return list(ALGORITHMS)


def get_algorithm(name: str) -> Algorithm:
    """The registered algorithm ``name`` (``ValueError`` naming the known ones otherwise)."""
    algo = ALGORITHMS.get(name)
    if algo is None:
        raise ValueError(
            f"algo: {name!r} is not one of {sorted(ALGORITHMS)}{did_you_mean(name, ALGORITHMS)}"
        )
    return algo


def load_plugins(modules: list[str] | tuple[str, ...]) -> None:
    """Import each module of ``modules`` (dotted names) so that its algorithms register."""
    for name in modules:
        try:
            importlib.import_module(name)
        except ImportError as e:
            raise ValueError(f"plugins: cannot import {name!r}: {e}") from e


def registered_fields(algorithms=None) -> dict[str, Param]:
    """Every ``WeightConfig`` field the ``algorithms`` (default: all registered) read, once each
    (two methods sharing a field must declare the same ``Param``)."""
    out: dict[str, Param] = {}
    for algo in ALGORITHMS.values() if algorithms is None else algorithms:
        for p in algo.fields:
            if out.setdefault(p.name, p) != p:
                raise ValueError(f"weights.{p.name}: declared differently by {algo.name!r}")
    return out


def _weight_params(self, algo: str) -> dict:
    """Keyword parameters algorithm ``algo`` passes to its weight / selection / stages."""
    return get_algorithm(algo).parameters(self)


def _check_fields(self, prefix: str = "weights.") -> None:
    """Every field inside its interval (``ConfigError`` naming ``<prefix><field>``)."""
    for p in FIELDS.values():
        p.check(getattr(self, p.name), prefix + p.name)


#: The fields of the built-in methods, in registration order.
FIELDS = registered_fields()

WeightConfig = dataclasses.make_dataclass(
    "WeightConfig",
    [(p.name, p.type, dataclasses.field(default=p.default)) for p in FIELDS.values()]
    + [("extra", dict[str, float], dataclasses.field(default_factory=dict))],
    namespace={"params": _weight_params, "check": _check_fields},
)
WeightConfig.__module__ = __name__
WeightConfig.__doc__ = """Parameters of the token weights and selections, for every algorithm:
the fields the registered methods declare (``Algorithm.fields``), each algorithm reading its own
(``params(algo)``); ``extra`` holds the parameters of methods registered outside this package."""


def policy_loss_fields() -> dict[str, Any]:
    """``name -> Optional[type]`` of the fields of the methods verl runs as a policy loss (the
    keys of the verl plugin's loss config; ``None``: rlvr's default)."""
    loss_methods = [a for a in ALGORITHMS.values() if a.policy_loss]
    return {p.name: Optional[p.type] for p in registered_fields(loss_methods).values()}


def resolved_fields(weights, algo: str) -> dict[str, Any]:
    """The ``WeightConfig`` fields ``algo`` reads at their resolved values (GRPO-SG's ``alpha``:
    the default of its shaping input), plus ``extra`` when set: what a verl config carries, and
    rebuilding a ``WeightConfig`` from it gives the same parameters."""
    algorithm = get_algorithm(algo)
    params = algorithm.parameters(weights)
    out = {p.name: params.get(p.arg, getattr(weights, p.name)) for p in algorithm.fields}
    if weights.extra:
        out["extra"] = dict(weights.extra)
    return out


def calibrated_fields(algo: str) -> list[str]:
    """The parameters ``algo`` sets from the first batch when left unset (``Algorithm.calibrate``;
    GRPO-SG: alpha, tau, mu)."""
    algorithm = get_algorithm(algo)
    return pending_calibration(algorithm.parameters(WeightConfig())) if algorithm.calibrate else []


__all__ = [
    "ALGORITHMS",
    "calibrated_fields",
    "FIELDS",
    "Algorithm",
    "Param",
    "Stage",
    "WeightConfig",
    "algorithm_names",
    "get_algorithm",
    "load_plugins",
    "policy_loss_fields",
    "register_algorithm",
    "registered_fields",
    "resolved_fields",
]
